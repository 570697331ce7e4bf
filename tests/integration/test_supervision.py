"""``logbus up`` restarts crashed services (issue "Ride out faults", item 3): every service runs under a supervisor
that starts it again after a backoff whenever it exits, until it is told to stop (``logbus down``).

The first tests drive the supervisor (``logbus supervise``, what ``up`` runs) with small shell commands; the last
runs a ZooKeeper and a broker through ``logbus up``, ``kill -9``s the broker and expects it back by itself, with
``status --json`` showing the restart and the exit, and ``logbus down`` leaving nothing behind."""

from __future__ import annotations

import json
import os
import random
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support import REPO, free_port, kill_group, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


class Supervised:
    """``logbus supervise`` of one shell command, in its own session (as ``logbus up`` starts it)."""

    def __init__(self, state: Path, script: str):
        self.state = state
        (state / "pids").mkdir(parents=True, exist_ok=True)
        env = dict(os.environ, PYTHONPATH=str(REPO / "platform"), LOGBUS_TOPOLOGY_STATE=str(state))
        with open(state / "svc.log", "ab") as log:
            self.proc = subprocess.Popen([sys.executable, "-m", "logbus.cli", "supervise", "--state-dir",
                                          str(state), "--service", "svc", "--", "sh", "-c", script], cwd=state,
                                         env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                         start_new_session=True)

    def status(self) -> dict:
        try:
            return json.loads((self.state / "pids" / "svc.status").read_text())
        except (OSError, ValueError):
            return {}

    def running_child(self, other_than: int | None = None) -> int | None:
        child = self.status().get("service_pid")
        return child if child and child != other_than and _alive(child) else None

    def stop(self) -> None:
        kill_group(self.proc)


@pytest.fixture
def supervised(tmp_path):
    made = []

    def make(script: str) -> Supervised:
        made.append(Supervised(tmp_path, script))
        return made[-1]

    yield make
    for s in made:
        s.stop()


def test_a_crashing_service_is_restarted_with_growing_delays_and_its_exit_code_kept(supervised, tmp_path):
    sup = supervised('date +%s.%N >> runs; exit 3')
    runs = tmp_path / "runs"
    wait_until(lambda: runs.exists() and len(runs.read_text().split()) >= 3, 20, what="three runs")
    times = [float(t) for t in runs.read_text().split()]
    first, second = times[1] - times[0], times[2] - times[1]
    assert 0.9 < first < 5 and 1.9 < second < 8 and second > first + 0.5, times  # 1 s, then 2 s (+ start-up)
    status = wait_until(lambda: sup.status().get("restarts", 0) >= 2 and sup.status(), 5, what="the status")
    assert status["last_exit_code"] == 3 and status["state"] in ("restarting", "running")
    sup.proc.send_signal(signal.SIGTERM)  # stopped while it waits to restart: it exits, nothing runs again
    assert sup.proc.wait(10) == 0
    count = len(runs.read_text().split())
    time.sleep(5)
    assert len(runs.read_text().split()) == count
    assert sup.status()["state"] == "stopped"


def test_kill_9_of_the_service_restarts_it_and_sigterm_stops_it_for_good(supervised, tmp_path):
    # the service counts the SIGTERMs it gets, then exits
    sup = supervised('trap "echo term >> terms; exit 0" TERM; echo $$ >> starts; while :; do sleep 0.1; done')
    first = wait_until(sup.running_child, 10, what="the service")
    starts = tmp_path / "starts"
    # killed only once it has recorded its start: on a busy machine the shell may not have reached its first lines
    # when the supervisor records its pid, and a shell killed before its `echo` would leave one start, not two
    wait_until(lambda: starts.exists() and len(starts.read_text().split()) == 1, 10, what="the first start recorded")
    os.kill(first, signal.SIGKILL)
    second = wait_until(lambda: sup.running_child(other_than=first), 10, what="the service restarted")
    status = sup.status()
    assert status["restarts"] == 1 and status["last_exit_code"] == -9 and status["state"] == "running"
    # the new shell runs (the supervisor saw it) but may not have reached its first lines yet on a busy machine
    wait_until(lambda: len(starts.read_text().split()) == 2, 10, what="the second start recorded")
    sup.proc.send_signal(signal.SIGTERM)
    assert sup.proc.wait(10) == 0
    assert not _alive(second)
    assert (tmp_path / "terms").read_text().split() == ["term"]  # passed on once, not twice
    time.sleep(3)
    assert len(starts.read_text().split()) == 2, "restarted after being told to stop"


def test_kill_9_of_the_supervisor_stops_its_service(supervised):
    sup = supervised("while :; do sleep 0.1; done")
    child = wait_until(sup.running_child, 10, what="the service")
    os.kill(sup.proc.pid, signal.SIGKILL)
    sup.proc.wait()
    wait_until(lambda: not _alive(child), 10, what="the orphaned service to stop")


def logbus(*args: str, timeout: float = 240) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(REPO / "platform"))
    return subprocess.run([sys.executable, "-m", "logbus.cli", *args], env=env, capture_output=True, text=True,
                          timeout=timeout)


def _listening(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=1):
            return True
    except OSError:
        return False


def test_logbus_up_brings_a_killed_broker_back_by_itself(tmp_path):
    from logbus.local import leftovers

    net = f"127.{random.randrange(60, 250)}.{random.randrange(1, 250)}"
    topo = {"name": "supervision", "ports": {"zookeeper": free_port(f"{net}.10"), "broker": free_port(f"{net}.1")},
            "datacenters": {"t": {"network": net, "zookeeper": True, "brokers": 1}}}
    (tmp_path / "topology.json").write_text(json.dumps(topo))
    state = tmp_path / "state"
    broker = (f"{net}.1", topo["ports"]["broker"])
    try:
        out = logbus("up", "--topology", str(tmp_path / "topology.json"), "--state-dir", str(state))
        assert out.returncode == 0, out.stdout + out.stderr

        def row(name: str) -> dict:
            status = json.loads(logbus("status", "--json", "--state-dir", str(state)).stdout)
            return next(s for s in status["services"] if s["name"] == name)

        before = row("t-broker1")
        assert before["healthy"], before
        victim = before.get("service_pid") or before["pid"]  # the broker process itself
        os.kill(victim, signal.SIGKILL)
        wait_until(lambda: not _alive(victim), 10, what="the broker killed")

        def back() -> dict | None:
            r = row("t-broker1")
            return r if r["healthy"] and _listening(*broker) else None

        after = wait_until(back, 60, interval=0.5, what="the broker restarted by its supervisor")
        assert before["restarts"] == 0 and before["last_exit_code"] is None, before
        assert after["restarts"] >= 1 and after["last_exit_code"] == -9 and after["last_exit"] == "SIGKILL", after
        assert after["service_pid"] != victim and after["pid"] == before["pid"]
        table = logbus("status", "--state-dir", str(state)).stdout
        assert "restarts 1, last exit SIGKILL" in next(line for line in table.splitlines()
                                                      if line.startswith("t-broker1")), table
        assert "supervise: t-broker1 exited (SIGKILL)" in (state / "t-broker1" / "t-broker1.log").read_text()
    finally:
        out = logbus("down", "--state-dir", str(state), timeout=120)
        time.sleep(3)  # long enough for a supervisor that wrongly restarts to do it (the first delay is 1 s)
        left = leftovers(state.resolve())
        for pid in left:
            os.kill(pid, signal.SIGKILL)
    assert out.returncode == 0, out.stderr
    assert "stopped 2 services" in out.stdout
    assert left == [], f"processes left behind by logbus down: {left}"
    assert not _listening(*broker)
