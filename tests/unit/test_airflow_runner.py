"""``logbus airflow`` (``logbus.airflow_runner``), what replaces ``airflow standalone``: the database step first,
then every component kept running — restarted with growing delays whenever it exits — until SIGTERM or SIGINT,
which goes to every component (SIGKILL after a bound) before the runner exits. The runner is driven here with
fake components (small Python processes). And the stricter Airflow health check (local and compose), against a
tiny HTTP server: the API answering is not enough, the metadata database and the scheduler must be healthy.

(The runner tests start processes, a few seconds in all; with the real Airflow:
tests/integration/test_airflow_restarts.py.)
"""

from __future__ import annotations

import http.server
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from logbus.compose import _healthcheck, render
from logbus.local import MARKER, airflow_healthy, leftovers
from logbus.topology import Service, command, load, services
from support import REPO, free_port, kill_group, wait_until

# the runner's tests start fake components (small python processes): integration; the health checks are unit
pytestmark = pytest.mark.timeout(60)

# a fake component: python fake.py '{"label": ..., "ignore": bool, "children": [spec, ...], "session": bool,
# "exit": code, "record": path}' starts its children (fake components too, as the scheduler its LocalExecutor
# workers; "session": in a session of their own, as an Airflow task), then ignores SIGTERM and SIGINT if told to,
# prints "<label> ready <pid>", and sleeps (or appends the time to "record" and exits with "exit")
FAKE = """
import json, os, signal, subprocess, sys, time
spec = json.loads(sys.argv[1])
for child in spec.get("children", []):
    subprocess.Popen([sys.executable, __file__, json.dumps(child)], start_new_session=child.get("session", False))
if spec.get("ignore"):
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
if "record" in spec:
    with open(spec["record"], "a") as f:
        f.write(f"{time.time()}\\n")
os.write(1, f"{spec['label']} ready {os.getpid()}\\n".encode())  # one write: fakes share the log
if "exit" in spec:
    sys.exit(spec["exit"])
time.sleep(60)
"""
DRIVER = ("import json, sys; from logbus.airflow_runner import Runner; "
          "sys.exit(Runner(**json.loads(sys.argv[1])).run())")
STARTED = re.compile(r"logbus airflow: (\S+) (?:re)?started \(pid (\d+)")


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


class RunnerProcess:
    """The runner with the given components, in a session of its own, its output (and its children's) in
    ``runner.log``; every process it starts carries the test's marker, so teardown finds whatever is left."""

    def __init__(self, tmp_path: Path, components: dict, **options):
        self.tmp_path, self.log_path = tmp_path, tmp_path / "runner.log"
        fake = tmp_path / "fake.py"
        fake.write_text(FAKE)

        def argv(spec):
            return spec if isinstance(spec, list) else [sys.executable, str(fake), json.dumps(spec)]

        components = {name: argv(spec) for name, spec in components.items()}
        if "prepare" in options:
            options["prepare"] = argv(options["prepare"])
        env = dict(os.environ, PYTHONPATH=str(REPO / "platform"), **{MARKER: str(tmp_path)})
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen([sys.executable, "-c", DRIVER, json.dumps({"components": components,
                                                                                   **options})],
                                         cwd=tmp_path, env=env, stdin=subprocess.DEVNULL, stdout=log,
                                         stderr=subprocess.STDOUT, start_new_session=True)

    def text(self) -> str:
        return self.log_path.read_text()

    def pids(self) -> dict[str, list[int]]:
        out: dict[str, list[int]] = {}
        for name, pid in STARTED.findall(self.text()):
            out.setdefault(name, []).append(int(pid))
        return out

    def wait_started(self, counts: dict[str, int], timeout: float = 20) -> dict[str, list[int]]:
        return wait_until(lambda: (p := self.pids()) and all(len(p.get(n, [])) >= k for n, k in counts.items())
                          and p, timeout, what=f"components started {counts}")

    def ready(self, *labels: str, timeout: float = 20) -> dict[str, int]:
        """The pids of these fake processes, once they said they are ready."""

        def found():
            pids = {label: int(pid) for label, pid in re.findall(r"^(\S+) ready (\d+)$", self.text(), re.M)}
            return all(label in pids for label in labels) and {label: pids[label] for label in labels}

        return wait_until(found, timeout, what=f"{labels} ready")

    def stop(self) -> None:
        kill_group(self.proc)
        for pid in leftovers(self.tmp_path):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


@pytest.fixture
def runner(tmp_path):
    made: list[RunnerProcess] = []

    def make(components: dict, **options) -> RunnerProcess:
        made.append(RunnerProcess(tmp_path, components, **options))
        return made[-1]

    yield make
    for r in made:
        r.stop()


def sleeper(label: str, **spec) -> dict:
    return {"label": label, **spec}


