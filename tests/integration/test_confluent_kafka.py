"""confluent-kafka (librdkafka) against a broker process: produce, consume, rewind, compression, admin."""

import time
import uuid

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


def topic_name(prefix="ck"):
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def consume_all(bootstrap, topic, count, partitions=1, start=0, timeout=30):
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, p, start) for p in range(partitions)])
    out = []
    deadline = time.monotonic() + timeout
    while len(out) < count and time.monotonic() < deadline:
        for msg in consumer.consume(1000, timeout=0.5):
            if msg.error():
                raise KafkaException(msg.error())
            out.append(msg)
    consumer.close()
    return out


def test_keys_headers_null_values_round_trip(broker):
    topic = topic_name()
    producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all"})
    sent = []
    for i in range(50):
        key = None if i % 5 == 0 else f"k{i}".encode()
        value = None if i % 7 == 0 else f"value-{i}".encode() * (i + 1)
        headers = [("h", f"{i}".encode()), ("empty", b"")] if i % 3 == 0 else None
        producer.produce(topic, value=value, key=key, headers=headers)
        sent.append((key, value, headers))
    assert producer.flush(20) == 0
    got = consume_all(broker.bootstrap, topic, len(sent))
    assert [m.offset() for m in got] == list(range(len(sent)))
    for msg, (key, value, headers) in zip(got, sent):
        assert msg.key() == key
        assert msg.value() == value
        assert (msg.headers() or None) == headers


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_compressed_batches(broker, codec):
    topic = topic_name(codec)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "compression.type": codec, "linger.ms": 20})
    values = [f"{codec}-{i}-".encode() * 20 for i in range(2000)]
    for v in values:
        producer.produce(topic, v)
    assert producer.flush(20) == 0
    got = consume_all(broker.bootstrap, topic, len(values))
    assert [m.value() for m in got] == values


def test_hundred_thousand_messages_every_byte(broker):
    topic = topic_name("100k")
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic, 3, 1)])[topic].result(10)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5})
    expected = {}
    for i in range(100_000):
        value = i.to_bytes(4, "big") + bytes((i * 7 + j) % 256 for j in range(12))
        partition = i % 3
        producer.produce(topic, value, key=str(i).encode(), partition=partition)
        expected.setdefault(partition, []).append((str(i).encode(), value))
        if i % 10_000 == 0:
            producer.poll(0)
    assert producer.flush(60) == 0
    got = consume_all(broker.bootstrap, topic, 100_000, partitions=3, timeout=60)
    assert len(got) == 100_000
    per_partition = {}
    for msg in got:
        per_partition.setdefault(msg.partition(), []).append((msg.key(), msg.value()))
    assert per_partition == expected


def test_rewind_to_offset_and_timestamp(broker):
    topic = topic_name("rewind")
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
    base = int(time.time() * 1000) - 100_000
    for i in range(30):
        producer.produce(topic, f"m{i}".encode(), timestamp=base + i * 1000)
        producer.flush(10)  # one batch per message, so the time lookup must look inside the right batch
    got = consume_all(broker.bootstrap, topic, 10, start=20)
    assert [m.value() for m in got] == [f"m{i}".encode() for i in range(20, 30)]

    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "unused"})
    found = consumer.offsets_for_times([TopicPartition(topic, 0, base + 12_500)], timeout=10)
    assert found[0].offset == 13
    found = consumer.offsets_for_times([TopicPartition(topic, 0, base + 12_000)], timeout=10)
    assert found[0].offset == 12
    beyond = consumer.offsets_for_times([TopicPartition(topic, 0, base + 10_000_000)], timeout=10)
    assert beyond[0].offset == -1  # no record that recent: the end (OFFSET_END)
    low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
    assert (low, high) == (0, 30)
    consumer.close()


def test_batched_in_one_request_with_timestamps_inside_a_batch(broker):
    topic = topic_name("tsbatch")
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 200})
    base = int(time.time() * 1000) - 50_000
    for i in range(10):
        producer.produce(topic, f"m{i}".encode(), timestamp=base + i * 10)
    producer.flush(10)
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "unused"})
    found = consumer.offsets_for_times([TopicPartition(topic, 0, base + 55)], timeout=10)
    assert found[0].offset == 6
    consumer.close()


