"""Topic configs with outside clients, against a standalone broker and three brokers on a real ZooKeeper: every
Kafka 3.x topic config accepted by CreateTopics and described with its source, AlterConfigs (API 33) with
confluent-kafka and kafka-python, and the configs that change data: ``compression.type`` (batches recompressed
at the leader, read back from the segment file), ``message.timestamp.type=LogAppendTime`` (stamped by the
leader, kept by followers byte for byte), the timestamp bounds (INVALID_TIMESTAMP, nothing written) and the
per-topic ``unclean.leader.election.enable``."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import (
    TIMESTAMP_CREATE_TIME,
    TIMESTAMP_LOG_APPEND_TIME,
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, ConfigResource, ConfigSource, NewTopic, ResourceType
from kafka import KafkaConsumer, KafkaProducer
from kafka import TopicPartition as KpTopicPartition
from kafka.admin import ConfigResource as KpConfigResource
from kafka.admin import ConfigResourceType, KafkaAdminClient
from support import BrokerProcess, Cluster, wait_until

from broker.protocol import compression, records

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120),
              pytest.mark.filterwarnings("ignore:alter_configs has been deprecated:DeprecationWarning")]

LOG_APPEND_TIME_FLAG = 0x08


@pytest.fixture(scope="module")
def standalone(tmp_path_factory):
    proc = BrokerProcess(tmp_path_factory.mktemp("standalone"), log_retention_hours=2,
                         log_cleaner_backoff_ms=200).start()
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = Cluster(tmp_path_factory.mktemp("cluster"), 3)
    try:
        c.start()
        yield c
    finally:
        c.stop()


def name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def create(bootstrap: str, topic: str, configs: dict[str, str] | None = None, rf: int = 1, assignment=None) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    new = NewTopic(topic, num_partitions=1, replica_assignment=assignment, config=configs or {}) if assignment else \
        NewTopic(topic, 1, rf, config=configs or {})
    admin.create_topics([new], operation_timeout=20)[topic].result(30)


def describe(bootstrap: str, topic: str) -> dict:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    return list(admin.describe_configs([ConfigResource(ResourceType.TOPIC, topic)]).values())[0].result(20)


def alter(bootstrap: str, topic: str, configs: dict[str, str], validate_only: bool = False) -> None:
    """confluent-kafka's AlterConfigs (the non-incremental API 33): ``configs`` become the topic's overrides."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    resource = ConfigResource(ResourceType.TOPIC, topic, set_config=configs)
    admin.alter_configs([resource], validate_only=validate_only, request_timeout=20)[resource].result(30)


def refusal(bootstrap: str, resource: ConfigResource) -> tuple[str, str]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    with pytest.raises(KafkaException) as err:
        admin.alter_configs([resource], request_timeout=20)[resource].result(30)
    return err.value.args[0].name(), err.value.args[0].str()


def produce(bootstrap: str, topic: str, values: list[bytes], timestamp: int = 0, **settings) -> list:
    """Delivery reports (error, offset, timestamp) of ``values`` produced one by one."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, **settings})
    reports = []
    for value in values:
        producer.produce(topic, value, key=value, timestamp=timestamp,
                         on_delivery=lambda err, msg: reports.append((err, msg.offset(), msg.timestamp())))
    assert producer.flush(30) == 0
    return reports


def consume(bootstrap: str, topic: str, count: int) -> list:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, 0)])
    out = []
    deadline = time.monotonic() + 30
    while len(out) < count and time.monotonic() < deadline:
        for msg in consumer.consume(100, timeout=0.5):
            assert not msg.error(), msg.error()
            out.append((msg.offset(), msg.value(), msg.timestamp()))
    consumer.close()
    return out


def read_all(bootstrap: str, topic: str) -> list[int]:
    """Offsets of every record of partition 0 up to its high watermark."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused", "enable.auto.commit": False})
    end = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[1]
    consumer.assign([TopicPartition(topic, 0, 0)])
    out: list[int] = []
    deadline = time.monotonic() + 20
    while (not out or out[-1] < end - 1) and time.monotonic() < deadline:
        for msg in consumer.consume(100, timeout=0.5):
            assert not msg.error(), msg.error()
            out.append(msg.offset())
    consumer.close()
    return out


