"""The chaos run: rounds of one random fault each on the running two-datacenter topology, each healed and
recovered from before the next (``tests/e2e/test_whole_topology.py`` runs it after its own failures).

The faults (one kind per round; the rounds go through the kinds in a shuffled order, so a short run still sees
different kinds):

- ``kill-broker``, ``kill-mirror``, ``kill-counter``, ``kill-registry`` (the primary), ``kill-zookeeper``: ``kill -9``
  of the service's process; its supervisor restarts it (``logbus up``'s restart policy).
- ``kill-scheduler``: ``kill -9`` of the Airflow scheduler while a load DAG run is running; recovered once a load
  run has succeeded after it.
- ``pause-broker``: ``SIGSTOP`` of a broker for longer than its ZooKeeper session (a long GC pause), then
  ``SIGCONT``.
- ``wan-cut``: the WAN between the datacenters (the TCP proxies the mirror connects through) is cut for 30 s to
  ``max_fault_s``, then restored.
- ``full-disk``: the filesystem of one live broker's log dir (a small tmpfs) is filled, kept full for 20-40 s, then
  freed. The broker must refuse writes and not restart.

A round is recovered when every service is healthy, the ``acks=all`` ledger producer is acknowledged again, and
every audit window closed since the round started is 100% at the live and offline tiers. Each round records the
lowest completeness of those windows seen from the fault to the recovery (sampled every 2 s: the dip) and the time
from the heal (a kill heals at once) to recovered."""

from __future__ import annotations

import errno
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import requests
from support import REPO, Ledger, wait_until
from topology_checks import GRACE_MS, dag_run_state, run_dag, trigger_dag, wait_recovered

KINDS = ("kill-broker", "kill-mirror", "kill-counter", "kill-registry", "kill-zookeeper", "kill-scheduler",
         "pause-broker", "wan-cut", "full-disk")
ZOOKEEPER_SESSION_S = 6  # zookeeper.session.timeout.ms of the topology's brokers


def logbus(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(REPO / "platform"))
    return subprocess.run([sys.executable, "-m", "logbus.cli", *args], env=env, capture_output=True, text=True,
                          timeout=timeout)


def fill(path: Path) -> int:
    """Write zeros to ``path`` until its filesystem is full; returns the bytes written."""
    written = 0
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        for size in (1 << 20, 4096):  # then the last few pages
            chunk = b"\0" * size
            try:
                while True:
                    written += os.write(fd, chunk)
            except OSError as exc:
                if exc.errno != errno.ENOSPC:
                    raise
    finally:
        os.close(fd)
    return written


