"""``logbus demo-traffic``: a demo frontend. It publishes Avro page-view and click events (schemas registered in
the registry under ``page-views-value`` and ``clicks-value``) through the audited producer, paced at ``--rate``
events per second, until SIGTERM; then it flushes, so the audit's last windows are published too."""

from __future__ import annotations

import json
import random
import signal
import time

PAGE_VIEW = {"type": "record", "name": "PageView", "namespace": "logbus.demo", "fields": [
    {"name": "member_id", "type": "long"}, {"name": "page", "type": "string"},
    {"name": "referrer", "type": ["null", "string"], "default": None},
    {"name": "user_agent", "type": "string"}]}
CLICK = {"type": "record", "name": "Click", "namespace": "logbus.demo", "fields": [
    {"name": "member_id", "type": "long"}, {"name": "element", "type": "string"},
    {"name": "page", "type": "string"}]}
PAGES = ["/feed", "/jobs", "/jobs/view", "/in/profile", "/messaging", "/notifications", "/search"]


def run(bootstrap: str, registry_url: str, rate: float, host: str, window_ms: int, seconds: float | None = None) -> int:
    from audit import AuditedProducer
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(1))
    registry = SchemaRegistryClient({"url": registry_url})
    serializers = {"page-views": AvroSerializer(registry, json.dumps(PAGE_VIEW)),
                   "clicks": AvroSerializer(registry, json.dumps(CLICK))}
    producer = AuditedProducer({"bootstrap.servers": bootstrap, "schema.registry.url": registry_url,
                                "audit.window.ms": window_ms, "audit.host": host, "linger.ms": 20,
                                "acks": "all", "enable.idempotence": True})
    rng = random.Random()
    sent, start = 0, time.monotonic()
    try:
        while not stopping and (seconds is None or time.monotonic() - start < seconds):
            member = rng.randrange(1_000_000)
            page = rng.choice(PAGES)
            if rng.random() < 0.7:
                topic, event = "page-views", {"member_id": member, "page": page,
                                              "referrer": rng.choice([None, "/feed", "https://example.com"]),
                                              "user_agent": "Mozilla/5.0 (logbus demo)"}
            else:
                topic, event = "clicks", {"member_id": member, "element": rng.choice(["apply", "like", "share"]),
                                          "page": page}
            value = serializers[topic](event, SerializationContext(topic, MessageField.VALUE))
            producer.produce(topic, value, key=str(member).encode())
            sent += 1
            producer.poll(0)
            delay = start + sent / rate - time.monotonic()
            if delay > 0:
                time.sleep(min(delay, 0.5))
    finally:
        producer.flush(30)
    print(f"logbus demo-traffic: {sent} events sent", flush=True)
    return 0