def stored_batches(log_dir: Path, topic: str) -> list[tuple[records.BatchHeader, bytes]]:
    """Every batch of partition 0 as the broker wrote it in its segment files."""
    out = []
    for path in sorted((log_dir / f"{topic}-0").glob("*.log")):
        data = path.read_bytes()
        pos = 0
        while pos + records.HEADER_SIZE <= len(data):
            header = records.read_header(data, pos)
            out.append((header, data[pos: pos + header.size]))
            pos += header.size
    return out


# ---- standalone ------------------------------------------------------------------------------------------------
def test_create_topics_accepts_kafkas_topic_configs_and_describes_their_sources(standalone):
    topic = name("all")
    configs = {"compression.type": "zstd", "max.compaction.lag.ms": "600000", "min.compaction.lag.ms": "1000",
               "message.timestamp.type": "LogAppendTime", "segment.jitter.ms": "1000",
               "message.timestamp.before.max.ms": "86400000", "unclean.leader.election.enable": "true",
               "preallocate": "true", "message.downconversion.enable": "false", "compression.zstd.level": "5",
               "leader.replication.throttled.replicas": "*", "local.retention.ms": "-2"}
    create(standalone.bootstrap, topic, configs)
    described = describe(standalone.bootstrap, topic)
    for key, value in configs.items():
        assert described[key].value == value, key
        assert described[key].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value, key
    assert described["retention.ms"].value == "7200000"  # from log.retention.hours=2, set in the file
    assert described["retention.ms"].source == ConfigSource.STATIC_BROKER_CONFIG.value
    assert described["message.timestamp.difference.max.ms"].value == str(2**63 - 1)
    assert described["message.timestamp.difference.max.ms"].source == ConfigSource.DEFAULT_CONFIG.value
    assert len(described) >= 36  # Kafka 3.9's topic configs
    admin = AdminClient({"bootstrap.servers": standalone.bootstrap})
    for bad, message in [({"compression.type": "brotli"}, "String must be one of"),
                         ({"remote.storage.enable": "true"}, "Tiered Storage functionality is disabled"),
                         ({"min.compaction.lag.ms": "5", "max.compaction.lag.ms": "4"}, "conflict topic config")]:
        other = name("bad")
        with pytest.raises(KafkaException) as err:
            admin.create_topics([NewTopic(other, 1, 1, config=bad)])[other].result(20)
        assert err.value.args[0].name() == "INVALID_CONFIG" and message in err.value.args[0].str()


