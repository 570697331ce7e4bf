"""Checks shared by the whole-topology tests (``tests/e2e``: ``logbus up``; ``tests/compose``: docker-compose): small
audit windows, waiting for the live and offline tiers to be complete, triggering the load DAG through Airflow's REST
API, and the report at 100% for every closed window at every tier."""

from __future__ import annotations

import json
import random
import time

import requests
from support import free_port, wait_until

WINDOW_MS, GRACE_MS = 4000, 4000
# a topology's settings for a bounded test: 4 s windows, the load DAG only when a test triggers it, and 20 demo
# events a second per frontend (dozens a window). A whole-topology test runs beside the rest of the suite on two
# cores, and an idle topology's CPU is mostly its brokers answering the requests that each produce sets off (the
# followers' and consumers' fetches): at 50 a second the default topology took one core of two doing nothing else.
SMALL_WINDOWS = {"audit_window_ms": WINDOW_MS, "audit_grace_ms": GRACE_MS, "audit_emit_interval_ms": 1000,
                 "load_schedule": "none", "demo": {"rate": 20}}


def airflow_token(airflow: str, password: str) -> str:
    """A bearer token for Airflow's REST API, logged in as admin (a slow or restarting API server: tried again)."""
    def token():
        try:
            r = requests.post(f"{airflow}/auth/token", json={"username": "admin", "password": password}, timeout=60)
        except (requests.ConnectionError, requests.Timeout):
            return None
        assert r.status_code in (200, 201), r.text
        return r.json()["access_token"]

    return wait_until(token, 300, interval=2, what="a token from Airflow's /auth/token")


def _polled(get):
    """A polling predicate that counts a connection error or a timeout as "not yet" (a busy machine can make a
    service miss a request's timeout); a service that stays down fails the wait's own timeout."""
    def predicate():
        try:
            return get()
        except (requests.ConnectionError, requests.Timeout):
            return False
    return predicate


def short_rows(rows: list[dict], limit: int = 5) -> str:
    """The rows short of 100% (figures and missing sequences), for a wait's failure message."""
    keys = ("topic", "window_start", "window_end", "tier", "expected", "received", "missing", "status",
            "missing_sequences")
    short = [{k: r.get(k) for k in keys} for r in rows if r.get("completeness") != 100.0]
    return f"{len(short)} row(s) short of 100%: {json.dumps(short[:limit])}" if short else "no row short of 100%"


def wait_recovered(audit: str, since_ms: int, timeout: float = 240, http=requests,
                   clusters: dict[str, str] | None = None) -> None:
    """Until the audit service shows, for windows closed since ``since_ms`` (at least two), 100% at both
    cluster tiers. ``http``: a requests.Session with credentials and a CA for a secure topology. On a timeout the
    message names the rows last seen short of 100% and, with ``clusters`` (tier -> PLAINTEXT bootstrap), where
    their missing records are in that tier's cluster (:func:`locate_missing`)."""
    last: list[dict] = []

    def recovered():
        now = int(time.time() * 1000)
        rows = [r for r in http.get(f"{audit}/api/report", params={"from": since_ms}, timeout=30).json()
                if r["window_start"] >= since_ms and r["window_end"] + GRACE_MS < now]
        last[:] = rows
        return (len({r["window_start"] for r in rows}) >= 2 and {r["tier"] for r in rows} == {"live", "offline"}
                and all(r["completeness"] == 100.0 for r in rows))

    try:
        wait_until(_polled(recovered), timeout, interval=2, what="windows complete at the live and offline tiers")
    except TimeoutError as exc:
        where = [line for tier, bootstrap in sorted((clusters or {}).items())
                 for line in locate_missing(bootstrap, [r for r in last if r["tier"] == tier])[:10]]
        raise TimeoutError(f"{exc} (since {since_ms}; {len({r['window_start'] for r in last})} window(s) closed; "
                           f"{short_rows(last)}; {where})") from None


def trigger_dag(airflow: str, token: str) -> str:
    """Trigger a logbus_load run through Airflow's REST API; returns its run id."""
    r = requests.post(f"{airflow}/api/v2/dags/logbus_load/dagRuns", json={"logical_date": None},
                      headers={"Authorization": f"Bearer {token}"}, timeout=60)
    assert r.status_code == 200, r.text
    return r.json()["dag_run_id"]


def dag_run_state(airflow: str, token: str, run_id: str) -> str:
    return requests.get(f"{airflow}/api/v2/dags/logbus_load/dagRuns/{run_id}",
                        headers={"Authorization": f"Bearer {token}"}, timeout=30).json()["state"]


