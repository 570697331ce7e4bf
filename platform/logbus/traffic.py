"""``logbus demo-traffic``: a demo frontend. It publishes Avro page-view and click events (schemas registered in
the registry under ``page-views-value`` and ``clicks-value``) through the audited producer, paced at ``--rate``
events per second, until SIGTERM; then it flushes, so the audit's last windows are published too."""

from __future__ import annotations

import json
import logging
import random
import signal
import time

from logbus.retry import Backoff

log = logging.getLogger(__name__)

PAGE_VIEW = {"type": "record", "name": "PageView", "namespace": "logbus.demo", "fields": [
    {"name": "member_id", "type": "long"}, {"name": "page", "type": "string"},
    {"name": "referrer", "type": ["null", "string"], "default": None},
    {"name": "user_agent", "type": "string"}]}
CLICK = {"type": "record", "name": "Click", "namespace": "logbus.demo", "fields": [
    {"name": "member_id", "type": "long"}, {"name": "element", "type": "string"},
    {"name": "page", "type": "string"}]}
PAGES = ["/feed", "/jobs", "/jobs/view", "/in/profile", "/messaging", "/notifications", "/search"]


def run(bootstrap: str, registry_url: str, rate: float, host: str, window_ms: int, seconds: float | None = None,
        client_properties: dict | None = None) -> int:
    """``client_properties``: a client's properties file (security keys, ``schema.registry.*`` settings)."""
    from audit import AuditedProducer
    from confluent_kafka.schema_registry.avro import AvroSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(1))
    from settings import registry_client

    registry_props, client_props = registry_client.split(client_properties or {})
    registry = registry_client.client(registry_client.registry_conf(registry_props, registry_url))
    serializers = {"page-views": AvroSerializer(registry, json.dumps(PAGE_VIEW)),
                   "clicks": AvroSerializer(registry, json.dumps(CLICK))}
    producer = AuditedProducer({**client_props, **registry_props, "bootstrap.servers": bootstrap,
                                "schema.registry.url": registry_url,
                                "audit.window.ms": window_ms, "audit.host": host, "linger.ms": 20,
                                "acks": "all", "enable.idempotence": True})
    rng = random.Random()
    backoff = Backoff(0.5, 30.0)
    while not stopping:  # the schemas once, with retries: afterwards the serializers know their ids
        try:
            for topic, schema in (("page-views", PAGE_VIEW), ("clicks", CLICK)):
                serializers[topic](_sample(schema), SerializationContext(topic, MessageField.VALUE))
            producer.register_schema()
            break
        except Exception as exc:  # the registry is away or starting
            delay = backoff.next()
            log.warning("schema registry %s: %s; trying again in %.1f s", registry_url, exc, delay)
            time.sleep(delay)
    sent, start = 0, time.monotonic()
    failed = _Failures()
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
            while not stopping:
                if _produce(producer, topic, value, str(member).encode(), backoff, failed.report):
                    sent += 1
                    break
            producer.poll(0)
            delay = start + sent / rate - time.monotonic()
            if delay > 0:
                time.sleep(min(delay, 0.5))
    finally:
        producer.flush(30)
    print(f"logbus demo-traffic: {sent} events sent, {failed.count} not delivered", flush=True)
    return 0


class _Failures:
    """Events the cluster never acknowledged (the audit counts them as produced: its report shows them
    missing): counted, the first and then every thousandth logged with librdkafka's reason."""

    def __init__(self):
        self.count = 0

    def report(self, err, msg) -> None:
        if err is None:
            return
        self.count += 1
        if self.count == 1 or self.count % 1000 == 0:
            log.warning("%d event(s) not delivered; the last to %s: %s", self.count, msg.topic(), err)


def _produce(producer, topic: str, value: bytes, key: bytes, backoff: Backoff, on_delivery=None) -> bool:
    """One event; False (after a pause) when it must be tried again: the local queue is full while the
    cluster is away, or the audit event could not be serialized."""
    try:
        producer.produce(topic, value, key=key, on_delivery=on_delivery)
        backoff.reset()
        return True
    except BufferError:
        producer.poll(0.1)
        return False
    except Exception as exc:
        delay = backoff.next()
        log.warning("cannot send to %s (%s); trying again in %.1f s", topic, exc, delay)
        time.sleep(delay)
        return False


def _sample(schema: dict) -> dict:
    values = {"long": 0, "string": ""}
    return {f["name"]: values[f["type"]] if isinstance(f["type"], str) else None for f in schema["fields"]}
