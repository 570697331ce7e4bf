"""Topic configs (Kafka 3.x's set): validation with Kafka's messages, defaults and sources, and what they do to
data: recompression, LogAppendTime, timestamp bounds, segment jitter, compaction lags, unclean election."""

import asyncio
import time

import pytest
from broker.cluster import znodes
from broker.cluster.controller import Controller
from broker.config import BrokerConfig
from broker.log import log as log_module
from broker.log.cleaner import LogCleaner
from broker.log.log import LogConfig, PartitionLog
from broker.metadata import topic_configs as tc
from broker.metadata.topics import TopicError, TopicInfo, validate_topic_configs
from broker.protocol import compression, produce_response, records, validation
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

pytestmark = [pytest.mark.unit, pytest.mark.timeout(30)]

NOW = 1_700_000_000_000

# Every topic config Kafka 3.9 documents, with a valid non-default value.
VALID = {
    "cleanup.policy": "compact,delete", "compression.type": "zstd", "compression.gzip.level": "9",
    "compression.lz4.level": "17", "compression.zstd.level": "-5", "delete.retention.ms": "1000",
    "file.delete.delay.ms": "0", "flush.messages": "10", "flush.ms": "1000",
    "follower.replication.throttled.replicas": "0:1,1:2", "index.interval.bytes": "100",
    "leader.replication.throttled.replicas": "*", "local.retention.bytes": "-2", "local.retention.ms": "1000",
    "max.compaction.lag.ms": "600000", "max.message.bytes": "2000000", "message.downconversion.enable": "false",
    "message.format.version": "2.8-IV1", "message.timestamp.after.max.ms": "3600000",
    "message.timestamp.before.max.ms": "86400000", "message.timestamp.difference.max.ms": "1000",
    "message.timestamp.type": "LogAppendTime", "min.cleanable.dirty.ratio": "0.1", "min.compaction.lag.ms": "1000",
    "min.insync.replicas": "2", "preallocate": "true", "remote.log.copy.disable": "true",
    "remote.log.delete.on.disable": "true", "remote.storage.enable": "false", "retention.bytes": "-1",
    "retention.ms": "-1", "segment.bytes": "1048576", "segment.index.bytes": "4096", "segment.jitter.ms": "5000",
    "segment.ms": "60000", "unclean.leader.election.enable": "true",
}


def broker_config(**raw: str) -> BrokerConfig:
    return BrokerConfig.from_strings(raw)


def test_every_kafka_topic_config_is_known_and_accepted():
    assert set(VALID) == set(tc.TOPIC_CONFIGS)
    validate_topic_configs(VALID)
    defaults = tc.broker_defaults(broker_config())
    tc.log_config({**{k: v for k, (v, _) in defaults.items()}, **VALID})  # every value converts


@pytest.mark.parametrize("name, value, message", [
    ("no.such.config", "1", "Unknown topic config name: no.such.config"),
    ("retention.ms", "abc", "Invalid value abc for configuration retention.ms: Not a number of type LONG"),
    ("retention.ms", "-2", "Invalid value -2 for configuration retention.ms: Value must be at least -1"),
    ("segment.bytes", "3000000000", "Invalid value 3000000000 for configuration segment.bytes: Not a number of "
                                    "type INT"),
    ("compression.type", "brotli", "Invalid value brotli for configuration compression.type: String must be one "
                                   "of: uncompressed, zstd, lz4, snappy, gzip, producer"),
    ("message.timestamp.type", "logappendtime", "String must be one of: CreateTime, LogAppendTime"),
    ("cleanup.policy", "compact,forever", "Invalid value compact,forever for configuration cleanup.policy: "
                                          "String must be one of: compact, delete"),
    ("min.cleanable.dirty.ratio", "1.5", "Value must be no more than 1"),
    ("min.cleanable.dirty.ratio", "x", "Not a number of type DOUBLE"),
    ("unclean.leader.election.enable", "yes", "Expected value to be either true or false"),
    ("max.compaction.lag.ms", "0", "Value must be at least 1"),
    ("compression.gzip.level", "0", "Value must be between 1 and 9, or -1"),
    ("compression.lz4.level", "18", "Value must be no more than 17"),
    ("leader.replication.throttled.replicas", "0-1", "must be the literal '*'"),
    ("message.format.version", "9.9.9.9", "is not a valid version"),
    ("remote.storage.enable", "true", "Tiered Storage functionality is disabled in the broker"),
])
def test_bad_values_are_invalid_config_with_kafkas_words(name, value, message):
    with pytest.raises(TopicError) as err:
        validate_topic_configs({name: value})
    assert err.value.error == "invalid_config"
    assert message in str(err.value)