def fresh_loopback(topo: dict) -> int:
    """Move a copy of a topology onto loopback networks of its own, 127.N.1 (live) and 127.N.2 (offline), with
    free ports; returns N."""
    net = random.randrange(60, 250)
    for dc, octet in (("live", 1), ("offline", 2)):
        topo["datacenters"][dc]["network"] = f"127.{net}.{octet}"
    topo["ports"] = {kind: free_port(f"127.{net}.1.1") for kind in ("zookeeper", "broker", "registry", "audit",
                                                                    "airflow", "metrics", "prometheus", "alertmanager",
                                                                    "spark_master", "spark_master_webui",
                                                                    "spark_worker_webui", "postgres")}
    return net


def run_dag(airflow: str, token: str, timeout: float = 400) -> int:
    """Trigger logbus_load, wait for success; returns the trigger time (ms): windows closed before it must be
    complete in its report."""
    triggered = int(time.time() * 1000)
    run_id = trigger_dag(airflow, token)

    def finished():
        state = dag_run_state(airflow, token, run_id)
        assert state != "failed", "the logbus_load run failed"
        return state == "success"

    wait_until(_polled(finished), timeout, interval=2, what="the logbus_load run")
    return triggered


def check_complete(report: dict, audit: str, airflow: str, token: str, until_ms: int, http=requests) -> list[dict]:
    """Every window closed (end + grace) before ``until_ms``: 100% at every tier, in the loads' report (``report``:
    the reconcile task's ``_audit/report.json`` under the warehouse), the audit service (``http``: with its
    login, for a secure topology) and the Airflow page."""
    closed = [r for r in report["rows"] if r["window_end"] + GRACE_MS < until_ms - 2000]
    assert {r["tier"] for r in closed} == {"live", "offline", "warehouse"}, report["rows"][:5]
    bad = [r for r in closed if r["missing"] or r["completeness"] != 100.0]
    assert not bad, bad[:5]
    service_rows = http.get(f"{audit}/api/report", params={"to": until_ms - 2000 - GRACE_MS}, timeout=30).json()
    assert service_rows and all(r["completeness"] == 100.0 for r in service_rows
                                if r["window_end"] + GRACE_MS < until_ms - 2000)
    page = requests.get(f"{airflow}/logbus-audit/", headers={"Authorization": f"Bearer {token}"}, timeout=60)
    assert page.status_code == 200 and "<th colspan=6>warehouse</th>" in page.text
    assert http.get(f"{audit}/", timeout=30).status_code == 200
    return closed


def check_prometheus(url: str, jobs: set[str], timeout: float = 60) -> dict[str, float]:
    """The topology's Prometheus scrapes every target of ``jobs`` (all up) and sees traffic: records in on both
    datacenters' brokers, records through the mirror, audit completeness, one registry leader. Returns those
    sums."""
    http = requests.Session()
    http.trust_env = False  # loopback

    def query(expr: str) -> list:
        return http.get(f"{url}/api/v1/query", params={"query": expr}, timeout=10).json()["data"]["result"]

    def targets() -> dict[str, list[str]]:
        active = http.get(f"{url}/api/v1/targets", timeout=10).json()["data"]["activeTargets"]
        out: dict[str, list[str]] = {}
        for t in active:
            out.setdefault(t["labels"]["job"], []).append(t["health"])
        return out

    wait_until(lambda: set(targets()) >= jobs and all(h == ["up"] * len(h) for h in targets().values()), timeout,
               interval=1, what=f"Prometheus scraping every target up: {targets()}")
    sums: dict[str, float] = {}

    def traffic() -> bool:
        for dc in ("live", "offline"):
            rows = query(f'sum(kafka_server_brokertopicmetrics_messagesin_total{{datacenter="{dc}"}})')
            sums[f"messages_in_{dc}"] = float(rows[0]["value"][1]) if rows else 0.0
        rows = query("sum(logbus_mirror_records_total)")
        sums["mirrored"] = float(rows[0]["value"][1]) if rows else 0.0
        rows = query("count(logbus_audit_closed_window_completeness_percent)")
        sums["audited_series"] = float(rows[0]["value"][1]) if rows else 0.0
        rows = query("sum(schema_registry_master_slave_role)")  # the live registries elected one leader
        sums["registry_leaders"] = float(rows[0]["value"][1]) if rows else 0.0
        return all(v > 0 for v in sums.values())

    wait_until(traffic, timeout, interval=2, what=f"traffic seen through Prometheus: {sums}")
    assert sums["registry_leaders"] == 1, sums
    # and it sends its alerts to the topology's Alertmanager
    managers = http.get(f"{url}/api/v1/alertmanagers", timeout=10).json()["data"]["activeAlertmanagers"]
    assert [m["url"].split("/")[2].split(":")[1] for m in managers] and len(managers) == 1, managers
    return sums


