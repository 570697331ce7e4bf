"""``logbus airflow``: Airflow as one service that keeps every one of its parts running.

``airflow standalone`` starts the scheduler, dag-processor, api-server and triggerer as children and never starts
one again: after a ``kill -9`` of its scheduler it runs on with no scheduler (DAG runs never finish) while its API
still answers. This runner replaces it:

1. ``airflow db migrate`` — idempotent: creates the metadata database on a first start (what standalone's
   ``initialize_database`` did), upgrades it or does nothing later. Retried with backoff until it succeeds; no
   component starts before.
2. The four components as child processes (``airflow scheduler``, ``airflow dag-processor``, ``airflow
   api-server``, ``airflow triggerer``) with this process's environment, stdout and stderr. A component that
   exits — crash, ``kill -9``, even code 0 — is started again after a backoff of its own: the supervisors' policy
   (1 s doubling to 30 s, afresh once a run lasted 10 s), so one that keeps crashing is still retried every 30 s.
   Every start and exit is logged with the component's name, its pid and its exit code or signal.
3. Each child has a process group of its own. What one leaves behind when it exits — a scheduler killed with
   SIGKILL leaves its LocalExecutor workers, which would wait for work forever, and a task they run — gets
   SIGTERM, and SIGKILL ``leftover_grace`` seconds later, with whatever those processes started (their
   descendants, Spark JVMs included). So a task running when its scheduler dies is stopped, as systemd or Docker
   would stop it with the scheduler — and as Airflow assumes: the next scheduler resets the running tasks of a
   dead one to be scheduled again (``adopt_or_reset_orphaned_tasks``; LocalExecutor cannot adopt them), which
   must not meet the old attempt still running.

Stopping: only SIGTERM, SIGINT or SIGHUP stop it. The signal (SIGTERM for SIGHUP) goes to every child, they get
``stop_timeout`` seconds to exit (a second signal cuts that short), then SIGKILL with their process groups, and
whatever is left of them is killed; then it exits 0. It never exits 0 otherwise: an unexpected error exits
non-zero so that its own supervisor restarts it, and the kernel sends its children SIGTERM when it dies
(``PR_SET_PDEATHSIG``), so no unsupervised component is left behind. (Under ``logbus up`` the supervisor's
SIGTERM to its process group reaches the runner only; the runner passes it on.)

The children's output is not piped through the runner: a component whose stdout were a pipe to a runner killed
with SIGKILL would meet a broken pipe while it shuts down (the scheduler then hangs at exit, joining its workers).

The SIMPLE auth manager's passwords file is not this runner's business: ``logbus up`` writes it before the start;
in compose the api-server generates it in the volume at its first start (``SimpleAuthManager.init``, with a file
lock), as under standalone.

Single-threaded by design: children are forked from the main thread (``PR_SET_PDEATHSIG`` is tied to the forking
thread, and ``preexec_fn`` is only safe without other threads).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from logbus.local import BACKOFF_CAP, BACKOFF_INITIAL, BACKOFF_RESET, exit_text
from logbus.retry import Backoff

COMPONENTS = ("scheduler", "dag-processor", "api-server", "triggerer")
STOP_TIMEOUT = 30.0     # below the supervisor's 60 s and `logbus down`'s 45 s before they SIGKILL the group
LEFTOVER_GRACE = 10.0   # between SIGTERM and SIGKILL for what an exited component left behind
POLL = 0.2              # seconds between looks at the children
PR_SET_PDEATHSIG = 1


def airflow_executable() -> str:
    """``airflow`` beside this Python (the venv's bin, local and in the image), else the first on PATH."""
    beside = Path(sys.executable).parent / "airflow"
    if beside.exists():
        return str(beside)
    return shutil.which("airflow") or "airflow"


def airflow_commands(airflow: str | None = None) -> tuple[list[str], dict[str, list[str]]]:
    """(the database step, {component: command}) of the real Airflow."""
    airflow = airflow or airflow_executable()
    return [airflow, "db", "migrate"], {name: [airflow, name] for name in COMPONENTS}


@dataclass
class _Component:
    name: str
    argv: list[str]
    backoff: Backoff
    proc: subprocess.Popen | None = None
    started: float = 0.0          # monotonic time of the current run's start
    next_start: float = 0.0       # monotonic time of the next start while proc is None
    restarts: int = 0
    last_pid: int | None = None   # of the current or last run: its process group


class Runner:
    """Runs ``prepare`` (if any) until it succeeds, then keeps every command of ``components`` running until
    signalled. The commands are injectable so that tests can run fake components."""

    def __init__(self, components: dict[str, list[str]], prepare: list[str] | None = None, *,
                 initial: float = BACKOFF_INITIAL, cap: float = BACKOFF_CAP, reset_after: float = BACKOFF_RESET,
                 stop_timeout: float = STOP_TIMEOUT, leftover_grace: float = LEFTOVER_GRACE,
                 out: TextIO | None = None):
        if not components:
            raise ValueError("no components to run")
        self.components = [_Component(name, list(argv), Backoff(initial, cap, jitter=0))
                           for name, argv in components.items()]
        self.prepare = list(prepare) if prepare else None
        self.initial, self.cap, self.reset_after = initial, cap, reset_after
        self.stop_timeout, self.leftover_grace = stop_timeout, leftover_grace
        self.out = out or sys.stdout
        self.signals: list[int] = []                   # stop signals received, appended by the handler only
        self._live: dict[str, subprocess.Popen] = {}   # what runs now: the components and the database step
        self._groups: set[int] = set()                 # process groups (leader pids) not yet cleared
        self._pending: dict[int, tuple[float, str]] = {}  # group -> (when to SIGKILL its leftovers, whose)
        self._me = os.getpid()
        self._libc = None
        if sys.platform.startswith("linux"):
            import ctypes

            self._libc = ctypes.CDLL(None, use_errno=True)

    def log(self, text: str) -> None:
        try:
            print(f"{time.strftime('%Y-%m-%d %H:%M:%S')} logbus airflow: {text}", file=self.out, flush=True)
        except (OSError, ValueError):  # our own output is gone: keep the components running regardless
            pass

    # -- children -----------------------------------------------------------------------------------------------

    def _in_child(self) -> None:  # between fork and exec: SIGTERM to the child when this runner dies
        if self._libc is not None:
            self._libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
        if os.getppid() != self._me:
            os.kill(os.getpid(), signal.SIGTERM)

    def _spawn(self, name: str, argv: list[str]) -> subprocess.Popen | None:
        try:
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, process_group=0, preexec_fn=self._in_child)
        except OSError as exc:
            self.log(f"cannot start {name} ({' '.join(argv)}): {exc}")
            return None
        self._live[name] = proc
        self._groups.add(proc.pid)
        return proc  # a stop signal that came meanwhile reaches it too: _stop signals whatever is in _live

    def _reaped(self, name: str, proc: subprocess.Popen) -> int | None:
        code = proc.poll()
        if code is not None:
            self._live.pop(name, None)
        return code

    def _leftovers(self, groups) -> list[int]:
        """What children that exited left behind: the live processes of their process groups (only in our
        session, and never the group of a running child: a recycled pid is not taken for a dead one) and all
        their descendants, wherever those are (an Airflow task runs in a process group of its own)."""
        groups = set(groups) - {proc.pid for proc in self._live.values()}
        if not groups:
            return []
        session, procs = os.getsid(0), {}
        try:
            entries = os.listdir("/proc")
        except OSError:
            return []
        for entry in entries:
            if not entry.isdigit():
                continue
            try:
                with open(f"/proc/{entry}/stat") as f:
                    stat = f.read()
            except OSError:
                continue
            fields = stat[stat.rindex(")") + 2:].split()  # state, ppid, pgrp, session, ...
            if fields[0] != "Z":
                procs[int(entry)] = (int(fields[1]), int(fields[2]), int(fields[3]))
        found = [pid for pid, (_, pgrp, sid) in procs.items() if pgrp in groups and sid == session]
        children: dict[int, list[int]] = {}
        for pid, (ppid, _, _) in procs.items():
            children.setdefault(ppid, []).append(pid)
        seen, todo = set(found), list(found)
        while todo:
            for child in children.get(todo.pop(), []):
                if child not in seen and child != self._me:
                    seen.add(child)
                    found.append(child)
                    todo.append(child)
        return found

    def _clear(self, name: str, groups, sig: int) -> list[int]:
        """Send ``sig`` to what is left of these process groups; after SIGKILL they are done with."""
        groups = set(groups)
        pids = self._leftovers(groups)
        if pids:
            self.log(f"{name} left {len(pids)} process{'es' if len(pids) > 1 else ''} behind "
                     f"({', '.join(map(str, pids))}): {signal.Signals(sig).name}")
        for pid in pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        if sig == signal.SIGKILL or not pids:
            self._groups -= groups
            for group in groups:
                self._pending.pop(group, None)
        return pids

    def _left_behind(self, name: str, group: int) -> None:
        """A child exited: SIGTERM to what it left, SIGKILL after the grace."""
        if self._clear(name, [group], signal.SIGTERM):
            self._pending[group] = (time.monotonic() + self.leftover_grace, name)

    def _clear_due(self) -> None:
        now = time.monotonic()
        for group, (due, name) in list(self._pending.items()):
            if now >= due:
                self._clear(name, [group], signal.SIGKILL)

    def _forwarded(self) -> int:
        return signal.SIGTERM if self.signals[0] == signal.SIGHUP else self.signals[0]

    @staticmethod
    def _signal(proc: subprocess.Popen, sig: int) -> None:
        try:
            proc.send_signal(sig)
        except ProcessLookupError:
            pass

    def _sleep(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while not self.signals and (left := deadline - time.monotonic()) > 0:
            time.sleep(min(POLL, left))

    # -- the run ------------------------------------------------------------------------------------------------

    def _on_signal(self, signum: int, _frame) -> None:
        self.signals.append(signum)

    def _prepare(self) -> None:
        """The database step, until it succeeds or we are told to stop."""
        backoff = Backoff(self.initial, self.cap, jitter=0)
        while not self.signals:
            proc = self._spawn("db-migrate", self.prepare)
            code = 127
            if proc is not None:
                self.log(f"db-migrate started (pid {proc.pid}): {' '.join(self.prepare)}")
                while not self.signals and (code := self._reaped("db-migrate", proc)) is None:
                    time.sleep(POLL)
                if self.signals:
                    return
                self._clear("db-migrate", [proc.pid], signal.SIGKILL)
            if code == 0:
                self.log("db-migrate: database ready")
                return
            delay = backoff.next()
            self.log(f"db-migrate failed ({exit_text(code)}); retrying in {delay:.1f} s")
            self._sleep(delay)

    def _supervise(self) -> None:
        now = time.monotonic()
        for c in self.components:
            c.next_start = now
        while not self.signals:
            now = time.monotonic()
            for c in self.components:
                if self.signals:
                    break
                if c.proc is None:
                    if now >= c.next_start:
                        self._start(c)
                    continue
                code = self._reaped(c.name, c.proc)
                if code is None:
                    continue
                ran = now - c.started
                if ran >= self.reset_after:  # it ran long enough: the next crash starts the count afresh
                    c.backoff.reset()
                delay = c.backoff.next()
                c.proc, c.next_start = None, now + delay
                self.log(f"{c.name} exited ({exit_text(code)}) after {ran:.1f} s; restarting in {delay:.1f} s")
                self._left_behind(c.name, c.last_pid)
            self._clear_due()
            waiting = [c.next_start - time.monotonic() for c in self.components if c.proc is None]
            time.sleep(max(0.0, min([POLL, *waiting])))

    def _start(self, c: _Component) -> None:
        proc = self._spawn(c.name, c.argv)
        c.started = time.monotonic()
        if proc is None:  # as an exit: retried after the backoff
            delay = c.backoff.next()
            c.next_start = c.started + delay
            self.log(f"{c.name}: retrying in {delay:.1f} s")
            return
        restart, c.proc, c.last_pid = c.last_pid is not None, proc, proc.pid
        if restart:
            c.restarts += 1
            self.log(f"{c.name} restarted (pid {proc.pid}, restart {c.restarts})")
        else:
            self.log(f"{c.name} started (pid {proc.pid})")

    def _stop(self) -> None:
        """Forward the stop signal to every child, wait ``stop_timeout`` (less after a second signal), SIGKILL
        them with their process groups, then whatever any child left behind."""
        if self._live:
            sig = self._forwarded() if self.signals else signal.SIGTERM
            self.log(f"stopping {', '.join(self._live)} ({signal.Signals(sig).name})")
            for proc in self._live.values():
                self._signal(proc, sig)
            deadline = time.monotonic() + self.stop_timeout
            signals_seen = max(len(self.signals), 1)
            while self._live and time.monotonic() < deadline and len(self.signals) <= signals_seen:
                for name, proc in list(self._live.items()):
                    code = self._reaped(name, proc)
                    if code is not None:
                        self.log(f"{name} stopped ({exit_text(code)})")
                if self._live:
                    time.sleep(min(0.1, max(0.0, deadline - time.monotonic())))
            for name, proc in list(self._live.items()):
                self.log(f"{name} did not stop; killing it")
                try:
                    os.killpg(proc.pid, signal.SIGKILL)  # the leader is alive: the group is still its own
                except ProcessLookupError:
                    pass
                proc.wait()
                self._live.pop(name, None)
        self._clear("the components", self._groups, signal.SIGKILL)

    def run(self) -> int:
        """Until signalled; 0 once stopped (never otherwise)."""
        handled = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
        previous = {sig: signal.signal(sig, self._on_signal) for sig in handled}
        try:
            if self.prepare:
                self._prepare()
            if not self.signals:
                self._supervise()
        finally:
            self._stop()
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        self.log("stopped")
        return 0


def run() -> int:
    """``logbus airflow``: the real Airflow's database step and components."""
    prepare, components = airflow_commands()
    return Runner(components, prepare).run()