def test_min_compaction_lag_may_not_exceed_the_max():
    with pytest.raises(TopicError, match=r"conflict topic config setting min.compaction.lag.ms \(5000\) > "
                                         r"max.compaction.lag.ms \(1000\)"):
        validate_topic_configs({"min.compaction.lag.ms": "5000", "max.compaction.lag.ms": "1000"})
    with pytest.raises(TopicError):  # against the broker's default of the other one
        validate_topic_configs({"max.compaction.lag.ms": "1000"}, {"min.compaction.lag.ms": "2000"})


def test_sources_and_defaults_follow_the_broker_keys():
    plain = tc.broker_defaults(broker_config())
    assert plain["retention.ms"] == ("604800000", tc.DEFAULT_CONFIG)
    assert plain["compression.type"] == ("producer", tc.DEFAULT_CONFIG)
    assert plain["unclean.leader.election.enable"] == ("false", tc.DEFAULT_CONFIG)
    assert plain["preallocate"] == ("false", tc.DEFAULT_CONFIG)
    set_ = tc.broker_defaults(broker_config(**{"log.retention.hours": "1", "compression.type": "lz4",
                                              "log.roll.jitter.hours": "2",
                                              "log.message.timestamp.type": "LogAppendTime"}))
    assert set_["retention.ms"] == ("3600000", tc.STATIC_BROKER_CONFIG)
    assert set_["compression.type"] == ("lz4", tc.STATIC_BROKER_CONFIG)
    assert set_["segment.jitter.ms"] == ("7200000", tc.STATIC_BROKER_CONFIG)
    assert set_["message.timestamp.type"] == ("LogAppendTime", tc.STATIC_BROKER_CONFIG)
    effective = tc.effective_values({"compression.type": "gzip"}, set_)
    assert effective["compression.type"] == ("gzip", tc.DYNAMIC_TOPIC_CONFIG)
    assert [s[2] for s in tc.synonyms("compression.type", {"compression.type": "gzip"},
                                      broker_config(**{"compression.type": "lz4"}))] == \
        [tc.DYNAMIC_TOPIC_CONFIG, tc.STATIC_BROKER_CONFIG, tc.DEFAULT_CONFIG]


def values(**overrides: str) -> dict[str, str]:
    base = {k: v for k, (v, _) in tc.broker_defaults(broker_config()).items()}
    return {**base, **{k.replace("_", "."): v for k, v in overrides.items()}}


def test_log_config_carries_the_record_policy_and_kafkas_max_segment_ms():
    cfg = tc.log_config(values(**{"compression.type": "zstd", "compression.zstd.level": "7",
                                  "message.timestamp.type": "LogAppendTime"}))
    assert cfg.records == validation.RecordPolicy(compression.ZSTD, 7, True, tc.LONG_MAX, tc.LONG_MAX)
    # the deprecated difference is the fallback of before/after while they are left at their default
    cfg = tc.log_config(values(**{"message.timestamp.difference.max.ms": "1000",
                                  "message.timestamp.after.max.ms": "50"}))
    assert (cfg.records.before_max_ms, cfg.records.after_max_ms) == (1000, 50)
    assert tc.log_config(values()).records == validation.KEEP
    compact = tc.log_config(values(**{"cleanup.policy": "compact", "max.compaction.lag.ms": "5000"}))
    assert compact.roll_ms == 5000  # a compacted log rolls by max.compaction.lag.ms too
    assert tc.log_config(values(**{"max.compaction.lag.ms": "5000"})).roll_ms == 604800000


def client_batch(count=5, codec=0, ts=NOW, keys=True, idempotent=True) -> bytes:
    pid, epoch, seq = (7, 1, 3) if idempotent else (-1, -1, -1)
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=codec, is_transactional=False, producer_id=pid,
                                        producer_epoch=epoch, base_sequence=seq, batch_size=1 << 20)
    for i in range(count):
        builder.append(i, timestamp=ts + i, key=f"k{i}".encode() if keys else None, value=b"v" * 200 + bytes([i]),
                       headers=[("h", b"x")])
    return bytes(builder.build())


def read_back(data: bytes) -> tuple[DefaultRecordBatch, list]:
    batch = DefaultRecordBatch(data)
    assert batch.validate_crc()
    return batch, [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in batch]


@pytest.mark.parametrize("source", [0, 1, 2, 3, 4])
@pytest.mark.parametrize("target", [compression.NONE, compression.GZIP, compression.SNAPPY, compression.LZ4,
                                    compression.ZSTD])
def test_recompression_keeps_records_and_producer_fields(source, target):
    sent = client_batch(codec=source)
    policy = validation.RecordPolicy(codec=target)
    out = validation.conform(sent, policy, NOW, 1 << 20)
    if source == target:
        assert out is None  # kept as sent
        return
    summary = records.validate(out, 1 << 20)  # whole batches, CRC right
    header = records.read_header(out)
    assert header.compression == target and summary.records == 5 and summary.max_timestamp == NOW + 4
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (7, 1, 3)
    assert read_back(out)[1] == read_back(sent)[1]
    assert read_back(out)[0].compression_type == target