def locate_missing(bootstrap: str, rows: list[dict], timeout: float = 60) -> list[str]:
    """For the rows short of 100%: where each missing (producer, sequence) is in the cluster at ``bootstrap``, read
    from the start of the row's topic: "at partition/offset" (in the log: a count missed it) or "not in the log"
    (the cluster never had it, or lost it). A failure's clue, so that a short window says which of the two it was."""
    from audit.events import PRODUCER_HEADER, SEQUENCE_HEADER
    from confluent_kafka import Consumer, TopicPartition

    wanted: dict[str, set[tuple[str, int]]] = {}
    for r in rows:
        for producer, ranges in (r.get("missing_sequences") or {}).items():
            for first, last in ranges:
                wanted.setdefault(r["topic"], set()).update((producer, s) for s in range(first, min(last, first + 20) + 1))
    found: dict[tuple[str, str, int], str] = {}
    for topic, keys in wanted.items():
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "logbus-test-locate",
                             "enable.auto.commit": False, "enable.partition.eof": True})
        try:
            parts = list(consumer.list_topics(topic, timeout=30).topics[topic].partitions)
            consumer.assign([TopicPartition(topic, p, 0) for p in parts])
            done: set[int] = set()
            deadline = time.monotonic() + timeout
            while len(done) < len(parts) and time.monotonic() < deadline:
                m = consumer.poll(1)
                if m is None:
                    continue
                if m.error():
                    if m.error().code() == m.error()._PARTITION_EOF:
                        done.add(m.partition())
                    continue
                headers = dict(m.headers() or [])
                producer = headers.get(PRODUCER_HEADER, b"").decode(errors="replace")
                seq = headers.get(SEQUENCE_HEADER)
                key = (producer, int(seq) if seq and seq.isdigit() else -1)
                if key in keys:
                    found[(topic, *key)] = f"at {m.partition()}/{m.offset()}"
        except Exception as exc:  # noqa: BLE001 - a clue only
            return [f"{topic}: not read: {exc}"]
        finally:
            consumer.close()
    return [f"{topic} {producer} seq {seq}: {found.get((topic, producer, seq), 'not in the log')}"
            for topic, keys in sorted(wanted.items()) for producer, seq in sorted(keys)]


def tier_snapshots(bootstrap: str, registry: str, rows: list[dict], timeout: float = 60) -> list[str]:
    """For the rows short of 100% whose tier is a cluster's own: every snapshot of that tier for the row's (topic,
    window) in the cluster's ``_audit`` ("partition/offset emitted_at producer count"), the tier's last round
    markers, and each partition's watermarks as read now. A failure's clue: it tells a count that was never
    published (no snapshot reaches the row's figure) from a report that read ``_audit`` short (one does)."""
    from audit.collector import AuditDecoder, Malformed, read_to_end
    from audit.events import AUDIT_TOPIC
    from audit.reconcile import ROUND
    from confluent_kafka import Consumer, TopicPartition

    wanted = {(r["tier"], r["topic"], r["window_start"]) for r in rows if r.get("completeness") != 100.0}
    if not wanted:
        return []
    tiers = {t for t, _, _ in wanted}
    lines: list[str] = []
    try:
        decoder, rounds = AuditDecoder(registry), []
        for m in read_to_end(bootstrap, AUDIT_TOPIC, "logbus-test-snapshots", timeout):
            try:
                e = decoder.decode(m.value())
            except Malformed:
                continue
            if e["kind"] != "TIER" or e["tier"] not in tiers:
                continue
            if e["producer_id"] == ROUND:
                rounds.append(f"round {m.partition()}/{m.offset()} at {e['emitted_at']}")
            elif (e["tier"], e["topic"], e["window_start"]) in wanted:
                lines.append(f"{e['tier']} {e['topic']} {e['window_start']}: {m.partition()}/{m.offset()} at "
                             f"{e['emitted_at']} {e['producer_id']} count {e['count']}")
        lines += rounds[-3:]
        c = Consumer({"bootstrap.servers": bootstrap, "group.id": "logbus-test-snapshots"})
        try:
            for p in c.list_topics(AUDIT_TOPIC, timeout=30).topics[AUDIT_TOPIC].partitions:
                lines.append(f"{AUDIT_TOPIC}[{p}] watermarks {c.get_watermark_offsets(TopicPartition(AUDIT_TOPIC, p), 10)}")
        finally:
            c.close()
    except Exception as exc:  # noqa: BLE001 - a clue only
        lines.append(f"{AUDIT_TOPIC}: not read: {exc}")
    return lines[-60:]