@pytest.mark.integration
def test_a_component_killed_with_sigkill_is_started_again_and_the_others_are_untouched(runner):
    # the scheduler's workers: one stops on SIGTERM, one does not and runs a "task" in a session of its own
    scheduler = sleeper("scheduler", children=[sleeper("worker1"), sleeper("worker2", ignore=True, children=[
        sleeper("task", ignore=True, session=True)])])
    r = runner({"scheduler": scheduler, "dag-processor": sleeper("dag-processor"),
                "api-server": sleeper("api-server")}, initial=0.2, cap=1, leftover_grace=3)
    first = r.wait_started({"scheduler": 1, "dag-processor": 1, "api-server": 1})
    left = r.ready("scheduler", "worker1", "worker2", "task", "dag-processor", "api-server")
    os.kill(first["scheduler"][0], signal.SIGKILL)
    after = r.wait_started({"scheduler": 2})
    new = after["scheduler"][1]
    assert new != first["scheduler"][0] and _alive(new)
    assert "scheduler exited (SIGKILL)" in r.text() and "scheduler restarted (pid" in r.text()
    wait_until(lambda: not _alive(left["worker1"]), 10, what="worker1 stopped by SIGTERM")
    assert _alive(left["worker2"]) and _alive(left["task"])  # the grace before SIGKILL
    wait_until(lambda: not _alive(left["worker2"]) and not _alive(left["task"]), 10, what="SIGKILL after the grace")
    text = r.text()
    behind = re.search(r"scheduler left 3 processes behind \(([\d, ]+)\): SIGTERM", text)
    assert behind and sorted(map(int, behind.group(1).split(", "))) == sorted(
        left[n] for n in ("worker1", "worker2", "task")), text
    assert f"scheduler left 2 processes behind ({left['worker2']}, {left['task']}): SIGKILL" in text
    for name in ("dag-processor", "api-server"):
        assert after[name] == first[name] and _alive(first[name][0]), text
    assert r.proc.poll() is None


@pytest.mark.integration
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_stop_signal_goes_to_every_component_and_then_the_runner_exits(runner, sig):
    # the triggerer stops on the signal but its child does not; the stubborn component does not at all
    r = runner({"scheduler": sleeper("scheduler"), "triggerer": sleeper("triggerer", children=[
                sleeper("trigger-child", ignore=True)]), "stubborn": sleeper("stubborn", ignore=True)},
               stop_timeout=1.5)
    pids = r.wait_started({"scheduler": 1, "triggerer": 1, "stubborn": 1})
    child = r.ready("scheduler", "triggerer", "trigger-child", "stubborn")["trigger-child"]
    began = time.monotonic()
    os.kill(r.proc.pid, sig)
    assert r.proc.wait(timeout=15) == 0
    took = time.monotonic() - began
    assert 1.4 < took < 8, took  # the bound for the stubborn one, then SIGKILL
    for name in ("scheduler", "triggerer", "stubborn"):
        assert not _alive(pids[name][0]), name
    assert not _alive(child)  # its component stopped, it did not: killed with what was left
    text = r.text()
    assert f"stopping scheduler, triggerer, stubborn ({signal.Signals(sig).name})" in text
    assert f"scheduler stopped ({signal.Signals(sig).name})" in text
    assert "stubborn did not stop; killing it" in text and f"the components left 1 process behind ({child})" in text
    assert text.rstrip().endswith("logbus airflow: stopped") and "restarted" not in text  # nothing started again
    assert leftovers(r.tmp_path) == []


@pytest.mark.integration
def test_the_components_of_a_runner_killed_with_sigkill_get_sigterm_from_the_kernel(runner):
    r = runner({"scheduler": sleeper("scheduler"), "api-server": sleeper("api-server")})
    pids = r.ready("scheduler", "api-server")
    os.kill(r.proc.pid, signal.SIGKILL)
    r.proc.wait()
    wait_until(lambda: not any(_alive(pid) for pid in pids.values()), 10, what="the orphaned components stopped")


@pytest.mark.integration
def test_a_component_that_keeps_exiting_is_restarted_with_growing_delays_up_to_the_cap(runner, tmp_path):
    runs = tmp_path / "runs"
    r = runner({"scheduler": sleeper("scheduler"), "triggerer": sleeper("triggerer", exit=3, record=str(runs))},
               initial=0.3, cap=1.2)
    wait_until(lambda: runs.exists() and len(runs.read_text().split()) >= 6, 30, what="six starts")
    starts = [float(t) for t in runs.read_text().split()]
    gaps = [b - a for a, b in zip(starts, starts[1:])]
    # 0.3, 0.6, 1.2, 1.2, 1.2 s (+ the time to notice the exit and to start Python)
    for gap, delay in zip(gaps, (0.3, 0.6, 1.2, 1.2, 1.2)):
        assert delay <= gap < delay + 0.9, gaps  # (uncapped, the 4th would be 2.4 s)
    text = r.text()
    assert re.findall(r"triggerer exited \(code 3\) after [\d.]+ s; restarting in ([\d.]+) s", text)[:5] == \
        ["0.3", "0.6", "1.2", "1.2", "1.2"]
    assert r.proc.poll() is None and len(r.pids()["scheduler"]) == 1  # the runner never gives up, nor exits