def test_alter_configs_replaces_the_whole_set_of_overrides(standalone):
    topic = name("alter")
    create(standalone.bootstrap, topic, {"retention.ms": "3600000", "cleanup.policy": "compact"})
    alter(standalone.bootstrap, topic, {"segment.ms": "60000"}, validate_only=True)
    assert describe(standalone.bootstrap, topic)["segment.ms"].value == str(168 * 3_600_000)  # nothing changed
    alter(standalone.bootstrap, topic, {"segment.ms": "60000", "compression.type": "lz4"})
    described = describe(standalone.bootstrap, topic)
    assert described["segment.ms"].value == "60000" and described["compression.type"].value == "lz4"
    # left out: back to the broker's defaults
    assert described["retention.ms"].value == "7200000" and described["cleanup.policy"].value == "delete"
    assert described["retention.ms"].source == ConfigSource.STATIC_BROKER_CONFIG.value

    assert refusal(standalone.bootstrap, ConfigResource(ResourceType.TOPIC, topic, set_config={"no.such": "1"})) \
        == ("INVALID_CONFIG", "Unknown topic config name: no.such")
    assert refusal(standalone.bootstrap, ConfigResource(ResourceType.TOPIC, topic,
                                                        set_config={"segment.ms": "0"}))[0] == "INVALID_CONFIG"
    assert refusal(standalone.bootstrap, ConfigResource(ResourceType.TOPIC, name("none"),
                                                        set_config={"segment.ms": "1"}))[0] == \
        "UNKNOWN_TOPIC_OR_PART"  # librdkafka's name of UNKNOWN_TOPIC_OR_PARTITION
    assert refusal(standalone.bootstrap, ConfigResource(ResourceType.BROKER, "0",
                                                        set_config={"log.retention.ms": "1"}))[0] == "INVALID_REQUEST"
    assert describe(standalone.bootstrap, topic)["segment.ms"].value == "60000"  # refusals changed nothing

    # kafka-python's alter_configs, forced onto AlterConfigs (it re-sends the other overrides itself)
    admin = KafkaAdminClient(bootstrap_servers=standalone.bootstrap)
    try:
        result = admin.alter_configs([KpConfigResource(ConfigResourceType.TOPIC, topic,
                                                       configs={"message.timestamp.type": "LogAppendTime"})],
                                     raise_on_unknown=False, incremental=False)
        assert result == {"topic": {topic: "OK"}}
        refused = admin.alter_configs([KpConfigResource(ConfigResourceType.TOPIC, topic,
                                                        configs={"segment.bytes": "1"})],
                                      raise_on_unknown=False, incremental=False)
        assert "InvalidConfigurationError" in refused["topic"][topic] and "at least 14" in refused["topic"][topic]
    finally:
        admin.close()
    described = describe(standalone.bootstrap, topic)
    assert described["message.timestamp.type"].value == "LogAppendTime"
    assert described["segment.ms"].value == "60000"


def test_compression_type_recompresses_at_the_leader(standalone):
    topic = name("zstd")
    create(standalone.bootstrap, topic, {"compression.type": "zstd"})
    values = [f"value-{i}".encode() * 20 for i in range(200)]
    reports = produce(standalone.bootstrap, topic, values[:100], **{"compression.type": "gzip"})
    assert [err is None for err, _, _ in reports] == [True] * 100
    producer = KafkaProducer(bootstrap_servers=standalone.bootstrap, compression_type="lz4", linger_ms=5)
    for value in values[100:]:
        producer.send(topic, value, key=value)
    producer.flush(30)
    producer.close()
    got = consume(standalone.bootstrap, topic, 200)
    assert [(o, v) for o, v, _ in got] == list(enumerate(values))
    batches = stored_batches(standalone.log_dir, topic)
    assert batches and {h.compression for h, _ in batches} == {compression.ZSTD}
    assert records.validate(b"".join(b for _, b in batches), 1 << 30).records == 200  # CRCs right

    plain = name("plain")
    create(standalone.bootstrap, plain, {"compression.type": "uncompressed"})
    produce(standalone.bootstrap, plain, values[:50], **{"compression.type": "snappy"})
    assert {h.compression for h, _ in stored_batches(standalone.log_dir, plain)} == {compression.NONE}
    assert [v for _, v, _ in consume(standalone.bootstrap, plain, 50)] == values[:50]
    kept = name("kept")
    create(standalone.bootstrap, kept)  # compression.type=producer: as sent
    produce(standalone.bootstrap, kept, values[:50], **{"compression.type": "snappy"})
    assert {h.compression for h, _ in stored_batches(standalone.log_dir, kept)} == {compression.SNAPPY}


