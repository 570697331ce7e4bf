"""The load's raw fetch path (spark_jobs.fetch + columnar) against a real broker process, checked record for
record against the librdkafka path (source.read_range) on the same ranges: a transactional topic with an
aborted transaction between committed ones and non-transactional batches in gzip, lz4 and zstd; a compacted
topic with offset gaps; and ranges that cannot be read completely fail."""

from __future__ import annotations

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from support import wait_until

from spark_jobs import columnar, fetch
from spark_jobs.source import consumer_config, read_range

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]


def rows_raw(conf, topic, start, until):
    schema = columnar.raw_schema()
    out = []
    for r in fetch.records(conf, topic, 0, start, until, chunk_records=7):  # small chunks: many chunk borders
        out.extend(columnar.raw_batch(r, topic, 0, schema).to_pylist())
    return out


def rows_librdkafka(conf, topic, start, until):
    return [row for b in read_range(conf, topic, 0, start, until) for row in b.to_pylist()]


def high_watermark(bootstrap, topic):
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "hw"})
    try:
        return c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[1]
    finally:
        c.close()


def test_transactions_and_compression_read_as_librdkafka_reads_them(fresh_broker):
    b = fresh_broker(num_partitions=1).start()
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    admin.create_topics([NewTopic("tx", 1, 1)])["tx"].result(10)
    txn = Producer({"bootstrap.servers": b.bootstrap, "transactional.id": "load-fetch", "compression.type": "gzip",
                    "linger.ms": 5})
    txn.init_transactions(30)
    txn.begin_transaction()
    for i in range(50):
        txn.produce("tx", f"c1-{i}".encode(), key=b"k%d" % i, headers=[("logbus.audit.seq", str(i).encode())])
    txn.commit_transaction(30)
    txn.begin_transaction()
    for i in range(30):
        txn.produce("tx", f"aborted-{i}".encode(), key=b"a")
    txn.flush(10)
    txn.abort_transaction(30)
    for codec in ("lz4", "zstd", "none"):
        plain = Producer({"bootstrap.servers": b.bootstrap, "compression.type": codec, "linger.ms": 5})
        for i in range(20):
            plain.produce("tx", f"{codec}-{i}".encode(), key=None if i % 2 else b"p",
                          headers=[("h", None), ("h2", b"\x00\xff")] if i % 3 == 0 else None)
        assert plain.flush(10) == 0
    txn.begin_transaction()
    for i in range(40):
        txn.produce("tx", f"c2-{i}".encode(), key=b"k")
    txn.commit_transaction(30)
    end = high_watermark(b.bootstrap, "tx")
    conf = consumer_config({"bootstrap.servers": b.bootstrap})
    got = rows_raw(conf, "tx", 0, end)
    values = [r["value"].decode() for r in got]
    assert not [v for v in values if v.startswith("aborted")]
    assert len(values) == 50 + 60 + 40 and values[:50] == [f"c1-{i}" for i in range(50)]
    assert got == rows_librdkafka(conf, "tx", 0, end)
    # ranges that start or end inside batches, transactions and markers
    for start, until in ((3, end - 2), (49, 52), (55, 120), (81, end)):
        assert rows_raw(conf, "tx", start, until) == rows_librdkafka(conf, "tx", start, until), (start, until)
    with pytest.raises(fetch.FetchError, match="log ends"):
        rows_raw(conf, "tx", 0, end + 5)


def test_compacted_gaps_read_as_librdkafka_reads_them(fresh_broker):
    b = fresh_broker(log_cleaner_backoff_ms=300).start()
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    admin.create_topics([NewTopic("table", 1, 1, config={
        "cleanup.policy": "compact", "segment.bytes": "16384", "min.cleanable.dirty.ratio": "0.01",
        "delete.retention.ms": "0"})])["table"].result(10)
    producer = Producer({"bootstrap.servers": b.bootstrap, "compression.type": "lz4", "linger.ms": 5})
    for j in range(2000):  # every other record overwrites one hot key: compaction leaves gaps throughout
        producer.produce("table", f"{j}:".encode() + b"x" * 50, key=f"u{j}".encode() if j % 2 else b"hot")
        if j % 100 == 99:
            producer.flush(10)
    end = high_watermark(b.bootstrap, "table")
    conf = consumer_config({"bootstrap.servers": b.bootstrap})
    wait_until(lambda: len(rows_librdkafka(conf, "table", 0, end)) < end, timeout=60, what="compaction")
    got = rows_raw(conf, "table", 0, end)
    offsets = [r["offset"] for r in got]
    assert len(offsets) < end and any(b - a > 1 for a, b in zip(offsets, offsets[1:]))  # gaps
    assert got == rows_librdkafka(conf, "table", 0, end)
    assert rows_raw(conf, "table", 17, end - 40) == rows_librdkafka(conf, "table", 17, end - 40)
