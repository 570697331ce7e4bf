"""A producer process of the whole-pipeline benchmark (``bench/pipeline_benchmark.py --worker``): an
``AuditedProducer`` paced to the run's schedule of offered rates."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

from benchkit.pipeline_stages import TOPIC


def worker(spec: dict) -> int:
    """One producer process: ready (schema registered, connected) -> status file; waits for the schedule file;
    sends to it; SIGTERM or the schedule's end: flush (the last windows' monitoring events) and exit."""
    import random

    from audit import AuditedProducer
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext
    from logbus.traffic import PAGE_VIEW, PAGES

    stopping: list[int] = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(1))
    status_path = Path(spec["status"])

    def status(**fields) -> None:
        tmp = status_path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"t": time.time(), "cpu": sum(os.times()[:2]), **fields}))
        os.replace(tmp, status_path)

    registry = SchemaRegistryClient({"url": spec["registry"]})
    serializer = AvroSerializer(registry, json.dumps(PAGE_VIEW))
    rng = random.Random(spec["index"])
    values = []
    for _ in range(512):
        member = rng.randrange(1_000_000)
        event = {"member_id": member, "page": rng.choice(PAGES),
                 "referrer": rng.choice([None, "/feed", "https://example.com"]),
                 "user_agent": "Mozilla/5.0 (logbus pipeline benchmark)"}
        values.append((serializer(event, SerializationContext(TOPIC, MessageField.VALUE)), str(member).encode()))
    producer = AuditedProducer({"bootstrap.servers": spec["bootstrap"], "schema.registry.url": spec["registry"],
                                "audit.window.ms": spec["window_ms"], "audit.host": f"bench-producer{spec['index']}",
                                "linger.ms": 20, "acks": "all", "enable.idempotence": True,
                                "queue.buffering.max.messages": 500000})
    producer.register_schema()
    producer.list_topics(TOPIC, timeout=30)
    status(state="ready", sent=0, skipped=0, buffer_full=0, queued=0)
    schedule_path = Path(spec["schedule"])
    while not schedule_path.exists() and not stopping:
        time.sleep(0.05)
    steps = json.loads(schedule_path.read_text())["steps"] if not stopping else []
    share = spec["share"]

    def due(now: float) -> float:  # records this producer should have sent by ``now``
        return sum(share * s["rate"] * max(0.0, min(now, s["end"]) - s["start"]) for s in steps)

    end = steps[-1]["end"] if steps else 0
    sent = skipped = buffer_full = 0
    last_status = 0.0
    n_values = len(values)
    try:
        while not stopping:
            now = time.time()
            if now >= end:
                break
            target = due(now)
            behind = target - sent - skipped
            rate_now = share * next((s["rate"] for s in steps if s["start"] <= now < s["end"]), 0)
            if behind > rate_now + 1:  # more than 1 s behind the schedule: what cannot be caught up is not sent
                skipped += int(behind - rate_now)
                behind = target - sent - skipped
            burst = int(min(behind, 5000))
            for _ in range(burst):
                value, key = values[(sent + skipped) % n_values]
                try:
                    producer.produce(TOPIC, value, key=key)
                except BufferError:
                    buffer_full += 1
                    producer.poll(0.01)
                    break
                sent += 1
            producer.poll(0)
            if now - last_status >= 0.5:
                status(state="running", sent=sent, skipped=skipped, buffer_full=buffer_full, queued=len(producer))
                last_status = now
            if burst < 50:
                time.sleep(0.002)
    finally:
        status(state="flushing", sent=sent, skipped=skipped, buffer_full=buffer_full, queued=len(producer))
        left = producer.flush(120)
        status(state="done", sent=sent, skipped=skipped, buffer_full=buffer_full, queued=left)
    return 0
