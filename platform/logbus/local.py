"""``logbus up`` / ``status`` / ``down``: the topology as local processes.

Every service runs in its own session (process group) with its configs, data and log under
``<state-dir>/<service>/``; ``<state-dir>/pids/<service>.json`` records its pid and the kernel's start time of
that pid (so a recycled pid is never mistaken for it). Every process carries ``LOGBUS_TOPOLOGY_STATE=<state-dir>``
in its environment, children included, so ``down`` can also find and stop anything a service left behind.
``up`` starts what is not running, in dependency order, waits for each service's health check before starting
its dependents, and keeps data between runs.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from logbus.topology import REPO, Service, TopologyError, command, load, services

MARKER = "LOGBUS_TOPOLOGY_STATE"
HEALTH_TIMEOUT = {"airflow": 240.0}


def _start_time(pid: int) -> str | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2:].split()
    return None if fields[0] == "Z" else fields[19]


def _order(svcs: list[Service]) -> list[Service]:
    by_name, done, out = {s.name: s for s in svcs}, set(), []

    def visit(s: Service, path: tuple = ()) -> None:
        if s.name in done:
            return
        if s.name in path:
            raise TopologyError(f"dependency cycle through {s.name}")
        for d in s.depends_on:
            visit(by_name[d], path + (s.name,))
        done.add(s.name)
        out.append(s)

    for s in svcs:
        visit(s)
    return out


class State:
    def __init__(self, state_dir: str):
        self.dir = Path(state_dir).resolve()
        self.pids = self.dir / "pids"

    def topology(self, path: str | None = None) -> dict:
        saved = self.dir / "topology.json"
        if path:
            topo = load(path)
        elif saved.exists():
            topo = load(saved)
        else:
            topo = load(None)
        return topo

    def save_topology(self, topo: dict) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        (self.dir / "topology.json").write_text(json.dumps(topo, indent=2) + "\n")

    def record(self, name: str) -> dict | None:
        path = self.pids / f"{name}.json"
        try:
            return json.loads(path.read_text())
        except (OSError, ValueError):
            return None

    def running(self, name: str) -> int | None:
        rec = self.record(name)
        if rec and _start_time(rec["pid"]) == rec["start_time"]:
            return rec["pid"]
        return None

    def log(self, name: str) -> Path:
        return self.dir / name / f"{name}.log"


def _healthy(s: Service, state: State) -> bool:
    if state.running(s.name) is None:
        return False
    kind = s.health[0]
    try:
        if kind == "tcp":
            with socket.create_connection((s.host, s.health[1]), timeout=2):
                return True
        if kind == "http":
            with urllib.request.urlopen(f"http://{s.host}:{s.health[1]}{s.health[2]}", timeout=3) as r:
                return 200 <= r.status < 300
    except OSError:
        return False
    return True


def _prepare(s: Service, state: State) -> None:
    directory = state.dir / s.name
    (directory / "data").mkdir(parents=True, exist_ok=True)
    for name, text in s.files.items():
        (directory / name).write_text(text)
    if s.kind == "airflow":
        passwords = directory / "passwords.json"
        if not passwords.exists():
            passwords.write_text(json.dumps({"admin": secrets.token_urlsafe(12)}))
            passwords.chmod(0o600)


def _launch(s: Service, state: State) -> int:
    _prepare(s, state)
    env = dict(os.environ, **s.env, PYTHONPATH=os.pathsep.join([str(REPO / "platform"), str(REPO)]))
    env[MARKER] = str(state.dir)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "/usr/bin:/bin")])
    env.setdefault("PYSPARK_PYTHON", sys.executable)
    with open(state.log(s.name), "ab") as log:
        proc = subprocess.Popen(command(s), cwd=state.dir / s.name, env=env, stdin=subprocess.DEVNULL,
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    state.pids.mkdir(parents=True, exist_ok=True)
    rec = {"pid": proc.pid, "start_time": _start_time(proc.pid), "argv": command(s)}
    (state.pids / f"{s.name}.json").write_text(json.dumps(rec))
    return proc.pid


def _check_addresses(svcs: list[Service]) -> None:
    for host in sorted({s.host for s in svcs}):
        try:
            with socket.socket() as sock:
                sock.bind((host, 0))
        except OSError as exc:
            raise TopologyError(f"cannot use address {host}: {exc.strerror}") from None


def up(topology: str | None, state_dir: str) -> int:
    state = State(state_dir)
    try:
        topo = state.topology(topology)
        svcs = _order(services(topo, "local", state.dir))
        _check_addresses(svcs)
    except TopologyError as exc:
        print(f"logbus: {exc}", file=sys.stderr)
        return 2
    state.save_topology(topo)
    by_name = {s.name: s for s in svcs}
    print(f"logbus up: {len(svcs)} services, state in {state.dir}", flush=True)
    for s in svcs:
        for dep in s.depends_on:
            if not _wait_healthy(by_name[dep], state):
                print(f"logbus: {dep} is not healthy; see {state.log(dep)}", file=sys.stderr)
                return 1
        pid = state.running(s.name)
        if pid:
            print(f"  {s.name:24} already running (pid {pid})", flush=True)
            continue
        pid = _launch(s, state)
        print(f"  {s.name:24} started (pid {pid}) on {s.host}" + (f":{s.port}" if s.port else ""), flush=True)
    bad = [s.name for s in svcs if not _wait_healthy(s, state)]
    if bad:
        print(f"logbus: not healthy: {', '.join(bad)}; logs: {state.dir}/<service>/<service>.log", file=sys.stderr)
        return 1
    _print_summary(svcs, state)
    return 0


def _wait_healthy(s: Service, state: State) -> bool:
    deadline = time.monotonic() + HEALTH_TIMEOUT.get(s.kind, 120.0)
    while time.monotonic() < deadline:
        if _healthy(s, state):
            return True
        if state.running(s.name) is None:
            return False
        time.sleep(0.3)
    return False


def _print_summary(svcs: list[Service], state: State) -> None:
    print("\nready:")
    for s in svcs:
        if s.url:
            print(f"  {s.name:24} {s.url}")
    brokers = {}
    for s in svcs:
        if s.kind == "broker":
            brokers.setdefault(s.datacenter, []).append(f"{s.host}:{s.port}")
    for dc, addrs in brokers.items():
        print(f"  {dc + ' brokers':24} {','.join(addrs)}")
    for s in svcs:
        if s.kind == "airflow":
            password = json.loads((state.dir / s.name / "passwords.json").read_text())["admin"]
            print(f"  Airflow login: admin / {password}   (the Audit page: {s.url}/plugin/logbus-audit)")
        if s.kind == "audit":
            print(f"  audit report: {s.url}/ (JSON: {s.url}/api/report)")
    print(f"  logs: {state.dir}/<service>/<service>.log   status: logbus status --state-dir {state.dir}")


def _status_rows(state_dir: str) -> list[dict]:
    state = State(state_dir)
    if not (state.dir / "topology.json").exists():
        raise TopologyError(f"no topology in {state.dir} (run logbus up --state-dir {state_dir})")
    svcs = _order(services(state.topology(), "local", state.dir))
    rows = []
    for s in svcs:
        pid = state.running(s.name)
        rows.append({"name": s.name, "datacenter": s.datacenter, "kind": s.kind, "pid": pid,
                     "running": pid is not None, "healthy": _healthy(s, state),
                     "address": f"{s.host}:{s.port}" if s.port else s.host, "url": s.url,
                     "log": str(state.log(s.name))})
    return rows


def status(state_dir: str, as_json: bool) -> int:
    try:
        rows = _status_rows(state_dir)
    except TopologyError as exc:
        print(f"logbus: {exc}", file=sys.stderr)
        return 2
    healthy = all(r["healthy"] for r in rows)
    if as_json:
        print(json.dumps({"healthy": healthy, "services": rows}, indent=2))
    else:
        for r in rows:
            state = "healthy" if r["healthy"] else ("running, not healthy" if r["running"] else "stopped")
            print(f"{r['name']:24} {r['datacenter']:8} {state:22} {r['address']}")
    return 0 if healthy else 1


def leftovers(state_dir: Path) -> list[int]:
    """Pids of processes carrying this state dir's marker in their environment (children included)."""
    needle = f"{MARKER}={state_dir}".encode()
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if needle in (entry / "environ").read_bytes().split(b"\0"):
                out.append(int(entry.name))
        except OSError:
            continue
    return out


