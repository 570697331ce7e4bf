"""``logbus up`` / ``status`` / ``down``: the topology as local processes.

Every service runs in its own session (process group) with its configs, data and log under
``<state-dir>/<service>/``; ``<state-dir>/pids/<service>.json`` records its pid and the kernel's start time of
that pid (so a recycled pid is never mistaken for it). Every process carries ``LOGBUS_TOPOLOGY_STATE=<state-dir>``
in its environment, children included, so ``down`` can also find and stop anything a service left behind.
``up`` starts what is not running, in dependency order, waits for each service's health check before starting
its dependents, and keeps data between runs.

Every service runs under a supervisor (:func:`supervise`, the hidden ``logbus supervise`` verb): the recorded pid
is the supervisor's, the service is its child in the same process group, and whenever the service exits — crash,
``kill -9``, even exit code 0 — it is started again after a backoff (1 s doubling to 30 s; back to 1 s once a run
lasted 10 s), as compose's ``restart: unless-stopped``. Only a signal to the supervisor (``down``) stops it for
good: the supervisor passes SIGTERM to its process group, waits for the service and exits. Its status (the
service's pid, restarts, last exit code) is in ``<state-dir>/pids/<service>.status``.
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
from pathlib import Path

from logbus.retry import Backoff
from logbus.topology import REPO, Service, TopologyError, command, load, services

MARKER = "LOGBUS_TOPOLOGY_STATE"
HEALTH_TIMEOUT = {"airflow": 240.0}
# restart policy: 1 s, 2 s, 4 s, ... up to 30 s between restarts; a run of 10 s or more starts the count afresh
BACKOFF_INITIAL, BACKOFF_CAP, BACKOFF_RESET = 1.0, 30.0, 10.0
UP_MAX_RESTARTS = 3    # `up` gives up waiting for a service restarted this often without becoming healthy
STOP_TIMEOUT = 60      # a signalled supervisor SIGKILLs its process group if the service has not exited by then


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

    def supervisor(self, name: str) -> dict | None:
        """The status its running supervisor keeps (None: not running, not written yet, or not supervised)."""
        pid = self.running(name)
        if pid is None:
            return None
        try:
            status = json.loads((self.pids / f"{name}.status").read_text())
        except (OSError, ValueError):
            return None
        return status if status.get("supervisor") == pid else None

    def service_pid(self, name: str) -> int | None:
        """The service's own process: its supervisor's live child (None while it waits to restart it), or the
        recorded pid for a service started without a supervisor."""
        pid = self.running(name)
        if pid is None or not (self.record(name) or {}).get("supervised"):
            return pid
        status = self.supervisor(name) or {}
        child = status.get("service_pid")
        if child and _start_time(child) == status.get("service_start_time"):
            return child
        return None

    def log(self, name: str) -> Path:
        return self.dir / name / f"{name}.log"


def exit_text(code: int | None) -> str:
    """``code 1`` for an exit status, ``SIGKILL`` for a negative one (killed by that signal, as subprocess)."""
    if code is None:
        return ""
    if code < 0:
        try:
            return signal.Signals(-code).name
        except ValueError:
            return f"signal {-code}"
    return f"code {code}"


def zookeeper_mode(host: str, port: int, timeout: float = 2.0) -> str | None:
    """What ZooKeeper's ``srvr`` says this node is — ``leader``, ``follower`` or ``standalone`` — or None: not
    answering, or not serving (an ensemble member without a quorum answers "not currently serving requests")."""
    try:
        with socket.create_connection((host, port), timeout=timeout) as sock:
            sock.sendall(b"srvr")
            chunks = []
            while chunk := sock.recv(4096):
                chunks.append(chunk)
    except OSError:
        return None
    for line in b"".join(chunks).decode(errors="replace").splitlines():
        if line.startswith("Mode: "):
            return line.partition(":")[2].strip()
    return None


def airflow_healthy(host: str, port: int, path: str = "/api/v2/monitor/health", timeout: float = 3.0) -> bool:
    """Airflow's health endpoint answers 200 and says the metadata database and the scheduler are healthy (the
    scheduler: a heartbeat within ``[scheduler] scheduler_health_check_threshold``, 30 s by default) — not merely
    that the API server answers, which it does while no scheduler runs."""
    import http.client
    import urllib.request

    try:
        with urllib.request.urlopen(f"http://{host}:{port}{path}", timeout=timeout) as r:
            if r.status != 200:
                return False
            health = json.loads(r.read())
    except (OSError, ValueError, http.client.HTTPException):
        return False
    return isinstance(health, dict) and all(isinstance(health.get(part), dict) and
                                            health[part].get("status") == "healthy"
                                            for part in ("metadatabase", "scheduler"))


def _healthy(s: Service, state: State) -> bool:
    kind = s.health[0]
    if kind == "init":  # a one-shot service: done once its marker exists
        return (Path(s.health[1]) / "initialized").exists()
    if state.service_pid(s.name) is None:
        return False
    if kind == "zookeeper":  # serving: a standalone node, or an ensemble member with a quorum
        return zookeeper_mode(s.host, s.health[1]) in ("leader", "follower", "standalone")
    if kind == "airflow":  # the API up is not enough: its scheduler may be gone
        return airflow_healthy(s.host, s.health[1], s.health[2])
    if kind == "spark-worker":  # registered with its master and ALIVE there, not merely serving its UI
        from logbus.spark_cluster import alive_workers, master_status

        return any(w.get("host") == s.host for w in alive_workers(master_status(s.health[1], s.health[2])))
    if kind == "postgres":  # accepting logins (not starting up, shutting down or recovering)
        from logbus.postgres import healthy

        return healthy(s.host, s.health[1])
    try:
        if kind == "tcp":
            with socket.create_connection((s.host, s.health[1]), timeout=2):
                return True
        if kind == "http":
            import urllib.request  # not at the top: every supervisor imports this module, and this is 8 MB

            with urllib.request.urlopen(f"http://{s.host}:{s.health[1]}{s.health[2]}", timeout=3) as r:
                return 200 <= r.status < 300
        if kind == "https":  # TLS with the topology's CA; an answer, 401 (login required) included, is healthy
            import ssl
            import urllib.error
            import urllib.request

            context = ssl.create_default_context(cafile=str(state.dir / "secrets" / "ca.pem"))
            try:
                with urllib.request.urlopen(f"https://{s.host}:{s.health[1]}{s.health[2]}", timeout=3,
                                            context=context) as r:
                    return 200 <= r.status < 300
            except urllib.error.HTTPError as exc:
                return exc.code == 401
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


def _run_once(s: Service, state: State) -> bool:
    """A one-shot service (a secure topology's security-init) in the foreground; True when it exited 0."""
    _prepare(s, state)
    env = dict(os.environ, **s.env, PYTHONPATH=os.pathsep.join([str(REPO / "platform"), str(REPO)]))
    with open(state.log(s.name), "ab") as log:
        done = subprocess.run(command(s), cwd=state.dir / s.name, env=env, stdin=subprocess.DEVNULL, stdout=log,
                              stderr=subprocess.STDOUT, timeout=300)
    return done.returncode == 0


def _launch(s: Service, state: State) -> int:
    _prepare(s, state)
    env = dict(os.environ, **s.env, PYTHONPATH=os.pathsep.join([str(REPO / "platform"), str(REPO)]))
    env[MARKER] = str(state.dir)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "/usr/bin:/bin")])
    env.setdefault("PYSPARK_PYTHON", sys.executable)
    supervisor = [sys.executable, "-m", "logbus.cli", "supervise", "--state-dir", str(state.dir), "--service",
                  s.name, "--", *command(s)]
    state.pids.mkdir(parents=True, exist_ok=True)
    with open(state.log(s.name), "ab") as log:
        proc = subprocess.Popen(supervisor, cwd=state.dir / s.name, env=env, stdin=subprocess.DEVNULL,
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    rec = {"pid": proc.pid, "start_time": _start_time(proc.pid), "argv": command(s), "supervised": True}
    (state.pids / f"{s.name}.json").write_text(json.dumps(rec))
    return proc.pid


def backoff(streak: int) -> float:
    """Seconds before the restart that follows ``streak`` consecutive short runs (shorter than BACKOFF_RESET):
    1, 2, 4, 8, 16, 30, 30, ..."""
    return Backoff(BACKOFF_INITIAL, BACKOFF_CAP, jitter=0).delay(streak - 1)


def _write_status(path: Path, status: dict) -> None:
    tmp = path.with_name(path.name + ".tmp")
    try:
        tmp.write_text(json.dumps(status))
        os.replace(tmp, path)
    except OSError:  # the pids directory is gone: `down` finished
        pass


def supervise(state_dir: str, name: str, argv: list[str]) -> int:
    """Run ``argv`` as a child and start it again whenever it exits, after :func:`backoff`, until this process is
    signalled (SIGTERM, SIGINT, SIGHUP): then SIGTERM goes to the process group (the service and whatever it
    started, as ``down`` did before there were supervisors), the service is waited for and nothing restarts. The
    status — the service's pid, restarts, last exit code — is kept in ``<state-dir>/pids/<name>.status``."""
    import ctypes

    path = State(state_dir).pids / f"{name}.status"
    me, leader = os.getpid(), os.getpgrp() == os.getpid()
    libc = ctypes.CDLL(None, use_errno=True)
    child: subprocess.Popen | None = None
    stopping: list[int] = []

    def group_kill(sig: int) -> None:
        try:
            if leader:
                os.killpg(me, sig)
            elif child is not None:
                child.send_signal(sig)
        except ProcessLookupError:
            pass

    def on_signal(signum, _frame) -> None:
        if stopping:  # our own group signal coming back, or a second one
            return
        stopping.append(signum)
        signal.signal(signal.SIGALRM, lambda *_: group_kill(signal.SIGKILL))
        signal.alarm(STOP_TIMEOUT)
        group_kill(signal.SIGTERM)

    def in_child() -> None:  # the service gets SIGTERM if its supervisor dies (kill -9): no unsupervised orphan
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
        if os.getppid() != me:
            os.kill(os.getpid(), signal.SIGTERM)

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, on_signal)
    status = {"supervisor": me, "service": name, "argv": argv, "state": "starting", "service_pid": None,
              "service_start_time": None, "restarts": 0, "last_exit_code": None, "last_exit_at": None,
              "last_restart_at": None, "next_start_at": None}
    streak = 0
    while not stopping:
        started = time.monotonic()
        try:
            child = subprocess.Popen(argv, stdin=subprocess.DEVNULL, preexec_fn=in_child)
        except OSError as exc:
            print(f"logbus supervise: cannot start {name}: {exc}", flush=True)
            code = 127
        else:
            if stopping:  # signalled while it was being started: the group signal may have come before the fork
                group_kill(signal.SIGTERM)
            status.update(state="running", service_pid=child.pid, service_start_time=_start_time(child.pid),
                          next_start_at=None)
            _write_status(path, status)
            code = child.wait()
        if stopping:
            break
        ran = time.monotonic() - started
        streak = 1 if ran >= BACKOFF_RESET else streak + 1
        delay = backoff(streak)
        now = time.time()
        status.update(state="restarting", service_pid=None, service_start_time=None, last_exit_code=code,
                      last_exit_at=now, next_start_at=now + delay)
        _write_status(path, status)
        print(f"{time.strftime('%Y-%m-%d %H:%M:%S')} logbus supervise: {name} exited ({exit_text(code)}) after "
              f"{ran:.1f} s; restarting in {delay:.0f} s", flush=True)
        deadline = time.monotonic() + delay
        while not stopping and time.monotonic() < deadline:
            time.sleep(min(0.2, max(0.0, deadline - time.monotonic())))
        if stopping:
            break
        status.update(restarts=status["restarts"] + 1, last_restart_at=time.time())
    if child is not None and child.returncode is None:
        child.wait()
    status.update(state="stopped", service_pid=None, service_start_time=None, next_start_at=None)
    _write_status(path, status)
    return 0


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
                print(f"logbus: {dep} is not healthy{_crashes(dep, state)}; see {state.log(dep)}", file=sys.stderr)
                return 1
        if s.kind == "init":
            if not _run_once(s, state):
                print(f"logbus: {s.name} failed; see {state.log(s.name)}", file=sys.stderr)
                return 1
            print(f"  {s.name:24} done", flush=True)
            continue
        pid = state.running(s.name)
        if pid:
            print(f"  {s.name:24} already running (pid {pid})", flush=True)
            continue
        pid = _launch(s, state)
        print(f"  {s.name:24} started (pid {pid}) on {s.host}" + (f":{s.port}" if s.port else ""), flush=True)
    bad = [s.name + _crashes(s.name, state) for s in svcs if not _wait_healthy(s, state)]
    if bad:
        print(f"logbus: not healthy: {', '.join(bad)}; logs: {state.dir}/<service>/<service>.log", file=sys.stderr)
        return 1
    _print_summary(svcs, state)
    return 0