@pytest.mark.integration
def test_the_database_step_is_retried_until_it_succeeds_and_no_component_starts_before(runner, tmp_path):
    tries = tmp_path / "tries"
    migrate = [sys.executable, "-c", f"import sys; p = {str(tries)!r}; open(p, 'a').write('x'); "
                                     "n = len(open(p).read()); print('try', n, flush=True); "
                                     "sys.exit(0 if n >= 3 else 1)"]
    r = runner({"scheduler": sleeper("scheduler")}, prepare=migrate, initial=0.2, cap=1)
    r.wait_started({"scheduler": 1})
    text = r.text()
    assert text.count("db-migrate failed (code 1); retrying in") == 2 and "try 3\n" in text
    assert text.index("db-migrate: database ready") < text.index("scheduler started (pid")
    assert tries.read_text() == "xxx"


@pytest.mark.integration
def test_a_stop_signal_during_the_database_step_stops_it_and_starts_nothing(runner):
    r = runner({"scheduler": sleeper("scheduler")}, prepare=sleeper("db-migrate"))
    pid = r.ready("db-migrate")["db-migrate"]
    os.kill(r.proc.pid, signal.SIGTERM)
    assert r.proc.wait(timeout=15) == 0
    assert not _alive(pid) and "scheduler" not in r.pids() and "db-migrate stopped (SIGTERM)" in r.text()


# -- the health check -------------------------------------------------------------------------------------------


class _Health(http.server.BaseHTTPRequestHandler):
    answer: tuple[int, bytes] = (200, b"{}")

    def do_GET(self):  # noqa: N802 (http.server's name)
        status, body = self.server.answer if self.path == "/api/v2/monitor/health" else (404, b"{}")
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def health_server():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Health)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()
    thread.join(5)


def _health(db: str, scheduler: str, triggerer: str | None = "healthy") -> bytes:
    """The shape of Airflow 3's /api/v2/monitor/health (airflow.api.common.airflow_health)."""
    return json.dumps({"metadatabase": {"status": db},
                       "scheduler": {"status": scheduler, "latest_scheduler_heartbeat": "2026-11-23T18:00:00+00:00"},
                       "triggerer": {"status": triggerer, "latest_triggerer_heartbeat": None},
                       "dag_processor": {"status": "healthy", "latest_dag_processor_heartbeat": None}}).encode()


ANSWERS = [
    ((200, _health("healthy", "healthy")), True),
    ((200, _health("healthy", "healthy", triggerer=None)), True),   # the triggerer is not part of it
    ((200, _health("healthy", "unhealthy")), False),                # the API up, its scheduler gone (kill -9)
    ((200, _health("unhealthy", "healthy")), False),
    ((200, b'{"metadatabase": {"status": "healthy"}}'), False),
    ((200, b"not json"), False),
    ((200, b"[]"), False),
    ((503, _health("healthy", "healthy")), False),
]


@pytest.mark.unit
@pytest.mark.parametrize("answer, healthy", ANSWERS)
def test_airflow_is_healthy_only_when_its_metadatabase_and_scheduler_are(health_server, answer, healthy):
    health_server.answer = answer
    port = health_server.server_address[1]
    assert airflow_healthy("127.0.0.1", port) is healthy
    # compose's healthcheck for the same service says the same (run here with this Python)
    service = Service("offline-airflow", "offline", "airflow", "offline-airflow", ["airflow"],
                      health=("airflow", port, "/api/v2/monitor/health"))
    test = _healthcheck(service)["test"]
    assert test[:3] == ["CMD", "python", "-c"]
    probe = subprocess.run([sys.executable, "-c", test[3]], capture_output=True, timeout=30)
    assert (probe.returncode == 0) is healthy, probe.stderr


@pytest.mark.unit
def test_airflow_is_not_healthy_when_nothing_answers():
    assert airflow_healthy("127.0.0.1", free_port(), timeout=1) is False


@pytest.mark.unit
def test_the_topology_runs_airflow_under_the_runner_with_the_strict_health_check(tmp_path):
    topo = load()
    for target in ("local", "compose"):
        airflow = {s.name: s for s in services(topo, target, tmp_path)}["offline-airflow"]
        assert airflow.argv == ["airflow"] and airflow.program == "logbus" and airflow.port == 8080
        assert airflow.health == ("airflow", 8080, "/api/v2/monitor/health")
    local = {s.name: s for s in services(topo, "local", tmp_path)}["offline-airflow"]
    assert command(local) == [sys.executable, "-m", "logbus.cli", "airflow"]
    text, _ = render(topo)
    assert 'command: ["logbus", "airflow"]' in text and '"airflow", "standalone"' not in text
    assert text.count("for p in ('metadatabase', 'scheduler')") == 1