def test_log_append_time_is_stamped_by_the_broker(standalone):
    topic = name("lat")
    create(standalone.bootstrap, topic, {"message.timestamp.type": "LogAppendTime"})
    before = int(time.time() * 1000)
    reports = produce(standalone.bootstrap, topic, [b"a", b"b", b"c"], timestamp=1_000_000)
    after = int(time.time() * 1000)
    for err, _, (kind, ts) in reports:  # the produce response's log_append_time_ms reached the producer
        assert err is None and kind == TIMESTAMP_LOG_APPEND_TIME and before <= ts <= after
    got = consume(standalone.bootstrap, topic, 3)
    assert {kind for _, _, (kind, _) in got} == {TIMESTAMP_LOG_APPEND_TIME}
    assert all(before <= ts <= after for _, _, (_, ts) in got)
    consumer = KafkaConsumer(bootstrap_servers=standalone.bootstrap, auto_offset_reset="earliest",
                             consumer_timeout_ms=5000)
    consumer.assign([KpTopicPartition(topic, 0)])
    seen = []
    for m in consumer:
        seen.append((m.timestamp_type, m.timestamp))
        if len(seen) == 3:
            break
    consumer.close()
    assert len(seen) == 3 and all(kind == 1 and before <= ts <= after for kind, ts in seen)
    assert all(h.attributes & LOG_APPEND_TIME_FLAG for h, _ in stored_batches(standalone.log_dir, topic))

    created = name("ct")  # CreateTime: the producer's timestamp, -1 in the produce response
    create(standalone.bootstrap, created)
    reports = produce(standalone.bootstrap, created, [b"a"], timestamp=1_000_000)
    assert reports[0][2] == (TIMESTAMP_CREATE_TIME, 1_000_000)
    assert consume(standalone.bootstrap, created, 1)[0][2] == (TIMESTAMP_CREATE_TIME, 1_000_000)


def test_timestamp_bounds_refuse_records_outside_them(standalone):
    topic = name("bounds")
    create(standalone.bootstrap, topic, {"message.timestamp.before.max.ms": "60000",
                                         "message.timestamp.after.max.ms": "60000"})
    now = int(time.time() * 1000)
    for ts in (now - 3_600_000, now + 3_600_000):
        (err, _, _), = produce(standalone.bootstrap, topic, [b"x"], timestamp=ts, retries=0)
        assert err is not None and err.code() == KafkaError.INVALID_TIMESTAMP, err
    (err, offset, _), = produce(standalone.bootstrap, topic, [b"ok"])
    assert err is None and offset == 0  # nothing of the refused records was written
    legacy = name("difference")  # the deprecated config bounds both sides while the new ones are unset
    create(standalone.bootstrap, legacy, {"message.timestamp.difference.max.ms": "60000"})
    (err, _, _), = produce(standalone.bootstrap, legacy, [b"x"], timestamp=now - 3_600_000, retries=0)
    assert err.code() == KafkaError.INVALID_TIMESTAMP
    appended = name("lat-bounds")  # LogAppendTime: the producer's timestamp does not matter
    create(standalone.bootstrap, appended, {"message.timestamp.type": "LogAppendTime",
                                            "message.timestamp.difference.max.ms": "60000"})
    (err, _, _), = produce(standalone.bootstrap, appended, [b"x"], timestamp=now - 3_600_000)
    assert err is None


def test_min_compaction_lag_keeps_young_records_uncompacted(standalone):
    now = int(time.time() * 1000)
    settings = {"cleanup.policy": "compact", "segment.bytes": "1024", "min.compaction.lag.ms": "600000"}
    young, old = name("young"), name("old")
    for topic, ts in ((young, now), (old, now - 3_600_000)):
        create(standalone.bootstrap, topic, settings)
        for round_ in range(5):  # a flush per round: batches in several segments
            producer = Producer({"bootstrap.servers": standalone.bootstrap})
            for i in range(10):
                producer.produce(topic, f"{round_}:{i}".encode() * 10, key=f"k{i}".encode(), timestamp=ts)
            assert producer.flush(30) == 0
    wait_until(lambda: len(read_all(standalone.bootstrap, old)) < 50, 60, interval=0.5,  # 20 s ran out once in CI
               what="the records older than the lag compacted")
    assert len(read_all(standalone.bootstrap, young)) == 50  # the same cleaner left the young ones alone
    alter(standalone.bootstrap, young, {**settings, "min.compaction.lag.ms": "0"})
    wait_until(lambda: len(read_all(standalone.bootstrap, young)) < 50, 60, interval=0.5,
               what="compaction once the lag is gone")