def _restarts(name: str, state: State) -> int:
    return (state.supervisor(name) or {}).get("restarts", 0)


def _crashes(name: str, state: State) -> str:
    sup = state.supervisor(name) or {}
    if sup.get("last_exit_code") is None:
        return ""
    return f" (restarted {sup['restarts']} times, last exit {exit_text(sup['last_exit_code'])})"


def _wait_healthy(s: Service, state: State) -> bool:
    """Until the service is healthy (True), its supervisor is gone, it was restarted UP_MAX_RESTARTS times
    meanwhile (a crash loop: its supervisor keeps trying) or its health timeout passed."""
    deadline = time.monotonic() + HEALTH_TIMEOUT.get(s.kind, 120.0)
    restarts = _restarts(s.name, state)
    while time.monotonic() < deadline:
        if _healthy(s, state):
            return True
        if state.running(s.name) is None or _restarts(s.name, state) - restarts >= UP_MAX_RESTARTS:
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
    from logbus.status_numbers import numbers

    measured = numbers(svcs)
    rows = []
    for s in svcs:
        pid = state.running(s.name)
        sup = state.supervisor(s.name) or {}
        rows.append({"name": s.name, "datacenter": s.datacenter, "kind": s.kind, "pid": pid,
                     "running": pid is not None, "healthy": _healthy(s, state),
                     "address": f"{s.host}:{s.port}" if s.port else s.host, "url": s.url,
                     "log": str(state.log(s.name)),
                     # pid is the supervisor's; service_pid its child's, None while it waits to restart it
                     "service_pid": state.service_pid(s.name), "restarting": sup.get("state") == "restarting",
                     "restarts": sup.get("restarts", 0), "last_exit_code": sup.get("last_exit_code"),
                     "last_exit": exit_text(sup.get("last_exit_code")) or None,
                     "last_exit_at": sup.get("last_exit_at"), "last_restart_at": sup.get("last_restart_at"),
                     "numbers": measured.get(s.name)})
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
            state = ("healthy" if r["healthy"] else "restarting" if r["restarting"] and r["running"]
                     else "running, not healthy" if r["running"] else "stopped")
            restarts = (f"restarts {r['restarts']}" + (f", last exit {r['last_exit']}" if r["last_exit"] else "")
                        if r["running"] else "")
            from logbus.status_numbers import render

            measured = render(r["numbers"]) if r["numbers"] else ""
            print(f"{r['name']:24} {r['datacenter']:8} {state:22} {r['address']:22} {measured:34} {restarts}".rstrip())
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


STOP_ORDER = ("frontend", "airflow", "spark-worker", "spark-master", "postgres", "prometheus", "alertmanager", "lag",
              "audit", "counter", "mirror", "registry", "broker", "zookeeper")


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
        for name, pid in group:
            try:  # a supervisor passes SIGTERM to its process group itself, once, and restarts nothing after it
                if (state.record(name) or {}).get("supervised"):
                    os.kill(pid, signal.SIGTERM)
                else:
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
