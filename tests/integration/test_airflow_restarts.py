"""``logbus airflow`` with the real Airflow (what the topology's ``offline-airflow`` runs, local and in compose): the
database is created, the four components start and the strict health check passes; ``kill -9`` of the scheduler
(what ``airflow standalone`` never recovers from) brings a new scheduler whose heartbeat makes it healthy again, and
the dead one's LocalExecutor workers do not stay behind; SIGTERM stops everything. 33 s on this 2-core machine
when quiet, up to 105 s while other tests ran."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from datetime import datetime
from pathlib import Path

import pytest
from logbus.local import MARKER, airflow_healthy, leftovers
from support import REPO, free_port, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _children(pid: int) -> list[int]:
    out = []
    for entry in Path("/proc").iterdir():
        try:
            stat = (entry / "stat").read_text() if entry.name.isdigit() else ""
        except OSError:
            continue
        if stat and int(stat.rsplit(")", 1)[1].split()[1]) == pid:
            out.append(int(entry.name))
    return out


def _health(port: int) -> dict:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v2/monitor/health", timeout=3) as r:
            return json.loads(r.read())
    except (OSError, ValueError):
        return {}


def _pid(log: Path, pattern: str) -> int | None:
    found = re.findall(pattern, log.read_text())
    return int(found[-1]) if found else None


def test_the_runner_restarts_a_killed_scheduler_and_stops_everything_on_sigterm(tmp_path):
    port = free_port()
    (tmp_path / "dags").mkdir()
    passwords = tmp_path / "data" / "passwords.json"  # as in compose: not there, the api-server generates it
    passwords.parent.mkdir()
    # the topology's Airflow settings (logbus.topology), on loopback and a free port, no DAGs to parse
    env = dict(os.environ, AIRFLOW_HOME=str(tmp_path / "home"), AIRFLOW__CORE__DAGS_FOLDER=str(tmp_path / "dags"),
               AIRFLOW__CORE__LOAD_EXAMPLES="False", AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION="False",
               AIRFLOW__CORE__EXECUTOR="LocalExecutor", AIRFLOW__CORE__PARALLELISM="2",
               AIRFLOW__API__HOST="127.0.0.1", AIRFLOW__API__PORT=str(port),
               AIRFLOW__API__BASE_URL=f"http://127.0.0.1:{port}",
               AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS="admin:admin",
               AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS="False",
               AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE=str(passwords),
               # the log servers of the scheduler and triggerer (0.0.0.0:8793/8794 by default): not another's
               AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT=str(free_port()),
               AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT=str(free_port()),
               PYTHONPATH=str(REPO / "platform"), **{MARKER: str(tmp_path)})
    log = tmp_path / "airflow.log"
    with open(log, "ab") as out:
        runner = subprocess.Popen([sys.executable, "-m", "logbus.cli", "airflow"], cwd=tmp_path, env=env,
                                  stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                  start_new_session=True)
    try:
        began = time.monotonic()
        wait_until(lambda: airflow_healthy("127.0.0.1", port) or runner.poll() is not None, 180, interval=1,
                   what="Airflow healthy")
        assert runner.poll() is None, log.read_text()[-5000:]
        print(f"healthy after {time.monotonic() - began:.0f} s")
        text = log.read_text()
        assert "db-migrate: database ready" in text
        for name in ("scheduler", "dag-processor", "api-server", "triggerer"):
            assert f"logbus airflow: {name} started (pid" in text
        assert "admin" in json.loads(passwords.read_text())

        scheduler = _pid(log, r"scheduler started \(pid (\d+)\)")
        others = {n: _pid(log, rf"{n} started \(pid (\d+)\)") for n in ("dag-processor", "api-server", "triggerer")}
        workers = wait_until(lambda: _children(scheduler), 30, what="the scheduler's LocalExecutor workers")
        killed_at = datetime.now().astimezone()
        os.kill(scheduler, signal.SIGKILL)
        new = wait_until(lambda: _pid(log, r"scheduler restarted \(pid (\d+), restart 1\)"), 30,
                         what="a new scheduler")
        assert new != scheduler and "scheduler exited (SIGKILL)" in log.read_text()

        def healthy_again() -> bool:  # the new scheduler's own heartbeat, not the dead one's last
            health = _health(port)
            beat = (health.get("scheduler") or {}).get("latest_scheduler_heartbeat")
            return (airflow_healthy("127.0.0.1", port) and beat is not None
                    and datetime.fromisoformat(beat) > killed_at)

        wait_until(healthy_again, 90, interval=1, what="healthy with the new scheduler's heartbeat")
        print(f"healthy again {(datetime.now().astimezone() - killed_at).total_seconds():.0f} s after the kill")
        wait_until(lambda: not any(_alive(w) for w in workers), 30, what="the dead scheduler's workers gone")
        assert {n: _pid(log, rf"{n} started \(pid (\d+)\)") for n in others} == others
        assert all(_alive(pid) for pid in others.values()) and _alive(new)

        stopping = time.monotonic()
        runner.send_signal(signal.SIGTERM)
        assert runner.wait(timeout=60) == 0
        print(f"stopped in {time.monotonic() - stopping:.1f} s")
        assert log.read_text().rstrip().endswith("logbus airflow: stopped")
        time.sleep(0.5)
        assert leftovers(tmp_path) == []  # nothing carrying this test's marker: no component, worker or child
    finally:
        if runner.poll() is None:
            os.killpg(runner.pid, signal.SIGKILL)
            runner.wait()
        for pid in leftovers(tmp_path):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