def test_admin_create_describe_delete(broker):
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    topic = topic_name("admin")
    futures = admin.create_topics([NewTopic(topic, 4, 1, config={"retention.ms": "3600000"})])
    futures[topic].result(10)
    meta = admin.list_topics(timeout=10)
    assert len(meta.topics[topic].partitions) == 4

    with pytest.raises(KafkaException) as err:
        admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(10)
    assert "TOPIC_ALREADY_EXISTS" in str(err.value)
    with pytest.raises(KafkaException) as err:
        admin.create_topics([NewTopic("bad/name", 1, 1)])["bad/name"].result(10)
    assert err.value.args[0].code() == 17  # INVALID_TOPIC_EXCEPTION
    with pytest.raises(KafkaException) as err:
        name = topic_name()
        admin.create_topics([NewTopic(name, 1, 3)])[name].result(10)
    assert "INVALID_REPLICATION_FACTOR" in str(err.value)
    with pytest.raises(KafkaException) as err:
        name = topic_name()
        admin.create_topics([NewTopic(name, 1, 1, config={"no.such.config": "1"})])[name].result(10)
    assert "INVALID_CONFIG" in str(err.value)

    configs = admin.describe_configs([ConfigResource("topic", topic)])
    described = list(configs.values())[0].result(10)
    assert described["retention.ms"].value == "3600000"
    assert described["cleanup.policy"].value == "delete"

    admin.delete_topics([topic])[topic].result(10)
    assert topic not in admin.list_topics(timeout=10).topics
    with pytest.raises(KafkaException) as err:
        admin.delete_topics([topic])[topic].result(10)
    assert "UNKNOWN_TOPIC" in str(err.value)


def test_auto_creation_uses_num_partitions(broker):
    topic = topic_name("auto")
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    producer.produce(topic, b"x")
    assert producer.flush(10) == 0
    meta = AdminClient({"bootstrap.servers": broker.bootstrap}).list_topics(topic, timeout=10)
    assert len(meta.topics[topic].partitions) == 1


def test_idempotent_producer(broker):
    topic = topic_name("idem")
    producer = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True, "linger.ms": 5})
    for i in range(5000):
        producer.produce(topic, str(i).encode())
    assert producer.flush(20) == 0
    got = consume_all(broker.bootstrap, topic, 5000)
    assert [m.value() for m in got] == [str(i).encode() for i in range(5000)]


def test_authorized_operations_without_an_authorizer_are_every_supported_one(broker):
    """Metadata v8–10's cluster and topic bit fields and DescribeGroups v3+'s, as librdkafka's describe_* calls ask
    for them: without an authorizer, every operation Kafka supports on the resource; unasked, none (None)."""
    from confluent_kafka import TopicCollection
    from confluent_kafka.admin import AclOperation as Op

    topic = topic_name("ops")
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(10)
    cluster = admin.describe_cluster(include_authorized_operations=True).result(10)
    assert set(cluster.authorized_operations) == {Op.CREATE, Op.CLUSTER_ACTION, Op.DESCRIBE_CONFIGS,
                                                  Op.ALTER_CONFIGS, Op.IDEMPOTENT_WRITE, Op.ALTER, Op.DESCRIBE}
    described = admin.describe_topics(TopicCollection([topic]), include_authorized_operations=True)[topic].result(10)
    assert set(described.authorized_operations) == {Op.READ, Op.WRITE, Op.CREATE, Op.DESCRIBE, Op.DELETE, Op.ALTER,
                                                    Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS}
    group = admin.describe_consumer_groups(["ops-group"], include_authorized_operations=True)["ops-group"].result(10)
    assert set(group.authorized_operations) == {Op.READ, Op.DESCRIBE, Op.DELETE}
    assert admin.describe_cluster().result(10).authorized_operations is None
    assert admin.describe_topics(TopicCollection([topic]))[topic].result(10).authorized_operations is None
