"""The reference topology under docker-compose on a real Docker engine, as a user runs it, through the host's
published ports only (127.0.0.1):

1. ``bash scripts/docker-setup`` builds ``logbus:local`` (warm: seconds);
2. ``logbus compose`` renders a test variant of the default topology into a temporary directory laid out like the
   repository (``docker-compose.yml`` + ``docker/config/``): 4 s audit windows with 4 s grace, the load DAG without
   a schedule (``none``: only the test's run), and host ports that are free on this machine (the published ports of a user's own stack are
   left alone: the brokers' advertised EXTERNAL listeners follow the published ports);
3. ``docker-compose -p logbus-test-<random> up -d --no-build`` (a project of its own): the time until every service
   with a health check is healthy and every other is running; nothing alarming in ``up``'s output;
4. the journey: a schema registered on the live registry, read back by id from the read-only one; keyed records
   with headers produced to a live broker's EXTERNAL listener and read on the offline cluster after the mirror; the
   demo frontends' audited traffic complete at the live and offline tiers (audit service); ``logbus_load`` is
   triggered through Airflow's REST API
   (admin password read from the container's volume), and every closed
   window 100% at live, offline and warehouse (the reconcile task's report.json read with ``docker exec``, the
   audit service's API and the Airflow Audit page);
5. faults during traffic: the main process of ``live-broker2`` and of ``offline-mirror-live`` is killed with
   SIGKILL from the host (``kill -9`` of the container's init pid, what a crash looks like). ``docker kill`` would
   not do: Docker counts it as a manual stop and ``restart: unless-stopped`` then leaves the container exited
   (checked on this engine, Docker 20.10); ``docker exec <c> kill -9 1`` would not either (the kernel ignores
   SIGKILL sent to a namespace's init from inside). Both must come back through the restart policy (restart count
   up, healthy or running again), the other services must not restart, and once the mirror has caught up the
   windows after the kill are 100% again at live and offline (re-reads show as duplicates, never as loss);
6. ``docker-compose down --remove-orphans`` leaves no container and keeps every named volume (the data); then
   ``docker-compose down -v --remove-orphans`` — always, also when a step fails — and no container, network or
   volume of the project is left.

Three checks are made after the whole journey and teardown, so that one finding does not hide the others: no
service crashed (was restarted by Docker) before the faults were injected; the loads' report marks no window "lost"
at the warehouse that closed (end + grace) after the run's plan task started (the load cannot hold it yet: it is
"pending" there); and the Airflow container keeps no zombie processes (the Spark JVMs of finished tasks, orphaned to
the container's PID 1, must be reaped; a zombie counts when it is still there, same pid and parent, 15 s later).

Prints the figures recorded in bench/results/compose.md: image size, time from ``up -d`` to all healthy (and per
service), memory of the running stack from ``docker stats`` (total and per service)."""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from datetime import datetime
from pathlib import Path

import pytest
import requests
import yaml
from support import REPO, wait_until
from topology_checks import (GRACE_MS, SMALL_WINDOWS, WINDOW_MS, airflow_token, check_complete, check_prometheus,
                             run_dag, wait_recovered)

pytestmark = [pytest.mark.compose, pytest.mark.timeout(2400)]
KILLED = ("live-broker2", "offline-mirror-live")
UNITS = {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40, "kB": 1e3, "MB": 1e6, "GB": 1e9, "TB": 1e12}