def test_log_append_time_stamps_the_batch_and_every_record_reads_it():
    sent = client_batch(codec=compression.LZ4, ts=NOW - 10**9)
    out = validation.conform(sent, validation.RecordPolicy(log_append_time=True), NOW, 1 << 20)
    header = records.read_header(out)
    assert header.attributes & validation.LOG_APPEND_TIME_FLAG and header.max_timestamp == NOW
    assert header.compression == compression.LZ4 and records.validate(out, 1 << 20).max_timestamp == NOW
    batch, recs = read_back(out)
    assert batch.timestamp_type == 1 and {r[1] for r in recs} == {NOW}
    assert [r[2:] for r in recs] == [r[2:] for r in read_back(sent)[1]]
    both = validation.conform(sent, validation.RecordPolicy(codec=compression.GZIP, log_append_time=True), NOW,
                              1 << 20)
    assert read_back(both)[0].compression_type == compression.GZIP and {r[1] for r in read_back(both)[1]} == {NOW}


def test_create_time_bounds_refuse_records_out_of_range():
    policy = validation.RecordPolicy(before_max_ms=1000, after_max_ms=100)
    bounds = policy.bounds(NOW)
    validation.check_records(client_batch(ts=NOW - 1000), 1 << 20, bounds=bounds)  # at the edge: fine
    with pytest.raises(validation.InvalidTimestamp, match=rf"Timestamp {NOW - 1001} of message with offset 0 is "
                                                          rf"out of range. The timestamp should be within "
                                                          rf"\[{NOW - 1000}, {NOW + 100}\]"):
        validation.check_records(client_batch(ts=NOW - 1001), 1 << 20, bounds=bounds)
    with pytest.raises(validation.InvalidTimestamp, match="offset 1 "):  # the second record is too far ahead
        validation.check_records(client_batch(ts=NOW + 100, codec=compression.ZSTD), 1 << 20, bounds=bounds)
    assert validation.RecordPolicy(before_max_ms=1, log_append_time=True).bounds(NOW) is None
    assert validation.KEEP.bounds(NOW) is None


def test_produce_response_carries_the_log_append_time():
    out = produce_response.encode(7, 1, [("t", [(0, 0, 42, 0, None, NOW), (1, 0, 43, 0, None)])])
    assert NOW.to_bytes(8, "big") + (0).to_bytes(8, "big") in out  # append time, then log start offset
    assert (-1).to_bytes(8, "big", signed=True) in out


def test_segment_jitter_takes_a_random_part_off_the_roll_age_once_per_segment(tmp_path, monkeypatch):
    draws = []

    def randrange(bound):
        draws.append(bound)
        return 9_000

    monkeypatch.setattr(log_module.random, "randrange", randrange)
    plog = PartitionLog(str(tmp_path / "t-0"), "t", 0, LogConfig(roll_ms=10_000, segment_jitter_ms=60_000))
    data = client_batch(1, idempotent=False)
    plog.append(data, records.validate(data, 1 << 20))
    plog.active.first_append_ms = int(time.time() * 1000) - 2_000  # 2 s old: past 10 s - 9 s of jitter
    plog.append(data, records.validate(data, 1 << 20))
    assert len(plog.segments) == 2 and draws == [10_000]  # bound: min(jitter, segment.ms)
    plog.append(data, records.validate(data, 1 << 20))
    assert len(plog.segments) == 2 and draws == [10_000, 10_000]  # a new draw for the new segment only
    calm = PartitionLog(str(tmp_path / "u-0"), "u", 0, LogConfig(roll_ms=10_000))
    calm.append(data, records.validate(data, 1 << 20))
    calm.active.first_append_ms = int(time.time() * 1000) - 2_000
    calm.append(data, records.validate(data, 1 << 20))
    assert len(calm.segments) == 1  # no jitter: 2 s is not 10 s


class _Logs:
    def __init__(self, plog):
        self.logs = {(plog.topic, plog.partition): plog}

    def dir_of(self, *_):
        return None


class _Broker:
    def __init__(self, plog, configs):
        self.log_dirs = []
        self.config = BrokerConfig.from_strings({})
        self.topics = {plog.topic: TopicInfo(plog.topic, 1, None, configs)}
        self.logs = _Logs(plog)


def compacted_log(tmp_path, timestamps):
    """A compacted log with one segment per timestamp (key k, ten updates each) and an active segment."""
    plog = PartitionLog(str(tmp_path / "c-0"), "c", 0, LogConfig(segment_bytes=10**6, cleanup_policy="compact"))
    for ts in timestamps + [NOW]:
        data = client_batch(10, ts=ts, idempotent=False)
        plog.append(data, records.validate(data, 1 << 20))
        plog.roll()
    return plog