STOP_ORDER = ("frontend", "airflow", "audit", "counter", "mirror", "registry", "broker", "zookeeper")


def down(state_dir: str, timeout: float = 45) -> int:
    state = State(state_dir)
    try:
        if not (state.dir / "topology.json").exists():
            raise TopologyError(f"no topology in {state.dir} (nothing was started with this --state-dir)")
        svcs = services(state.topology(), "local", state.dir)
    except TopologyError as exc:
        print(f"logbus: {exc}", file=sys.stderr)
        return 2
    stopped = 0
    for kind in STOP_ORDER:  # dependents first; ZooKeeper last so brokers can leave their registrations
        group = [(s.name, state.running(s.name)) for s in svcs if s.kind == kind]
        group = [(name, pid) for name, pid in group if pid]
        for _, pid in group:
            try:
                os.killpg(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and any(state.running(name) for name, _ in group):
            time.sleep(0.2)
        for name, pid in group:
            if state.running(name):
                print(f"logbus: {name} did not stop in {timeout:.0f} s; killing it", file=sys.stderr)
            try:
                os.killpg(pid, signal.SIGKILL)  # also whatever is left in its process group
            except ProcessLookupError:
                pass
        stopped += len(group)
    time.sleep(0.3)
    for pid in leftovers(state.dir):  # children that left their service's process group
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    if state.pids.exists():
        shutil.rmtree(state.pids)
    print(f"logbus down: stopped {stopped} services; data kept in {state.dir}")
    return 0