def run(args: list[str], timeout: float = 300, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(args, capture_output=True, text=True, timeout=timeout, cwd=cwd)


def docker(*args: str, timeout: float = 120) -> str:
    out = run(["docker", *args], timeout=timeout)
    assert out.returncode == 0, f"docker {' '.join(args)}: {out.stderr}"
    return out.stdout


def free_block(count: int, host: str = "127.0.0.1") -> int:
    """The first of ``count`` consecutive ports that are free on ``host``, below the kernel's ephemeral range (a
    port in it can be taken by any outgoing connection between this check and Docker's bind)."""
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    for _ in range(500):
        base = random.randrange(min(20000, low // 2), low - count)
        socks = []
        try:
            for port in range(base, base + count):
                s = socket.socket()
                socks.append(s)
                s.bind((host, port))
            return base
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise RuntimeError(f"no {count} consecutive free ports on {host}")


def zombie_lines(stack, service: str) -> dict[str, str]:
    """The container's zombie processes now: ``{"pid ppid": ps line}``."""
    out = stack.exec(service, "ps", "-eo", "pid=,ppid=,stat=,comm=")
    return {" ".join(line.split()[:2]): line.strip() for line in out.stdout.splitlines()
            if line.split()[2].startswith("Z")}


def lasting_zombies(stack, service: str, settle_s: float = 15.0) -> list[str]:
    """Zombies that are still there, same pid and parent, ``settle_s`` later: leaks, not a child that exited a
    moment ago and that its parent (an Airflow process that waits for its children in its own loop) has yet to
    reap."""
    first = zombie_lines(stack, service)
    if not first:
        return []
    print(f"zombie processes in {service} (checked again in {settle_s:.0f} s): {sorted(first.values())}")
    time.sleep(settle_s)
    later = zombie_lines(stack, service)
    return sorted(later[key] for key in first.keys() & later.keys())


class Stack:
    """One docker-compose project: the compose file and config dir under ``directory``, its own project name."""

    def __init__(self, directory: Path, project: str):
        self.dir, self.project = directory, project
        self.label = f"label=com.docker.compose.project={project}"

    def compose(self, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
        binary = shutil.which("docker-compose") or "/usr/bin/docker-compose"
        return run([binary, "-p", self.project, "-f", str(self.dir / "docker-compose.yml"), "--project-directory",
                    str(self.dir), *args], timeout=timeout)

    def containers(self) -> dict[str, dict]:
        """service name -> {id, status, health (None without a health check), restarts, pid}."""
        ids = docker("ps", "-aq", "--filter", self.label).split()
        if not ids:
            return {}
        out = {}
        for c in json.loads(docker("inspect", *ids)):
            health = c["State"].get("Health")
            out[c["Config"]["Labels"]["com.docker.compose.service"]] = {
                "id": c["Id"], "status": c["State"]["Status"], "health": health["Status"] if health else None,
                "restarts": c["RestartCount"], "pid": c["State"]["Pid"]}
        return out

    def exec(self, service: str, *cmd: str) -> subprocess.CompletedProcess:
        return run(["docker", "exec", self.containers()[service]["id"], *cmd], timeout=60)

    def leftovers(self) -> dict[str, list[str]]:
        return {"containers": docker("ps", "-aq", "--filter", self.label).split(),
                "networks": docker("network", "ls", "-q", "--filter", self.label).split(),
                "volumes": docker("volume", "ls", "-q", "--filter", self.label).split()}

    def stats(self) -> dict[str, tuple[float, float]]:
        """(memory in MiB, CPU % of one core) per service now (``docker stats --no-stream``)."""
        by_id = {c["id"]: name for name, c in self.containers().items()}
        out = {}
        for line in docker("stats", "--no-stream", "--format", "{{.ID}}\t{{.MemUsage}}\t{{.CPUPerc}}",
                           *by_id).splitlines():
            cid, usage, cpu = line.split("\t")
            m = re.match(r"([\d.]+)\s*([A-Za-z]+)", usage.split("/")[0].strip())
            name = next(n for i, n in by_id.items() if i.startswith(cid))
            out[name] = (float(m.group(1)) * UNITS[m.group(2)] / 2**20, float(cpu.rstrip("%")))
        return out


def get_json(url: str, **kwargs):
    """The JSON of a 200 answer to GET ``url``, else None (for polling: a connection error or a timeout of a busy
    service is "not yet")."""
    try:
        r = requests.get(url, timeout=30, **kwargs)
    except (requests.ConnectionError, requests.Timeout):
        return None
    return r.json() if r.status_code == 200 else None


def plan_started_ms(airflow: str, headers: dict) -> int:
    """When the plan task of the latest manual logbus_load run started (ms)."""
    runs = requests.get(f"{airflow}/api/v2/dags/logbus_load/dagRuns", headers=headers, timeout=60).json()["dag_runs"]
    run_id = max((r for r in runs if r["run_type"] == "manual"), key=lambda r: r["run_after"])["dag_run_id"]
    ti = requests.get(f"{airflow}/api/v2/dags/logbus_load/dagRuns/{run_id}/taskInstances/plan", headers=headers,
                      timeout=60).json()
    return int(datetime.fromisoformat(ti["start_date"].replace("Z", "+00:00")).timestamp() * 1000)


def ready(c: dict) -> bool:
    return c["status"] == "running" and c["health"] in (None, "healthy")


def print_stats(what: str, stats: dict[str, tuple[float, float]]) -> None:
    total, cpu = sum(m for m, _ in stats.values()), sum(c for _, c in stats.values())
    print(f"\nthe running stack ({what}), docker stats --no-stream: {total:.0f} MiB, CPU {cpu:.0f}% of one core, "
          f"{len(stats)} containers")
    for name, (mib, c) in sorted(stats.items(), key=lambda kv: -kv[1][0]):
        print(f"  {name:24} {mib:8.1f} MiB {c:6.1f}%")


def test_compose_up(tmp_path):
    from logbus.topology import services

    # 1. the image
    started = time.monotonic()
    setup = run(["bash", "scripts/docker-setup"], timeout=1800, cwd=REPO)
    assert setup.returncode == 0, setup.stdout + setup.stderr
    lines = setup.stdout.strip().splitlines()
    print(f"\nbash scripts/docker-setup ({time.monotonic() - started:.1f} s): {lines[-1] if lines else ''}")
    size = int(docker("image", "inspect", "logbus:local", "--format", "{{.Size}}"))
    print(f"image logbus:local: {size / 1e9:.2f} GB")

    # 2. the test variant of the default topology, rendered like the repository's compose files
    topo = json.loads((REPO / "topology" / "default.json").read_text())
    topo.update(SMALL_WINDOWS)
    topo["load_schedule"] = "none"  # the test triggers the one run it checks (an @once run would come first)
    base = free_block(13)
    topo["published"] = {"live.broker": base, "offline.broker": base + 3, "live.registry": base + 6,
                         "offline.registry": base + 7, "offline.audit": base + 8, "offline.airflow": base + 9,
                         "offline.prometheus": base + 10, "live.registry2": base + 11,
                         "offline.alertmanager": base + 12}
    (tmp_path / "topology.json").write_text(json.dumps(topo))
    stack_dir = tmp_path / "stack"
    stack_dir.mkdir()
    env = dict(os.environ, PYTHONPATH=str(REPO / "platform"))
    out = subprocess.run([sys.executable, "-m", "logbus.cli", "compose", "--topology", str(tmp_path / "topology.json"),
                          "--output", str(stack_dir / "docker-compose.yml"),
                          "--config-dir", str(stack_dir / "docker" / "config")],
                         env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    expected = {s.name: s.health[0] != "alive" for s in services(topo, "compose")}  # name -> has a health check
    live_brokers = ",".join(f"127.0.0.1:{base + i}" for i in range(3))
    offline_broker = f"127.0.0.1:{base + 3}"
    live_registry, offline_registry = f"http://127.0.0.1:{base + 6}", f"http://127.0.0.1:{base + 7}"
    audit, airflow = f"http://127.0.0.1:{base + 8}", f"http://127.0.0.1:{base + 9}"

    stack = Stack(stack_dir, f"logbus-test-{uuid.uuid4().hex[:8]}")
    figures: dict = {"image_gb": size / 1e9}

    def terminated(signum, frame):  # `timeout`, CI cancelling: still tear the stack down (the finally below)
        raise SystemExit(f"terminated by signal {signum}")

    previous = signal.signal(signal.SIGTERM, terminated)
    try:
        # 3. up, and the time until every service is healthy (or running, without a health check)
        t0 = time.monotonic()
        up = stack.compose("up", "-d", "--no-build", timeout=900)
        figures["up_returned_s"] = time.monotonic() - t0
        output = up.stdout + up.stderr
        print(f"\ndocker-compose -p {stack.project} up -d --no-build ({figures['up_returned_s']:.1f} s):\n{output}")
        assert up.returncode == 0, output
        assert "error" not in output.lower() and "Traceback" not in output, output
        ready_at: dict[str, float] = {}

        def all_ready():
            now = time.monotonic() - t0
            cs = stack.containers()
            assert set(cs) == set(expected), f"containers {sorted(cs)} != services {sorted(expected)}"
            for name, c in cs.items():
                assert (c["health"] is not None) == expected[name], (name, c)
                assert c["status"] in ("created", "running", "restarting"), (name, c)
                assert c["health"] != "unhealthy", (name, c)
                if ready(c):
                    ready_at.setdefault(name, now)
            return all(ready(c) for c in cs.values())

        wait_until(all_ready, 600, interval=1, what="every service healthy (or running)")
        figures["all_ready_s"] = time.monotonic() - t0
        print(f"up -d to all {len(expected)} services healthy/running: {figures['all_ready_s']:.1f} s "
              f"(up -d returned after {figures['up_returned_s']:.1f} s); first seen ready (s after up -d):")
        for name, at in sorted(ready_at.items(), key=lambda kv: kv[1]):
            print(f"  {name:24} {at:6.1f}{'' if expected[name] else '  (no health check: running)'}")

        # 4. the journey: a schema on the live registry, read back by id from the read-only registry
        schema = {"type": "record", "name": "Signup", "fields": [{"name": "member_id", "type": "long"}]}
        r = requests.post(f"{live_registry}/subjects/signups-value/versions", json={"schema": json.dumps(schema)},
                          timeout=30)
        assert r.status_code == 200, r.text
        schema_id = r.json()["id"]
        got = wait_until(lambda: get_json(f"{offline_registry}/schemas/ids/{schema_id}"), 60, interval=0.5,
                         what="the read-only registry following the primary")
        assert json.loads(got["schema"]) == schema
        # the second live instance: the same subject's lookup answers there, a write there reaches the leader
        live_registry2 = f"http://127.0.0.1:{base + 11}"
        assert requests.get(f"{live_registry2}/schemas/ids/{schema_id}", timeout=30).status_code == 200
        r2 = requests.post(f"{live_registry2}/subjects/logins-value/versions", timeout=30,
                           json={"schema": json.dumps({**schema, "name": "Login"})})
        assert r2.status_code == 200 and r2.json()["id"] == schema_id + 1, r2.text
        wait_until(lambda: get_json(f"{live_registry}/schemas/ids/{schema_id + 1}"), 30, interval=0.5,
                   what="the write through the second instance, read on the first")
        refused = requests.post(f"{offline_registry}/subjects/signups-value/versions",
                                json={"schema": json.dumps(schema)}, timeout=30)
        assert refused.status_code >= 400 and "error_code" in refused.json(), refused.text

        # keyed records with headers to a live broker's EXTERNAL listener, read on the offline cluster
        from confluent_kafka import Consumer, Producer

        topic = f"journey-{uuid.uuid4().hex[:6]}"
        producer = Producer({"bootstrap.servers": live_brokers, "acks": "all"})
        sent = {f"member-{i}".encode(): f"hello {i}".encode() for i in range(20)}
        for key, value in sent.items():
            producer.produce(topic, value, key=key, headers=[("origin", b"compose-test")])
        unacked = producer.flush(60)
        producer.close()
        assert unacked == 0, "records not acknowledged by the live cluster"
        consumer = Consumer({"bootstrap.servers": offline_broker, "group.id": f"{topic}-reader",
                             "auto.offset.reset": "earliest", "topic.metadata.refresh.interval.ms": 2000})
        consumer.subscribe([topic])
        received: dict[bytes, tuple] = {}
        try:
            deadline = time.monotonic() + 120
            while len(received) < len(sent) and time.monotonic() < deadline:
                m = consumer.poll(1.0)
                if m is not None and not m.error():
                    received[m.key()] = (m.value(), dict(m.headers() or []))
        finally:
            consumer.close()
        assert {k: v for k, (v, _) in received.items()} == sent, f"read {len(received)} of {len(sent)} on offline"
        assert all(h.get("origin") == b"compose-test" for _, h in received.values())
        print(f"\n{len(sent)} records produced to {live_brokers} ({topic}), read on {offline_broker} after the mirror")

        # the demo frontends' audited traffic: complete at live and offline for a few windows
        time.sleep(3 * WINDOW_MS / 1000)
        wait_recovered(audit, 0)
        # Prometheus (published on 127.0.0.1) scrapes every container's /metrics and sees the traffic
        check_prometheus(f"http://127.0.0.1:{base + 10}", {"broker", "mirror", "counter", "lag", "audit", "registry",
                                                            "loads", "prometheus", "alertmanager"})

        # the load DAG through Airflow's REST API, the report at every tier
        password_file = "/var/lib/logbus/offline-airflow/passwords.json"

        def password():
            out = stack.exec("offline-airflow", "cat", password_file)
            return out.returncode == 0 and json.loads(out.stdout).get("admin")

        token = airflow_token(airflow, wait_until(password, 120, interval=2, what=f"Airflow's {password_file}"))
        headers = {"Authorization": f"Bearer {token}"}
        dag = wait_until(lambda: get_json(f"{airflow}/api/v2/dags/logbus_load", headers=headers), 300, interval=2,
                         what="the logbus_load DAG parsed by Airflow")
        assert not dag["is_paused"], dag
        load_props = (stack_dir / "docker" / "config" / "offline-airflow" / "load.properties").read_text()
        warehouse = re.search(r"^warehouse\.path=(.*)$", load_props, re.M).group(1)

        def report() -> dict:
            out = stack.exec("offline-airflow", "cat", f"{warehouse}/_audit/report.json")
            assert out.returncode == 0, out.stderr
            return json.loads(out.stdout)

        t = time.monotonic()
        cut = run_dag(airflow, token, timeout=1200)  # 177 s alone in a quiet hour, 519 s in a slow one
        figures["dag_s"] = time.monotonic() - t
        loads_report = report()
        rows = check_complete(loads_report, audit, airflow, token, until_ms=cut)
        print(f"logbus_load run triggered through the REST API: success after {figures['dag_s']:.0f} s; "
              f"{len({r['window_start'] for r in rows})} closed windows 100% at live, offline and warehouse")
        plan_ms = plan_started_ms(airflow, headers)
        lost = [r for r in loads_report["rows"] if r["status"] == "lost"]
        if lost:
            print(f"the loads' report marks {len(lost)} row(s) lost (trigger {cut}, plan task started {plan_ms}): "
                  + "; ".join(f"{r['tier']} {r['topic']} {r['window_start']}-{r['window_end']} {r['received']}/"
                              f"{r['expected']}" for r in lost[:16]))
        false_lost = [r for r in lost if r["tier"] == "warehouse" and r["window_end"] + GRACE_MS > plan_ms]
        figures["stats"] = stack.stats()
        print_stats("demo traffic, after a logbus_load run", figures["stats"])

        zombies = lasting_zombies(stack, "offline-airflow")
        if zombies:
            print(f"zombie processes in the offline-airflow container after the DAG runs: {zombies}")

        # 5. faults during traffic: SIGKILL of the main process of a live broker and of the mirror
        before = stack.containers()
        # checked at the end (the journey still runs): services that crashed before any fault was injected
        crashed = {n: c["restarts"] for n, c in before.items() if c["restarts"]}
        if crashed:
            print(f"\nservices restarted by Docker before any fault was injected: {crashed}")
            for name in crashed:
                logs = stack.compose("logs", "--no-color", name, timeout=120)
                print("\n".join(logs.stdout.splitlines()[:30]))
        for name in KILLED:
            os.kill(before[name]["pid"], signal.SIGKILL)
        killed_at = int(time.time() * 1000)
        t = time.monotonic()

        def back():
            cs = stack.containers()
            return all(cs[n]["restarts"] > before[n]["restarts"] and ready(cs[n]) for n in KILLED)

        wait_until(back, 180, interval=1, what=f"{' and '.join(KILLED)} restarted by the restart policy")
        figures["restart_s"] = time.monotonic() - t
        print(f"\nkill -9 of {', '.join(KILLED)}: restarted by Docker and healthy/running again after "
              f"{figures['restart_s']:.1f} s")
        wait_recovered(audit, killed_at, timeout=300, clusters={"live": live_brokers, "offline": offline_broker})  # the mirror caught up: complete again after the kill
        rows = requests.get(f"{audit}/api/report", params={"from": killed_at}, timeout=60).json()
        closed = [r for r in rows if r["window_end"] + GRACE_MS < int(time.time() * 1000)]
        assert closed and all(r["completeness"] == 100.0 and not r["missing"] for r in closed), closed[:5]
        after = stack.containers()
        assert all(ready(c) for c in after.values()), {n: c for n, c in after.items() if not ready(c)}
        others = {n: (before[n]["restarts"], c["restarts"]) for n, c in after.items()
                  if n not in KILLED and c["restarts"] != before[n]["restarts"]}
        assert not others, f"services restarted that were not killed (before, after): {others}"
        counts = ", ".join(f"{n} {after[n]['restarts']}" for n in KILLED)
        print(f"windows since the kill: {len({r['window_start'] for r in closed})} closed, all 100% at live and "
              f"offline ({sum(r['duplicates'] for r in closed)} duplicates counted); restart counts: {counts}")

        # `down` (without -v) removes the containers and keeps the data: every named volume is still there
        named = set(yaml.safe_load((stack_dir / "docker-compose.yml").read_text()).get("volumes") or {})
        kept = stack.compose("down", "--remove-orphans", timeout=600)
        assert kept.returncode == 0, kept.stdout + kept.stderr
        left = stack.leftovers()
        volumes = {v.removeprefix(stack.project + "_") for v in left["volumes"]}
        assert not left["containers"] and named and volumes == named, (left, named)
        print(f"down: no container left, the {len(named)} named volumes kept")
    except BaseException:
        logs = stack.compose("logs", "--no-color", "--tail", "25", timeout=120)
        print(f"\n--- docker-compose logs --tail 25 (the test failed) ---\n{logs.stdout}{logs.stderr}")
        raise
    finally:
        # 6. always: down, and nothing of the project left (removed by force and reported if it was)
        t = time.monotonic()
        down = stack.compose("down", "-v", "--remove-orphans", timeout=600)
        figures["down_s"] = time.monotonic() - t
        left = stack.leftovers()
        if left["containers"]:
            run(["docker", "rm", "-f", "-v", *left["containers"]])
        if left["networks"]:
            run(["docker", "network", "rm", *left["networks"]])
        if left["volumes"]:
            run(["docker", "volume", "rm", "-f", *left["volumes"]])
        signal.signal(signal.SIGTERM, previous)
    assert down.returncode == 0, down.stdout + down.stderr
    assert not any(left.values()), f"left behind by docker-compose down -v --remove-orphans: {left}"

    stats = figures["stats"]
    print("\n| figure | value |\n|---|---|")
    print(f"| image logbus:local | {figures['image_gb']:.2f} GB |")
    print(f"| `up -d` returned | {figures['up_returned_s']:.0f} s |")
    print(f"| `up -d` to all {len(expected)} services healthy/running | {figures['all_ready_s']:.0f} s |")
    print(f"| memory / CPU, whole stack (docker stats) | {sum(m for m, _ in stats.values()):.0f} MiB / "
          f"{sum(c for _, c in stats.values()):.0f}% |")
    for name, (mib, cpu) in sorted(stats.items(), key=lambda kv: -kv[1][0]):
        print(f"| memory / CPU, {name} | {mib:.0f} MiB / {cpu:.1f}% |")
    print(f"| logbus_load run, triggered through the REST API (trigger to success) | {figures['dag_s']:.0f} s |")
    print(f"| kill -9 to restarted and healthy | {figures['restart_s']:.0f} s |")
    print(f"| `down -v --remove-orphans` | {figures['down_s']:.0f} s |")
    problems = []
    if crashed:
        problems.append(f"services crashed (restarted by Docker) before any fault was injected: {crashed} (the start "
                        "of their logs is printed above)")
    if false_lost:
        problems.append(f"the loads' report marks {len(false_lost)} warehouse row(s) lost that closed after the plan "
                        f"task started at {plan_ms} (they must be pending), e.g. {false_lost[0]}")
    if zombies:
        problems.append(f"{len(zombies)} zombie process(es) in the offline-airflow container: {zombies}")
    assert not problems, "\n".join(problems)
