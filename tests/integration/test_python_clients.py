"""kafka-python and aiokafka against a broker process: the same journeys as librdkafka, their own codecs."""

import asyncio
import time
import uuid

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

CODECS = [None, "gzip", "snappy", "lz4", "zstd"]


def topic_name(prefix):
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def sample(i):
    key = None if i % 4 == 1 else f"key-{i}".encode()
    value = None if i % 9 == 0 and key is not None else f"value-{i}-".encode() * (i % 13 + 1)
    headers = [("n", str(i).encode()), ("empty", b"")] if i % 3 == 0 else []
    return key, value, headers


@pytest.mark.parametrize("codec", CODECS)
def test_kafka_python_round_trip(broker, codec):
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    topic = topic_name(f"kp-{codec}")
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, compression_type=codec, linger_ms=5)
    expected = []
    for i in range(300):
        key, value, headers = sample(i)
        producer.send(topic, value=value, key=key, headers=headers)
        expected.append((key, value, [(k, v) for k, v in headers]))
    producer.flush(20)
    producer.close()

    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, enable_auto_commit=False,
                             consumer_timeout_ms=5000, auto_offset_reset="earliest")
    tp = TopicPartition(topic, 0)
    consumer.assign([tp])
    got = []
    deadline = time.monotonic() + 30
    while len(got) < len(expected) and time.monotonic() < deadline:
        for records in consumer.poll(timeout_ms=500).values():
            got.extend(records)
    assert [(r.key, r.value, [(k, v) for k, v in r.headers]) for r in got] == expected
    assert [r.offset for r in got] == list(range(len(expected)))

    consumer.seek(tp, 250)  # rewind to an offset
    again = []
    while len(again) < 50:
        for records in consumer.poll(timeout_ms=500).values():
            again.extend(records)
    assert [r.offset for r in again][:50] == list(range(250, 300))
    ts = got[100].timestamp
    found = consumer.offsets_for_times({tp: ts})[tp]
    assert found.offset <= 100 and got[found.offset].timestamp >= ts
    assert consumer.beginning_offsets([tp])[tp] == 0
    assert consumer.end_offsets([tp])[tp] == 300
    consumer.close()


@pytest.mark.parametrize("codec", CODECS)
def test_aiokafka_round_trip(broker, codec):
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka.structs import TopicPartition

    topic = topic_name(f"aio-{codec}")

    async def scenario():
        producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, compression_type=codec, linger_ms=5)
        await producer.start()
        expected = []
        try:
            futures = []
            for i in range(300):
                key, value, headers = sample(i)
                futures.append(await producer.send(topic, value=value, key=key, headers=headers))
                expected.append((key, value, headers))
            await asyncio.gather(*futures)
        finally:
            await producer.stop()

        consumer = AIOKafkaConsumer(bootstrap_servers=broker.bootstrap, enable_auto_commit=False)
        await consumer.start()
        try:
            tp = TopicPartition(topic, 0)
            consumer.assign([tp])
            consumer.seek(tp, 0)
            got = []
            while len(got) < len(expected):
                batch = await asyncio.wait_for(consumer.getmany(timeout_ms=500), 30)
                for records in batch.values():
                    got.extend(records)
            assert [(r.key, r.value, list(r.headers)) for r in got] == expected
            consumer.seek(tp, 123)
            record = await asyncio.wait_for(consumer.getone(), 30)
            assert record.offset == 123
            ts = got[200].timestamp
            found = (await consumer.offsets_for_times({tp: ts}))[tp]
            assert found.offset <= 200 and got[found.offset].timestamp >= ts
            assert (await consumer.end_offsets([tp]))[tp] == 300
        finally:
            await consumer.stop()

    asyncio.run(scenario())


def test_kafka_python_describe_cluster_and_an_endpoint_type_this_broker_lacks(broker):
    """DescribeCluster (key 60) as kafka-python's admin sends it (v2, authorized operations asked), and a raw v1
    request for the controllers' endpoints (MISMATCHED_ENDPOINT_TYPE) and for an unknown type
    (UNSUPPORTED_ENDPOINT_TYPE), the connection serving on."""
    from kafka.admin import KafkaAdminClient
    from rawclient import RawClient, request_module

    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        described = admin.describe_cluster()
    finally:
        admin.close()
    assert described["controller_id"] == 0
    assert [(b["broker_id"], b["port"], b["is_fenced"]) for b in described["brokers"]] == [(0, broker.port, False)]
    assert set(described["authorized_operations"]) == {"CREATE", "ALTER", "DESCRIBE", "CLUSTER_ACTION",
                                                       "DESCRIBE_CONFIGS", "ALTER_CONFIGS", "IDEMPOTENT_WRITE"}
    client = RawClient(broker.host, broker.port)
    try:
        m = request_module(60, 1)
        for endpoint, code in ((2, 114), (7, 115)):  # MISMATCHED_ENDPOINT_TYPE (controllers), UNSUPPORTED_...
            answer = client.request(60, 1, m.DescribeClusterRequest(include_cluster_authorized_operations=False,
                                                                    endpoint_type=endpoint))
            assert (answer.error_code.value, answer.brokers, answer.cluster_id) == (code, (), "")
        plain = client.request(60, 1, m.DescribeClusterRequest(include_cluster_authorized_operations=False,
                                                               endpoint_type=1))
        assert plain.error_code.value == 0 and plain.cluster_authorized_operations == -2**31
        assert plain.cluster_id == described["cluster_id"]
    finally:
        client.close()