class Chaos:
    def __init__(self, state: Path, audit: str, airflow: str, token: str, ledger: Ledger, proxies: list,
                 disk: Path | None, rng: random.Random, max_fault_s: float = 60):
        self.state, self.audit, self.airflow, self.token = state, audit, airflow, token
        self.ledger, self.proxies, self.disk, self.rng, self.max_fault_s = ledger, proxies, disk, rng, max_fault_s
        self.disk_broker = "live-broker3"  # whose log dir is on ``disk``
        self.rounds: list[dict] = []

    def statuses(self) -> dict[str, dict]:
        out = logbus("status", "--json", "--state-dir", str(self.state), timeout=120)
        return {s["name"]: s for s in json.loads(out.stdout)["services"]}

    def plan(self, rounds: int, kinds: list[str] = KINDS) -> list[str]:
        unknown = set(kinds) - set(KINDS)
        assert not unknown, f"unknown fault kinds {unknown}; known: {KINDS}"
        kinds = [k for k in kinds if k != "full-disk" or self.disk is not None]
        out: list[str] = []
        while len(out) < rounds:
            batch = list(kinds)
            self.rng.shuffle(batch)
            out += batch
        return out[:rounds]

    def _pick(self, statuses: dict[str, dict], kind: str, prefix: str = "") -> str:
        return self.rng.choice(sorted(n for n, s in statuses.items() if s["kind"] == kind and n.startswith(prefix)))

    def _kill(self, name: str, statuses: dict[str, dict]) -> str:
        os.kill(statuses[name]["service_pid"], signal.SIGKILL)
        return name

    # ---- faults: each returns its target and heals before returning (a kill heals by itself) ----

    def _kill_scheduler(self) -> tuple[str, dict]:
        import psutil

        run_id = trigger_dag(self.airflow, self.token)
        wait_until(lambda: dag_run_state(self.airflow, self.token, run_id) == "running", 120, interval=1,
                   what="the load run running")
        time.sleep(self.rng.uniform(5, 20))  # somewhere in the middle of the load
        def cmdline(p: psutil.Process) -> list[str]:
            try:
                return p.cmdline()
            except psutil.Error:  # gone, or a zombie not reaped yet
                return []

        runner = psutil.Process(self.statuses()["offline-airflow"]["service_pid"])
        children = runner.children(recursive=True)
        schedulers = [p for p in children if "scheduler" in cmdline(p)[1:3]]
        assert schedulers, [cmdline(p) for p in children]
        top = min(schedulers, key=lambda p: p.create_time())  # the scheduler itself, not its executor's workers
        top.kill()
        return "offline-airflow scheduler", {"run_id": run_id, "scheduler_pid": top.pid}

    def inject(self, kind: str) -> tuple[str, dict]:
        statuses = self.statuses()
        if kind == "kill-broker":
            return self._kill(self._pick(statuses, "broker"), statuses), {}
        if kind == "kill-mirror":
            return self._kill(self._pick(statuses, "mirror"), statuses), {}
        if kind == "kill-counter":
            return self._kill(self._pick(statuses, "counter"), statuses), {}
        if kind == "kill-registry":
            return self._kill(self._pick(statuses, "registry", "live-"), statuses), {}
        if kind == "kill-zookeeper":
            return self._kill(self._pick(statuses, "zookeeper"), statuses), {}
        if kind == "kill-scheduler":
            return self._kill_scheduler()
        if kind == "pause-broker":
            name = self._pick(statuses, "broker")
            pid = statuses[name]["service_pid"]
            seconds = self.rng.uniform(1.5, 3) * ZOOKEEPER_SESSION_S
            os.kill(pid, signal.SIGSTOP)
            try:
                time.sleep(seconds)
            finally:
                os.kill(pid, signal.SIGCONT)
            return name, {"paused_s": round(seconds, 1)}
        if kind == "wan-cut":
            seconds = self.rng.uniform(30, max(30, self.max_fault_s))
            for proxy in self.proxies:
                proxy.cut()
            try:
                time.sleep(seconds)
            finally:
                for proxy in self.proxies:
                    proxy.restore()
            return "live <-> offline", {"cut_s": round(seconds, 1)}
        if kind == "full-disk":
            before = statuses[self.disk_broker]
            filler = self.disk / "filler"
            written = fill(filler)
            seconds = self.rng.uniform(20, 40)
            try:
                time.sleep(seconds)
                during = self.statuses()[self.disk_broker]
            finally:
                filler.unlink()
            assert during["service_pid"] == before["service_pid"] and during["restarts"] == before["restarts"], \
                f"{self.disk_broker} restarted on a full disk: {during}"
            return self.disk_broker, {"full_s": round(seconds, 1), "filler_mb": round(written / 2**20, 1)}
        raise ValueError(kind)

    # ---- measuring ----

    def completeness(self, since_ms: int) -> dict[str, float | None]:
        """The lowest completeness per tier among the windows closed since ``since_ms`` (None: none closed)."""
        try:
            rows = requests.get(f"{self.audit}/api/report", params={"from": since_ms}, timeout=30).json()
        except (requests.ConnectionError, requests.Timeout):
            return {"live": None, "offline": None}
        now = int(time.time() * 1000)
        closed = [r for r in rows if r["window_start"] >= since_ms and r["window_end"] + GRACE_MS < now]
        return {tier: min((r["completeness"] for r in closed if r["tier"] == tier), default=None)
                for tier in ("live", "offline")}

    def wait_healthy(self, timeout: float = 300) -> None:
        unhealthy: list[str] = []

        def healthy():
            unhealthy[:] = [n for n, s in self.statuses().items() if not s["healthy"]]
            return not unhealthy

        try:
            wait_until(healthy, timeout, interval=2, what="every service healthy")
        except TimeoutError as exc:
            raise AssertionError(f"{exc}: not healthy: {unhealthy}") from None

    def wait_load(self, run_id: str, timeout: float = 900) -> str:
        """Until the interrupted run has finished and a load run has succeeded since; returns its final state."""
        def final():
            try:
                state = dag_run_state(self.airflow, self.token, run_id)
            except (requests.ConnectionError, requests.Timeout):
                return None
            return state in ("success", "failed") and state

        state = wait_until(final, timeout, interval=3, what="the interrupted load run finished")
        if state == "failed":  # it failed with its scheduler: the next run must succeed
            run_dag(self.airflow, self.token, timeout=timeout)
        return state

    def round(self, number: int, kind: str) -> dict:
        started_ms = int(time.time() * 1000)
        t0 = time.monotonic()
        lowest: dict[str, float | None] = {"live": None, "offline": None}
        done = threading.Event()

        def sample() -> None:  # the lowest completeness seen from the fault to the recovery (the dip)
            while not done.wait(2):
                for tier, value in self.completeness(started_ms).items():
                    if value is not None and (lowest[tier] is None or value < lowest[tier]):
                        lowest[tier] = value

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        try:
            target, details = self.inject(kind)
            healed = time.monotonic()
            if kind == "kill-scheduler":
                details["run_state"] = self.wait_load(details["run_id"])
            self.wait_healthy()
            self.ledger.progress(f"acks=all produce after {kind} of {target}", 50, timeout=240)
            wait_recovered(self.audit, started_ms, timeout=420)
            recovered = time.monotonic()
        finally:
            done.set()
            sampler.join(60)
        row = {"round": number, "kind": kind, "target": target, "fault_s": round(healed - t0, 1),
               "recovery_s": round(recovered - healed, 1), "lowest_completeness": lowest,
               "completeness_after": self.completeness(started_ms), "acknowledged": self.ledger.count(), **details}
        self.rounds.append(row)
        print(f"chaos round {number}: {kind} of {target}: fault {row['fault_s']} s, recovered in "
              f"{row['recovery_s']} s, lowest completeness {lowest}", flush=True)
        return row

    def report(self, seed: int, ledger_result: dict, duration_s: float) -> dict:
        by_kind: dict[str, int] = {}
        for r in self.rounds:
            by_kind[r["kind"]] = by_kind.get(r["kind"], 0) + 1
        return {"seed": seed, "rounds": len(self.rounds), "faults_by_kind": by_kind,
                "acknowledged": ledger_result["acknowledged"], "lost": ledger_result["lost"],
                "duplicated": ledger_result["duplicated"], "out_of_order": ledger_result["out_of_order"],
                "delivery_failures": ledger_result["delivery_failures"],
                "longest_recovery_s": max((r["recovery_s"] for r in self.rounds), default=0),
                "duration_s": round(duration_s), "round_details": self.rounds}
