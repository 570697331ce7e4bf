"""The whole two-datacenter topology as a new user runs it: ``logbus up`` on a fresh state directory, a schema
registered over HTTP, demo traffic for a few windows complete at live and offline; then, during traffic, ``kill -9``
of the live ZooKeeper ensemble's leader (its supervisor restarts it; no broker restarts) and of a live broker and the
mirror, ``logbus up`` again; then the load DAG triggered through Airflow's REST API and the audit report at 100% at
every tier for the windows closed before and after the failures (loads' report, audit service, Airflow page);
``logbus down`` leaves no process behind.

It is also the chaos run (``-m chaos``, tests/chaos.py): after those failures, ``LOGBUS_CHAOS_ROUNDS`` rounds (2 by
default) of one random fault each, while an ``acks=all`` producer keeps a ledger of every acknowledged record on
live; the mirror reaches live through TCP proxies the test cuts (the topology's ``wan_network``) and one live
broker's log dir is a small tmpfs the test fills. At the end every record of the ledger is read back in order and
the one load covers the windows of the whole run. ``bench/chaos_run.py`` runs it longer and plots the report
(``LOGBUS_CHAOS_SEED``, ``LOGBUS_CHAOS_KINDS``, ``LOGBUS_CHAOS_MAX_FAULT_S``, ``LOGBUS_CHAOS_REPORT``)."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import time
from pathlib import Path

import pytest
import requests
from chaos import KINDS, Chaos, logbus
from support import REPO, Ledger, free_port, wait_until
from tcp_proxy import TcpProxy
from topology_checks import (SMALL_WINDOWS, WINDOW_MS, airflow_token, check_complete, check_prometheus,
                             fresh_loopback, run_dag, wait_recovered)

ROUNDS = int(os.environ.get("LOGBUS_CHAOS_ROUNDS", "2"))
pytestmark = [pytest.mark.e2e, pytest.mark.chaos, pytest.mark.timeout(1200 + 900 * ROUNDS)]


def mount_tmpfs(path: Path, size_mb: int) -> bool:
    path.mkdir(parents=True, exist_ok=True)
    return subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_mb}m", "tmpfs", str(path)],
                          capture_output=True).returncode == 0


def test_topology(tmp_path, topology_dir):
    from logbus.local import leftovers, zookeeper_mode

    topo = json.loads((REPO / "topology" / "default.json").read_text())
    net = fresh_loopback(topo)
    topo.update(SMALL_WINDOWS)
    wan_port = free_port(f"127.{net}.1.1")  # the WAN: the mirror reaches live's brokers through proxies
    topo["datacenters"]["live"]["wan_network"] = f"127.{net}.3"
    topo["ports"]["broker_wan"] = wan_port
    (tmp_path / "topology.json").write_text(json.dumps(topo))
    state = topology_dir / "state"  # reachable by the postgres user (conftest.topology_dir)
    proxies = [TcpProxy(f"127.{net}.3.{i}", wan_port, f"127.{net}.1.{i}", wan_port).start() for i in (1, 2, 3)]
    disk = state / "live-broker3" / "data"  # a small filesystem for the full-disk fault
    mounted = mount_tmpfs(disk, 256)
    seed = int(os.environ.get("LOGBUS_CHAOS_SEED") or random.randrange(1 << 32))
    kinds = [k for k in os.environ.get("LOGBUS_CHAOS_KINDS", ",".join(KINDS)).split(",") if k]
    print(f"chaos: seed {seed}, {ROUNDS} rounds of {kinds}, tmpfs log dir: {mounted}", flush=True)
    ledger = None

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
        live = ",".join(f"127.{net}.1.{i}:{topo['ports']['broker']}" for i in (1, 2, 3))
        clusters = {"live": live, "offline": ",".join(f"127.{net}.2.{i}:{topo['ports']['broker']}" for i in (1, 2, 3))}
        from confluent_kafka.admin import AdminClient, NewTopic

        admin = AdminClient({"bootstrap.servers": live})  # kept: a collected client fails its futures
        admin.create_topics([NewTopic("_ledger", 2, 3)])["_ledger"].result(60)
        ledger = Ledger(live, "_ledger", interval=0.02, message_timeout_ms=600000).start()  # ~50 records/s
        ledger.progress("the ledger's first acknowledgements")
        audit = f"http://127.{net}.2.40:{topo['ports']['audit']}"
        time.sleep(3 * WINDOW_MS / 1000)  # demo traffic for a few windows
        wait_recovered(audit, 0, clusters=clusters)
        check_prometheus(f"http://127.{net}.2.60:{topo['ports']['prometheus']}",
                         {"broker", "mirror", "counter", "lag", "audit", "registry", "loads", "prometheus",
                          "alertmanager"})

        def numbers() -> dict:  # `logbus status --json`: the numbers per service, from Prometheus
            return {n: s["numbers"] or {} for n, s in statuses().items()}

        shown = wait_until(lambda: (lambda got: got if got["offline-mirror-live"].get("records_per_s", 0) > 0
                                    and got["live-broker1"].get("records_in_per_s", 0) > 0 else None)(numbers()),
                           60, interval=2, what="status numbers from Prometheus")
        assert "lag_records" in shown["offline-mirror-live"] and shown["live-audit-counter"]["records_per_s"] > 0
        assert all(shown[f"{dc}-broker{i}"]["under_replicated_partitions"] == 0 for dc in ("live", "offline")
                   for i in (1, 2, 3)), shown
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
        # the mirror caught up: offline complete again after the failures
        wait_recovered(audit, killed_at, clusters=clusters)

        # the chaos rounds: one random fault each, healed and recovered from before the next
        chaos = Chaos(state, audit, airflow, token, ledger, proxies, disk if mounted else None,
                      random.Random(seed), max_fault_s=float(os.environ.get("LOGBUS_CHAOS_MAX_FAULT_S", "60")))
        chaos_started = time.monotonic()
        for number, kind in enumerate(chaos.plan(ROUNDS, kinds), 1):
            chaos.round(number, kind)
        chaos.wait_healthy()
        wait_recovered(audit, killed_at, clusters=clusters)  # every window since the first failures: 100% at both
        ledger.stop()
        result = ledger.check()  # every acknowledged record readable, in order per partition, once
        assert result["acknowledged"] > 1000, result
        # one load over everything: the windows before, during and after the failures, 100% at every tier
        cut = run_dag(airflow, token)
        rows = check_complete(json.loads(report.read_text()), audit, airflow, token, until_ms=cut)
        assert any(r["window_start"] > killed_at for r in rows), "no window after the failures was checked"
        assert any(r["window_end"] < killed_at for r in rows), "no window before the failures was checked"
        # the load's numbers reach Prometheus through the Airflow plugin's /logbus-metrics/metrics
        prom = requests.Session()
        prom.trust_env = False

        def loaded_rows() -> float:
            got = prom.get(f"http://127.{net}.2.60:{topo['ports']['prometheus']}/api/v1/query",
                           params={"query": "sum(logbus_load_rows_total)"}, timeout=10).json()["data"]["result"]
            return float(got[0]["value"][1]) if got else 0.0

        assert wait_until(loaded_rows, 30, interval=1, what="the load's rows in Prometheus") >= len(rows)
        summary = chaos.report(seed, result, time.monotonic() - chaos_started)
        print("chaos: " + json.dumps({k: v for k, v in summary.items() if k != "round_details"}), flush=True)
        if os.environ.get("LOGBUS_CHAOS_REPORT"):
            Path(os.environ["LOGBUS_CHAOS_REPORT"]).write_text(json.dumps(summary, indent=1) + "\n")
    finally:
        if ledger is not None:
            ledger.stop(wait=False)
        out = logbus("down", "--state-dir", str(state), timeout=300)
        left = leftovers(state.resolve())
        for pid in left:
            os.kill(pid, signal.SIGKILL)
        for proxy in proxies:
            proxy.close()
        if mounted:
            subprocess.run(["umount", "-l", str(disk)], check=False)
    assert out.returncode == 0, out.stderr
    assert left == [], f"processes left behind by logbus down: {left}"
