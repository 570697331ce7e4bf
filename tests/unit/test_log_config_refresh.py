"""Produce reads the rules it enforces from the partition's log config (``TopicLogConfig``: the size cap, whether
records need keys, the timestamp and rewrite policy), so that config must follow the topic's configs wherever a
log outlives or precedes its topic. In-process broker (standalone), no sockets."""

import asyncio
import struct

import crc32c
import pytest

from broker.config import BrokerConfig
from broker.handlers import produce
from broker.metadata.topic_configs import log_config
from broker.protocol import produce_request as pr
from broker.protocol.validation import RecordPolicy
from broker.server import Broker

pytestmark = [pytest.mark.unit, pytest.mark.timeout(60)]


def keyless_batch() -> bytes:
    body = b"\x00\x00\x00\x01\x02v\x00"  # attributes, ts delta 0, offset delta 0, null key, value "v", no headers
    record = bytes([len(body) << 1]) + body
    after_crc = struct.pack(">hiqqqhii", 0, 0, 0, 0, -1, -1, -1, 1) + record
    return struct.pack(">qiibI", 0, 9 + len(after_crc), 0, 2, crc32c.crc32c(after_crc)) + after_crc


def produce_error(broker, topic: str) -> int:
    """The error code Produce answers for one keyless record to partition 0 of ``topic``."""
    request = pr.ProduceRequest(None, 1, 1000, (pr.TopicProduceData(topic, (
        pr.PartitionProduceData(0, keyless_batch()),)),))
    header = type("Header", (), {"api_version": 9, "correlation_id": 1, "api_key": 0})()
    answered = {}
    real = produce._answer
    produce._answer = lambda _b, _h, _r, topics: answered.setdefault("topics", topics)
    try:
        produce.handle(broker, header, request)
    finally:
        produce._answer = real
    return answered["topics"][0][1][0][1]


def test_a_log_left_by_an_interrupted_delete_takes_the_new_topics_configs(tmp_path):
    async def run():
        config = BrokerConfig.from_strings({"log.dirs": str(tmp_path), "listeners": "PLAINTEXT://127.0.0.1:0"})
        first = Broker(config)
        first.logs.load()
        await first.create_topic("t", 1, 1, {})
        first.log_for("t", 0)
        first.topics.delete("t")  # a crash here, before the logs are deleted
        first.close_logs()
        second = Broker(config)  # the restart loads t-0, which no topic owns
        second.logs.load()
        await second.create_topic("t", 1, 1, {"cleanup.policy": "compact"})
        assert second.logs.get("t", 0).config.compacted
        assert produce_error(second, "t") == 87  # INVALID_RECORD: a compacted topic's records need keys
        second.close_logs()

    asyncio.run(run())


def test_the_log_config_knows_compaction_and_the_plain_policy():
    base = {"compression.type": "producer", "compression.gzip.level": "-1", "compression.lz4.level": "9",
            "compression.zstd.level": "3", "message.timestamp.difference.max.ms": str(2**63 - 1),
            "message.timestamp.before.max.ms": str(2**63 - 1), "message.timestamp.after.max.ms": str(2**63 - 1),
            "cleanup.policy": "delete", "segment.ms": "604800000", "max.compaction.lag.ms": str(2**63 - 1),
            "segment.bytes": "1073741824", "segment.jitter.ms": "0", "index.interval.bytes": "4096",
            "retention.ms": "604800000", "retention.bytes": "-1", "flush.messages": str(2**63 - 1),
            "flush.ms": str(2**63 - 1), "max.message.bytes": "1048588", "file.delete.delay.ms": "60000",
            "message.timestamp.type": "CreateTime"}
    for policy, compacted in (("delete", False), ("compact", True), ("compact,delete", True),
                              ("delete,compact", True)):
        assert log_config({**base, "cleanup.policy": policy}).compacted is compacted
    assert log_config(base).records.plain
    assert not log_config({**base, "message.timestamp.type": "LogAppendTime"}).records.plain
    assert not log_config({**base, "message.timestamp.after.max.ms": "1000"}).records.plain
    assert not log_config({**base, "compression.type": "zstd"}).records.plain
    assert RecordPolicy().plain and not RecordPolicy(before_max_ms=5).plain
