"""AuditedProducer against a real broker and schema registry: headers on every record, Avro monitoring events in
``_audit`` that account for every message, and a reconciliation of what a consumer saw."""

from __future__ import annotations

import time

import pytest
from audit import AuditedProducer
from audit.events import PRODUCER_HEADER, SEQUENCE_HEADER, TIME_HEADER
from audit.ranges import RangeSet
from audit.reconcile import reconcile
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer
from confluent_kafka.serialization import MessageField, SerializationContext
from support import read_topic

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


def test_audited_producer_accounts_for_every_message(broker, registry):
    reg = registry(broker.bootstrap)
    producer = AuditedProducer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5, "audit.window.ms": 500,
                                "audit.host": "frontend-1", "schema.registry.url": reg.url})
    for i in range(1500):
        producer.produce("views", f"v{i}".encode(), key=f"k{i}".encode(), headers=[("app", b"web")])
        if i % 300 == 299:
            time.sleep(0.3)  # the traffic spans several 500 ms windows
    assert producer.flush(30) == 0
    records = read_topic(broker.bootstrap, "views")
    assert len(records) == 1500
    sequences = []
    for m in records:
        headers = dict(m.headers())
        assert headers["app"] == b"web" and headers["logbus.audit.host"] == b"frontend-1"
        assert headers[PRODUCER_HEADER] == producer.producer_id.encode()
        assert int(headers[TIME_HEADER]) == m.timestamp()[1]
        sequences.append(int(headers[SEQUENCE_HEADER]))
    assert sequences == list(range(1500))
    deserializer = AvroDeserializer(SchemaRegistryClient({"url": reg.url}))
    events = [deserializer(m.value(), SerializationContext("_audit", MessageField.VALUE))
              for m in read_topic(broker.bootstrap, "_audit")]
    assert len(events) >= 3 and sum(e["count"] for e in events) == 1500
    assert all(e["kind"] == "PRODUCED" and e["topic"] == "views" and e["host"] == "frontend-1" for e in events)
    covered = RangeSet()
    for e in events:
        assert e["last_seq"] - e["first_seq"] + 1 == e["count"]
        covered.add(e["first_seq"], e["last_seq"])
    assert covered.as_list() == [[0, 1499]]
    # a tier that saw every record but one, and one record twice
    seen = [m for m in records if int(dict(m.headers())[SEQUENCE_HEADER]) != 700] + [records[5]]
    tier_events = []
    for e in events:
        in_window = [m for m in seen if e["window_start"] <= m.timestamp()[1] < e["window_end"]]
        rs = RangeSet()
        for m in in_window:
            rs.add(int(dict(m.headers())[SEQUENCE_HEADER]))
        tier_events.append({"kind": "TIER", "tier": "consumer", "producer_id": e["producer_id"], "topic": "views",
                            "window_start": e["window_start"], "window_end": e["window_end"],
                            "count": len(in_window), "sequences": rs.as_list(), "source": [], "emitted_at": 1})
    rows = reconcile(events + tier_events, now_ms=int(time.time() * 1000) + 10**6, grace_ms=0)
    assert sum(r.expected for r in rows) == 1500
    assert sum(r.missing for r in rows) == 1 and sum(r.duplicates for r in rows) == 1
    lost = [r for r in rows if r.missing]
    assert lost[0].status == "lost" and lost[0].missing_sequences == {producer.producer_id: [[700, 700]]}


def audit_events(bootstrap: str, registry_url: str) -> list[dict]:
    deserializer = AvroDeserializer(SchemaRegistryClient({"url": registry_url}))
    out = []
    for m in read_topic(bootstrap, "_audit"):
        try:
            out.append(deserializer(m.value(), SerializationContext("_audit", MessageField.VALUE)))
        except Exception:
            pass  # the test's own garbage records
    return out


def test_tier_counter_counts_and_a_kill_replays_into_the_same_report(broker, registry, tmp_path):
    import os
    import signal
    import subprocess
    import sys

    from support import REPO, terminate, wait_until

    reg = registry(broker.bootstrap)
    (tmp_path / "c.properties").write_text(f"bootstrap.servers={broker.bootstrap}\n")
    cmd = [sys.executable, "-m", "logbus.cli", "audit-counter", "--tier", "live", "--consumer.config",
           str(tmp_path / "c.properties"), "--whitelist", "clicks", "--schema-registry-url", reg.url,
           "--window-ms", "1000", "--emit-interval-ms", "300"]
    env = dict(os.environ, PYTHONPATH=str(REPO / "platform"))
    from confluent_kafka import Producer

    junk = Producer({"bootstrap.servers": broker.bootstrap})  # malformed audit records are skipped, never fatal
    junk.produce("_audit", b"garbage")
    junk.produce("_audit", b"\x00\x00\x00\x7f\xffnot avro")
    assert junk.flush(10) == 0
    log = open(tmp_path / "counter.log", "ab")
    counter = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        producer = AuditedProducer({"bootstrap.servers": broker.bootstrap, "audit.window.ms": 1000,
                                    "schema.registry.url": reg.url, "linger.ms": 5})
        for burst in range(4):
            for i in range(1000):
                producer.produce("clicks", f"c{burst}-{i}".encode())
            producer.poll(0)
            time.sleep(0.4)
            if burst == 1:  # a crash mid-stream: the restarted counter must neither miss nor double count
                assert producer.flush(30) == 0
                wait_until(lambda: any(e["producer_id"] == "__round__" and e["tier"] == "live"
                                       for e in audit_events(broker.bootstrap, reg.url)), 30, interval=0.3,
                           what="the counter's first complete round")
                counter.send_signal(signal.SIGKILL)
                counter.wait()
                counter = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT)
        assert producer.flush(30) == 0

        def report():
            events = [e for e in audit_events(broker.bootstrap, reg.url) if e["topic"] in ("clicks", "")]
            rows = reconcile(events, now_ms=int(time.time() * 1000) + 10**6, grace_ms=0, tiers=["live"])
            return rows if rows and all(r.status == "complete" for r in rows) else None

        rows = wait_until(report, 60, interval=1, what="a complete report for tier live")
        assert sum(r.expected for r in rows) == 4000 and sum(r.received for r in rows) == 4000
        assert sum(r.duplicates for r in rows) == 0
        # the restarted counter resumed from its last complete round (state + positions), not from scratch
        assert "tier live: recovered" in (tmp_path / "counter.log").read_text()
    finally:
        terminate(counter)
        log.close()