# ---- cluster ---------------------------------------------------------------------------------------------------
def test_cluster_alter_configs_and_log_append_time_on_every_replica(cluster):
    topic = name("rep")
    create(cluster.bootstrap, topic, {"compression.type": "producer"}, rf=3)
    admin = KafkaAdminClient(bootstrap_servers=cluster.brokers[2].bootstrap)
    try:
        assert admin.alter_configs([KpConfigResource(ConfigResourceType.TOPIC, topic,
                                                     configs={"message.timestamp.type": "LogAppendTime",
                                                              "compression.type": "gzip"})],
                                   raise_on_unknown=False, incremental=False) == {"topic": {topic: "OK"}}
    finally:
        admin.close()
    for b in cluster.brokers.values():  # every broker has the new config (from ZooKeeper)
        wait_until(lambda: describe(b.bootstrap, topic)["compression.type"].value == "gzip", 20,
                   what=f"broker {b.settings['broker.id']} seeing the config")
        assert describe(b.bootstrap, topic)["message.timestamp.type"].source == \
            ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    before = int(time.time() * 1000)
    reports = produce(cluster.bootstrap, topic, [f"v{i}".encode() for i in range(20)], timestamp=1_000_000,
                      acks="all")
    assert all(err is None and kind == TIMESTAMP_LOG_APPEND_TIME and ts >= before
               for err, _, (kind, ts) in reports)

    def replicas_equal():
        stored = [stored_batches(b.log_dir, topic) for b in cluster.brokers.values()]
        same = all(len(s) == len(stored[0]) and [x for _, x in s] == [x for _, x in stored[0]] for s in stored)
        return stored[0] if same and sum(h.record_count for h, _ in stored[0]) == 20 else None

    batches = wait_until(replicas_equal, 20, what="followers holding the leader's bytes")
    assert all(h.attributes & LOG_APPEND_TIME_FLAG and h.compression == compression.GZIP and h.max_timestamp >= before
               for h, _ in batches)
    assert [v for _, v, _ in consume(cluster.bootstrap, topic, 20)] == [f"v{i}".encode() for i in range(20)]


def test_topic_unclean_leader_election_overrides_the_broker(cluster):
    on, off = name("unclean"), name("clean")
    create(cluster.brokers[0].bootstrap, on, {"unclean.leader.election.enable": "true"}, assignment=[[1, 2]])
    create(cluster.brokers[0].bootstrap, off, assignment=[[1, 2]])
    for topic in (on, off):
        wait_until(lambda: cluster.state(topic, 0)["isr"] == [1, 2] or cluster.state(topic, 0)["isr"] == [2, 1], 20,
                   what="both replicas in sync")
    try:
        cluster.brokers[2].stop()
        for topic in (on, off):
            wait_until(lambda: cluster.state(topic, 0)["isr"] == [1], 20, what="broker 2 out of the ISR")
        cluster.brokers[1].stop()
        for topic in (on, off):
            wait_until(lambda: cluster.state(topic, 0)["leader"] == -1, 20, what="the partition offline")
        cluster.brokers[2].start()
        wait_until(lambda: cluster.state(on, 0)["leader"] == 2, 30, what="an unclean election on the topic")
        time.sleep(2)
        assert cluster.state(off, 0)["leader"] == -1  # the broker's default: no unclean election
        alter(cluster.brokers[0].bootstrap, off, {"unclean.leader.election.enable": "true"})
        wait_until(lambda: cluster.state(off, 0)["leader"] == 2, 30, what="the election once the config allows it")
    finally:
        for b in cluster.brokers.values():
            if not b.alive():
                b.start()
