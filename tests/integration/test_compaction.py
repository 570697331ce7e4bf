"""Log compaction against a real broker process with confluent-kafka: the latest value per key survives at its
original offset, tombstones delete keys, compressed batches are cleaned, keyless records are refused, configs are
altered with IncrementalAlterConfigs."""

from __future__ import annotations

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourceType,
)
from support import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]
KEYS, ROUNDS, DELETED, FILLER = 10_000, 10, 1_000, 6_000


def read_all(bootstrap: str, topic: str) -> list[tuple[int, bytes, bytes | None]]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "reader", "enable.auto.commit": False})
    end = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[1]
    consumer.assign([TopicPartition(topic, 0, 0)])
    out = []
    last = -1
    while last < end - 1:
        msgs = consumer.consume(5000, timeout=5)
        if not msgs:
            break
        for m in msgs:
            assert not m.error(), m.error()
            out.append((m.offset(), m.key(), m.value()))
            last = m.offset()
    consumer.close()
    return out


def test_compaction_keeps_the_latest_value_per_key_at_its_offset(fresh_broker):
    b = fresh_broker(log_cleaner_backoff_ms=300).start()
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    admin.create_topics([NewTopic("table", 1, 1, config={
        "cleanup.policy": "compact", "segment.bytes": "65536", "min.cleanable.dirty.ratio": "0.01",
        "delete.retention.ms": "0"})])["table"].result(10)
    latest_offset: dict[bytes, int] = {}

    def delivered(err, msg):
        assert err is None, err
        latest_offset[msg.key()] = msg.offset()

    for compression in ("none", "lz4"):  # half the rounds in compressed batches
        producer = Producer({"bootstrap.servers": b.bootstrap, "compression.type": compression, "linger.ms": 5})
        for r in range(ROUNDS // 2):
            rnd = r if compression == "none" else r + ROUNDS // 2
            for i in range(KEYS):
                producer.produce("table", f"{rnd}:{i}".encode(), key=f"k{i}".encode(), on_delivery=delivered)
            producer.poll(0)
        assert producer.flush(30) == 0
    producer = Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 5})
    for i in range(DELETED):  # tombstones
        producer.produce("table", None, key=f"k{i}".encode(), on_delivery=delivered)
    assert producer.flush(30) == 0
    for j in range(FILLER):  # small batches that roll segments: the records above leave the active segment
        producer.produce("table", b"f", key=f"filler{j}".encode())
        if j % 500 == 499:
            assert producer.flush(30) == 0
    failed = []
    producer.produce("table", b"no key", on_delivery=lambda err, msg: failed.append(err))
    producer.flush(10)
    assert failed and failed[0].name() == "INVALID_RECORD"

    def compacted():
        view = [(o, k, v) for o, k, v in read_all(b.bootstrap, "table") if not k.startswith(b"filler")]
        return view if len(view) == KEYS - DELETED else None

    view = wait_until(compacted, 90, interval=1, what="the log compacted")
    assert [o for o, _, _ in view] == sorted(o for o, _, _ in view)
    by_key = {k: (o, v) for o, k, v in view}
    assert len(by_key) == KEYS - DELETED  # one record per live key, no deleted key
    for i in range(DELETED, KEYS):
        offset, value = by_key[f"k{i}".encode()]
        assert value == f"{ROUNDS - 1}:{i}".encode()
        assert offset == latest_offset[f"k{i}".encode()]  # offsets unchanged
    assert "cleaned table-0" in b.log_text()

    resource = ConfigResource(ResourceType.TOPIC, "table", incremental_configs=[
        ConfigEntry("min.cleanable.dirty.ratio", "0.9", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("cleanup.policy", "delete", incremental_operation=AlterConfigOpType.APPEND)])
    admin.incremental_alter_configs([resource])[resource].result(10)
    described = admin.describe_configs([ConfigResource(ResourceType.TOPIC, "table")])
    configs = list(described.values())[0].result(10)
    assert configs["min.cleanable.dirty.ratio"].value == "0.9"
    assert configs["cleanup.policy"].value == "compact,delete"
    bad = ConfigResource(ResourceType.TOPIC, "table", incremental_configs=[
        ConfigEntry("min.cleanable.dirty.ratio", "7", incremental_operation=AlterConfigOpType.SET)])
    with pytest.raises(KafkaException) as err:
        admin.incremental_alter_configs([bad])[bad].result(10)
    assert err.value.args[0].name() == "INVALID_CONFIG"

    # Produce reads "records need a key" from the partition's log config: altering cleanup.policy changes it
    def keyless_error():
        outcome = []
        producer.produce("table", b"no key", on_delivery=lambda err, msg: outcome.append(err))
        producer.flush(10)
        return outcome[0].name() if outcome and outcome[0] is not None else None

    for policy, expected in (("delete", None), ("compact", "INVALID_RECORD")):
        change = ConfigResource(ResourceType.TOPIC, "table", incremental_configs=[
            ConfigEntry("cleanup.policy", policy, incremental_operation=AlterConfigOpType.SET)])
        admin.incremental_alter_configs([change])[change].result(10)
        assert keyless_error() == expected, policy


def test_an_idempotent_producers_last_batch_stays_as_an_empty_batch_clients_read_past(fresh_broker):
    """Producer A's only record is superseded by producer B's value of the same key: the cleaner keeps A's batch
    empty (Kafka's RETAIN_EMPTY, for A's epoch and sequence), and confluent-kafka and kafka-python consumers read
    the compacted log from offset 0 past it, seeing only live values."""
    from kafka import KafkaConsumer

    b = fresh_broker(log_cleaner_backoff_ms=300).start()
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    admin.create_topics([NewTopic("keep", 1, 1, config={
        "cleanup.policy": "compact", "segment.bytes": "4096", "min.cleanable.dirty.ratio": "0.01",
        "delete.retention.ms": "0"})])["keep"].result(10)
    first = Producer({"bootstrap.servers": b.bootstrap, "enable.idempotence": True})
    first.produce("keep", b"from A", key=b"k")
    assert first.flush(10) == 0
    second = Producer({"bootstrap.servers": b.bootstrap, "enable.idempotence": True, "linger.ms": 5})
    second.produce("keep", b"from B", key=b"k")
    assert second.flush(10) == 0
    for j in range(400):  # small batches that roll segments: A's and B's batches leave the active segment
        second.produce("keep", b"f" * 40, key=f"filler{j}".encode())
        if j % 40 == 39:
            assert second.flush(30) == 0
    def cleaned():
        view = read_all(b.bootstrap, "keep")
        return view if [(k, v) for _, k, v in view if k == b"k"] == [(b"k", b"from B")] else None

    view = wait_until(cleaned, 60, interval=1, what="A's value cleaned away")
    assert view[0][0] > 0  # nothing is served at offset 0: A's batch holds no record
    import struct
    head = (b.log_dir / "keep-0" / f"{0:020d}.log").read_bytes()[:61]
    base, producer_id, count = struct.unpack(">q", head[:8])[0], *struct.unpack(">q", head[43:51]), \
        struct.unpack(">i", head[57:61])[0]
    assert (base, count) == (0, 0) and producer_id >= 0  # A's batch is still there, empty
    consumer = KafkaConsumer("keep", bootstrap_servers=b.bootstrap, auto_offset_reset="earliest",
                             consumer_timeout_ms=10000)
    seen = [(m.offset, m.key) for m in consumer]
    consumer.close()
    assert [o for o, _ in seen] == [o for o, _, _ in view]
