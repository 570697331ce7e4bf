"""The whole two-datacenter topology as a new user runs it: ``logbus up`` on a fresh state directory, a schema
registered over HTTP, demo traffic for a few windows complete at live and offline; then, during traffic, ``kill -9``
of the live ZooKeeper ensemble's leader (its supervisor restarts it; no broker restarts) and of a live broker and the
mirror, ``logbus up`` again; then the load DAG triggered through Airflow's REST API and the audit report at 100% at
every tier for the windows closed before and after the failures (loads' report, audit service, Airflow page);
``logbus down`` leaves no process behind."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests
from support import REPO, free_port, wait_until
from topology_checks import SMALL_WINDOWS, WINDOW_MS, airflow_token, check_complete, run_dag, wait_recovered

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(1200)]


def logbus(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(REPO / "platform"))
    return subprocess.run([sys.executable, "-m", "logbus.cli", *args], env=env, capture_output=True, text=True,
                          timeout=timeout)


def test_topology(tmp_path):
    from logbus.local import leftovers, zookeeper_mode

    topo = json.loads((REPO / "topology" / "default.json").read_text())
    net = random.randrange(60, 250)
    topo["datacenters"]["live"]["network"] = f"127.{net}.1"
    topo["datacenters"]["offline"]["network"] = f"127.{net}.2"
    topo["ports"] = {kind: free_port(f"127.{net}.1.1") for kind in ("zookeeper", "broker", "registry", "audit",
                                                                    "airflow")}
    topo.update(SMALL_WINDOWS)
    (tmp_path / "topology.json").write_text(json.dumps(topo))
    state = tmp_path / "state"

    def statuses() -> dict[str, dict]:
        return {s["name"]: s for s in json.loads(logbus("status", "--json", "--state-dir", str(state)).stdout)
                ["services"]}

    live_zookeepers = {f"live-zookeeper{i}": f"127.{net}.1.{9 + i}" for i in (1, 2, 3)}

    def live_zookeeper_modes() -> dict[str, str | None]:
        return {name: zookeeper_mode(host, topo["ports"]["zookeeper"]) for name, host in live_zookeepers.items()}

    try:
        out = logbus("up", "--topology", str(tmp_path / "topology.json"), "--state-dir", str(state))
        assert out.returncode == 0, out.stdout + out.stderr
        assert "Airflow login: admin / " in out.stdout
        status = json.loads(logbus("status", "--json", "--state-dir", str(state)).stdout)
        unhealthy = [{k: s.get(k) for k in ("name", "running", "restarting", "restarts", "last_exit")}
                     for s in status["services"] if not s["healthy"]]
        assert status["healthy"] and not unhealthy, (unhealthy, [Path(s["log"]).read_text()[-2000:]
                                                                 for s in status["services"] if not s["healthy"]])
        live_registry = f"http://127.{net}.1.20:{topo['ports']['registry']}"
        offline_registry = f"http://127.{net}.2.20:{topo['ports']['registry']}"
        schema = {"type": "record", "name": "Signup", "fields": [{"name": "member_id", "type": "long"}]}
        r = requests.post(f"{live_registry}/subjects/signups-value/versions",
                          json={"schema": json.dumps(schema)}, timeout=30)
        assert r.status_code == 200, r.text
        schema_id = r.json()["id"]
        wait_until(lambda: requests.get(f"{offline_registry}/schemas/ids/{schema_id}", timeout=10).status_code == 200,
                   60, interval=0.5, what="the read-only registry following the primary")
        audit = f"http://127.{net}.2.40:{topo['ports']['audit']}"
        time.sleep(3 * WINDOW_MS / 1000)  # demo traffic for a few windows
        wait_recovered(audit, 0)
        airflow = f"http://127.{net}.2.50:{topo['ports']['airflow']}"
        password = json.loads((state / "offline-airflow" / "passwords.json").read_text())["admin"]
        token = airflow_token(airflow, password)
        report = state / "offline-airflow" / "data" / "warehouse" / "_audit" / "report.json"

        # failures during traffic: kill -9 the live ZooKeeper leader (the JVM: its supervisor restarts it) ...
        killed_at = int(time.time() * 1000)
        modes = live_zookeeper_modes()
        leaders = [name for name, mode in modes.items() if mode == "leader"]
        assert len(leaders) == 1, modes
        zk_leader = leaders[0]
        os.kill(statuses()[zk_leader]["service_pid"], signal.SIGKILL)
        wait_until(lambda: [n for n, m in live_zookeeper_modes().items() if m == "leader" and n != zk_leader], 30,
                   interval=0.2, what="a new leader of the live ZooKeeper ensemble")
        # ... then a live broker and the mirror, whole (supervisors included): `logbus up` brings them back
        records = {n: json.loads((state / "pids" / f"{n}.json").read_text()) for n in ("live-broker2",
                                                                                        "offline-mirror-live")}
        for rec in records.values():
            os.killpg(rec["pid"], signal.SIGKILL)
        time.sleep(8)
        out = logbus("up", "--state-dir", str(state))
        assert out.returncode == 0, out.stdout + out.stderr
        assert "live-broker2             started" in out.stdout and "offline-mirror-live      started" in out.stdout
        assert f"{zk_leader:24} already running" in out.stdout, out.stdout  # restarted by its supervisor
        after = statuses()
        assert after[zk_leader]["healthy"] and after[zk_leader]["last_exit"] == "SIGKILL", after[zk_leader]
        assert live_zookeeper_modes()[zk_leader] in ("leader", "follower")  # rejoined the ensemble
        restarted = {n: s["last_exit"] for n, s in after.items()
                     if s["kind"] in ("zookeeper", "broker") and s["restarts"] and n != zk_leader}
        assert restarted == {}, f"ZooKeeper nodes or brokers restarted by their supervisors: {restarted}"
        wait_recovered(audit, killed_at)  # the mirror caught up: offline complete again after the failures
        # one load over everything: the windows before and after the failures, 100% at every tier
        cut = run_dag(airflow, token)
        rows = check_complete(json.loads(report.read_text()), audit, airflow, token, until_ms=cut)
        assert any(r["window_start"] > killed_at for r in rows), "no window after the failures was checked"
        assert any(r["window_end"] < killed_at for r in rows), "no window before the failures was checked"
    finally:
        out = logbus("down", "--state-dir", str(state), timeout=300)
        left = leftovers(state.resolve())
        for pid in left:
            os.kill(pid, signal.SIGKILL)
    assert out.returncode == 0, out.stderr
    assert left == [], f"processes left behind by logbus down: {left}"
