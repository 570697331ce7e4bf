"""The whole two-datacenter topology as a new user runs it: ``logbus up`` on a fresh state directory, a schema
registered over HTTP, demo traffic for a few windows, the load DAG triggered through Airflow's REST API, the audit
report at 100% for closed windows at every tier (audit service and the Airflow page); then ``kill -9`` of a live
broker and of the mirror during traffic, ``logbus up`` again, and later windows still 100% complete;
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

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(1200)]
WINDOW_MS, GRACE_MS = 4000, 4000


def logbus(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(REPO / "platform"))
    return subprocess.run([sys.executable, "-m", "logbus.cli", *args], env=env, capture_output=True, text=True,
                          timeout=timeout)


def test_topology(tmp_path):
    from logbus.local import leftovers

    topo = json.loads((REPO / "topology" / "default.json").read_text())
    net = random.randrange(60, 250)
    topo["datacenters"]["live"]["network"] = f"127.{net}.1"
    topo["datacenters"]["offline"]["network"] = f"127.{net}.2"
    topo["ports"] = {kind: free_port(f"127.{net}.1.1") for kind in ("zookeeper", "broker", "registry", "audit",
                                                                    "airflow")}
    topo.update(audit_window_ms=WINDOW_MS, audit_grace_ms=GRACE_MS, audit_emit_interval_ms=1000,
                load_schedule="@once", demo={"rate": 50})
    (tmp_path / "topology.json").write_text(json.dumps(topo))
    state = tmp_path / "state"
    try:
        out = logbus("up", "--topology", str(tmp_path / "topology.json"), "--state-dir", str(state))
        assert out.returncode == 0, out.stdout + out.stderr
        assert "Airflow login: admin / " in out.stdout
        status = json.loads(logbus("status", "--json", "--state-dir", str(state)).stdout)
        assert status["healthy"] and all(s["healthy"] for s in status["services"]), status
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
        token = requests.post(f"{airflow}/auth/token", json={"username": "admin", "password": password},
                              timeout=30).json()["access_token"]
        first_cut = run_dag(airflow, token)
        check_complete(state, audit, airflow, token, until_ms=first_cut)

        # failures during traffic: kill -9 a live broker and the mirror, then `logbus up` brings them back
        records = {n: json.loads((state / "pids" / f"{n}.json").read_text()) for n in ("live-broker2",
                                                                                        "offline-mirror-live")}
        for rec in records.values():
            os.killpg(rec["pid"], signal.SIGKILL)
        killed_at = int(time.time() * 1000)
        time.sleep(8)
        out = logbus("up", "--state-dir", str(state))
        assert out.returncode == 0, out.stdout + out.stderr
        assert "live-broker2             started" in out.stdout and "offline-mirror-live      started" in out.stdout
        wait_recovered(audit, killed_at)  # the mirror caught up: offline complete again after the failures
        second_cut = run_dag(airflow, token)
        rows = check_complete(state, audit, airflow, token, until_ms=second_cut)
        assert any(r["window_start"] > killed_at for r in rows), "no window after the failures was checked"
    finally:
        out = logbus("down", "--state-dir", str(state), timeout=300)
        left = leftovers(state.resolve())
        for pid in left:
            os.kill(pid, signal.SIGKILL)
    assert out.returncode == 0, out.stderr
    assert left == [], f"processes left behind by logbus down: {left}"


def wait_recovered(audit: str, since_ms: int) -> None:
    """Until the audit service shows, for windows closed since ``since_ms`` (at least two), 100% at both
    cluster tiers."""
    def recovered():
        now = int(time.time() * 1000)
        rows = [r for r in requests.get(f"{audit}/api/report", params={"from": since_ms}, timeout=30).json()
                if r["window_start"] >= since_ms and r["window_end"] + GRACE_MS < now]
        return (len({r["window_start"] for r in rows}) >= 2 and {r["tier"] for r in rows} == {"live", "offline"}
                and all(r["completeness"] == 100.0 for r in rows))

    wait_until(recovered, 240, interval=2, what="windows complete at the live and offline tiers")


def run_dag(airflow: str, token: str) -> int:
    """Trigger logbus_load, wait for success; returns the trigger time (ms): windows closed before it must be
    complete in its report."""
    headers = {"Authorization": f"Bearer {token}"}
    triggered = int(time.time() * 1000)
    r = requests.post(f"{airflow}/api/v2/dags/logbus_load/dagRuns", json={"logical_date": None},
                      headers=headers, timeout=30)
    assert r.status_code == 200, r.text
    run_id = r.json()["dag_run_id"]

    def finished():
        state = requests.get(f"{airflow}/api/v2/dags/logbus_load/dagRuns/{run_id}", headers=headers,
                             timeout=30).json()["state"]
        assert state != "failed", "the logbus_load run failed"
        return state == "success"

    wait_until(finished, 400, interval=2, what="the logbus_load run")
    return triggered


def check_complete(state: Path, audit: str, airflow: str, token: str, until_ms: int) -> list[dict]:
    """Every window closed (end + grace) before ``until_ms``: 100% at every tier, in the loads report, the audit
    service and the Airflow page."""
    report = json.loads((state / "offline-airflow" / "data" / "warehouse" / "_audit" / "report.json").read_text())
    closed = [r for r in report["rows"] if r["window_end"] + GRACE_MS < until_ms - 2000]
    assert {r["tier"] for r in closed} == {"live", "offline", "warehouse"}, report["rows"][:5]
    bad = [r for r in closed if r["missing"] or r["completeness"] != 100.0]
    assert not bad, bad[:5]
    service_rows = requests.get(f"{audit}/api/report", params={"to": until_ms - 2000 - GRACE_MS}, timeout=30).json()
    assert service_rows and all(r["completeness"] == 100.0 for r in service_rows
                                if r["window_end"] + GRACE_MS < until_ms - 2000)
    page = requests.get(f"{airflow}/logbus-audit/", headers={"Authorization": f"Bearer {token}"}, timeout=30)
    assert page.status_code == 200 and "<th colspan=6>warehouse</th>" in page.text
    assert requests.get(f"{audit}/", timeout=30).status_code == 200
    return closed
