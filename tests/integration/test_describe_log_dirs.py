"""DescribeLogDirs (key 35), judged by kafka-python's ``describe_log_dirs``: every log directory of the broker, the
partitions in each with their size on disk, a filter by topic and partition, the directory's total and usable
bytes (v4)."""

from __future__ import annotations

from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaAdminClient

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


def test_describe_log_dirs_with_kafka_python(fresh_broker, tmp_path):
    dirs = [tmp_path / "d1", tmp_path / "d2"]
    b = fresh_broker(**{"log.dirs": ",".join(str(d) for d in dirs)}).start()
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    admin.create_topics([NewTopic("ld", 4, 1)])["ld"].result(30)
    producer = Producer({"bootstrap.servers": b.bootstrap})
    for i in range(400):
        producer.produce("ld", b"v" * 100, partition=i % 4)
    assert producer.flush(30) == 0

    kadmin = KafkaAdminClient(bootstrap_servers=b.bootstrap, request_timeout_ms=30000)
    try:
        [answer] = kadmin.describe_log_dirs()
        filtered = kadmin.describe_log_dirs({"ld": [1]})
    finally:
        kadmin.close()
    by_dir = {d["log_dir"]: d for d in answer["log_dirs"]}
    assert set(by_dir) == {str(d) for d in dirs}
    seen = {}
    for log_dir, d in by_dir.items():
        assert d["error_code"] == 0 and d["total_bytes"] > 0 and 0 <= d["usable_bytes"] <= d["total_bytes"]
        for topic in d["topics"]:
            for p in topic["partitions"]:
                seen[(topic["name"], p["partition_index"])] = (log_dir, p["partition_size"], p["offset_lag"])
    assert sorted(seen) == [("ld", p) for p in range(4)]
    for (topic, p), (log_dir, size, lag) in seen.items():  # the size is the segments' bytes on disk
        on_disk = sum(f.stat().st_size for f in Path(log_dir, f"{topic}-{p}").glob("*.log"))
        assert size == on_disk and size > 100 * 100 * 0.9 and lag == 0
    assert {d["log_dir"] for d in by_dir.values() if d["topics"]} == {str(d) for d in dirs}  # spread over both
    only = [(t["name"], p["partition_index"]) for d in filtered[0]["log_dirs"] for t in d["topics"]
            for p in t["partitions"]]
    assert only == [("ld", 1)]