def test_min_compaction_lag_keeps_young_segments_dirty(tmp_path):
    now = int(time.time() * 1000)
    plog = compacted_log(tmp_path, [now - 60_000, now - 50_000, now - 1_000])
    cleaner = LogCleaner(_Broker(plog, {"cleanup.policy": "compact"}))
    _, segments, _ = cleaner.cleanable(plog, now)
    assert len(segments) == 4  # every closed segment
    cleaner = LogCleaner(_Broker(plog, {"cleanup.policy": "compact", "min.compaction.lag.ms": "10000"}))
    _, segments, _ = cleaner.cleanable(plog, now)
    assert [s.max_timestamp for s in segments] == [now - 60_000 + 9, now - 50_000 + 9]  # the young one waits
    cleaner = LogCleaner(_Broker(plog, {"cleanup.policy": "compact", "min.compaction.lag.ms": "100000"}))
    assert cleaner.cleanable(plog, now)[1] == []


def test_max_compaction_lag_cleans_below_the_dirty_ratio(tmp_path):
    asyncio.run(_max_compaction_lag(tmp_path))


async def _max_compaction_lag(tmp_path):
    now = int(time.time() * 1000)
    plog = compacted_log(tmp_path, [now - 60_000, now - 50_000])
    lazy = {"cleanup.policy": "compact", "min.cleanable.dirty.ratio": "1.0"}
    # ratio 1.0 is reached by a never-cleaned log: clean it once so that some of it is clean
    cleaner = LogCleaner(_Broker(plog, {"cleanup.policy": "compact"}))
    cleaner.checkpoint = lambda: None
    assert await cleaner.run_once()
    data = client_batch(10, ts=now - 40_000, idempotent=False)
    plog.append(data, records.validate(data, 1 << 20))
    plog.roll()
    ratio, segments, first_dirty = cleaner.cleanable(plog, now)
    assert 0 < ratio < 1
    waiting = LogCleaner(_Broker(plog, lazy))
    waiting.first_dirty, waiting.checkpoint = cleaner.first_dirty, (lambda: None)
    assert not await waiting.run_once()  # below the ratio, no max lag: nothing to do
    overdue = LogCleaner(_Broker(plog, {**lazy, "max.compaction.lag.ms": "30000"}))
    overdue.first_dirty, overdue.checkpoint = cleaner.first_dirty, (lambda: None)
    assert overdue.overdue(plog, segments, first_dirty, now)
    assert await overdue.run_once()  # the dirty batch is 40 s old: past the 30 s lag
    patient = LogCleaner(_Broker(plog, {**lazy, "max.compaction.lag.ms": "45000"}))
    assert not patient.overdue(plog, segments, first_dirty, now)


class _Cfg(dict):
    pass


def test_topic_unclean_election_overrides_the_brokers():
    st = znodes.PartitionState(1, 4, (1,), 3, version=11)
    for broker_value, topic_value, elected in [(False, True, True), (True, False, False), (False, None, False),
                                               (True, None, True)]:
        c = Controller(0, zk=None, config=_Cfg({"unclean.leader.election.enable": broker_value}))
        c.epoch = 9
        new = c.decide(st, [1, 2, 0], live={0, 2}, rebalance=False, unclean=topic_value)
        assert (new.leader == 2) == elected, (broker_value, topic_value)


def test_controller_reads_the_topics_config_znode():
    asyncio.run(_controller_reads_config())


async def _controller_reads_config():
    class Zk:
        def __init__(self, data):
            self.data = data

        async def get_or_none(self, path):
            assert path == znodes.config_path("t")
            return self.data, None

    c = Controller(0, zk=Zk(znodes.encode_topic_config({"unclean.leader.election.enable": "true"})),
                   config=_Cfg({"unclean.leader.election.enable": False}))
    assert await c._unclean_allowed("t") is True
    c.zk = Zk(None)
    assert await c._unclean_allowed("t") is False


def test_incremental_append_works_on_every_list_config_only():
    from types import SimpleNamespace

    from broker.handlers.incremental_alter_configs import APPEND, SUBTRACT, apply

    def op(kind, name, value):
        return SimpleNamespace(config_operation=kind, name=name, value=value)

    out = apply({"leader.replication.throttled.replicas": "0:1"},
                [op(APPEND, "leader.replication.throttled.replicas", "1:2"), op(SUBTRACT, "cleanup.policy", "delete")])
    assert out == {"leader.replication.throttled.replicas": "0:1,1:2", "cleanup.policy": ""}
    with pytest.raises(TopicError, match="Config value append is not allowed for config key: retention.ms"):
        apply({}, [op(APPEND, "retention.ms", "1")])
