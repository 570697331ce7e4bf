"""Bad input gets a Kafka error code or a closed connection, never a partial write or a dead broker."""

import datetime
import socket
import struct
import subprocess
import sys
import uuid

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from rawclient import RawClient, batch, request_module
from support import REPO

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]


def produce_request(topic, records, version=7, acks=1):
    m = request_module(0, version)
    return m.ProduceRequest(transactional_id=None, acks=acks, timeout=datetime.timedelta(seconds=5), topic_data=(
        m.TopicProduceData(name=topic, partition_data=(m.PartitionProduceData(index=0, records=records),)),))


def end_offset(broker, topic):
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "x"})
    try:
        return consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[1]
    finally:
        consumer.close()


def still_serving(broker):
    topic = f"alive-{uuid.uuid4().hex[:6]}"
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    producer.produce(topic, b"ok")
    return producer.flush(10) == 0


@pytest.fixture
def topic(broker):
    name = f"bad-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})  # keep a reference until the result is in
    admin.create_topics([NewTopic(name, 1, 1)])[name].result(10)
    return name


def test_bad_crc_is_corrupt_message_and_nothing_is_written(broker, topic):
    client = RawClient(broker.host, broker.port)
    good = batch([b"one", b"two"])
    resp = client.request(0, 7, produce_request(topic, good))
    assert resp.responses[0].partition_responses[0].error_code.value == 0
    corrupt = bytearray(batch([b"three"]))
    corrupt[-1] ^= 0xFF
    resp = client.request(0, 7, produce_request(topic, bytes(corrupt)))
    assert resp.responses[0].partition_responses[0].error_code.value == 2  # CORRUPT_MESSAGE
    torn = batch([b"four"])[:-3]  # a cut-off batch is no batch to Kafka's iterator: "at least one record batch"
    resp = client.request(0, 7, produce_request(topic, torn))
    assert resp.responses[0].partition_responses[0].error_code.value == 87  # INVALID_RECORD
    torn_after_one = batch([b"four"]) + batch([b"four"])[:-3]  # a whole batch, then bytes of none: framing's
    resp = client.request(0, 7, produce_request(topic, torn_after_one))
    assert resp.responses[0].partition_responses[0].error_code.value == 2
    # The same connection still works, and only the good batch is in the log.
    resp = client.request(0, 7, produce_request(topic, batch([b"five"])))
    part = resp.responses[0].partition_responses[0]
    assert (part.error_code.value, part.base_offset) == (0, 2)
    client.close()
    assert end_offset(broker, topic) == 3


def test_oversized_batch_is_message_too_large(broker, topic):
    client = RawClient(broker.host, broker.port)
    resp = client.request(0, 7, produce_request(topic, batch([b"x" * 1_200_000])))
    assert resp.responses[0].partition_responses[0].error_code.value == 10  # MESSAGE_TOO_LARGE
    client.close()
    assert end_offset(broker, topic) == 0


def test_unknown_topic_and_bad_acks(broker):
    client = RawClient(broker.host, broker.port)
    resp = client.request(0, 7, produce_request("never-created-" + uuid.uuid4().hex[:6], batch([b"a"])))
    assert resp.responses[0].partition_responses[0].error_code.value == 3  # UNKNOWN_TOPIC_OR_PARTITION
    resp = client.request(0, 7, produce_request("t", batch([b"a"]), acks=5))
    assert resp.responses[0].partition_responses[0].error_code.value == 21  # INVALID_REQUIRED_ACKS
    client.close()


def test_oversized_frame_closes_only_that_connection(broker):
    client = RawClient(broker.host, broker.port)
    client.send_bytes(struct.pack(">i", 200 * 1024 * 1024) + b"\x00" * 64)
    with pytest.raises((ConnectionError, socket.timeout, OSError)):
        client.recv_frame()
    client.close()
    assert still_serving(broker)


@pytest.mark.parametrize("garbage", [
    b"\x00\x00\x00\x05hello",                                    # too short for a header
    struct.pack(">ihhih", 12, 999, 0, 1, -1) + b"\x00\x00",       # unknown api key
    struct.pack(">ihhih", 12, 3, 200, 1, -1) + b"\x00\x00",       # unsupported Metadata version
    struct.pack(">ihhih", 14, 0, 7, 1, -1) + b"\xff\xff\xff\xff",  # Produce body that does not decode
    struct.pack(">i", -5),                                       # negative size
])
def test_garbage_frames_close_the_connection_broker_keeps_serving(broker, garbage):
    client = RawClient(broker.host, broker.port, timeout=5)
    client.send_bytes(garbage)
    with pytest.raises((ConnectionError, OSError)):
        client.recv_frame()
    client.close()
    assert still_serving(broker)


def test_api_versions_unknown_version_falls_back_to_v0(broker):
    client = RawClient(broker.host, broker.port)
    payload = struct.pack(">hhih", 18, 99, 42, -1) + b"\x00\x00\x00"
    client.send_bytes(struct.pack(">i", len(payload)) + payload)
    frame = client.recv_frame()
    correlation, error, count = struct.unpack_from(">ihi", frame, 0)
    assert (correlation, error) == (42, 35)  # UNSUPPORTED_VERSION, v0 body
    keys = {struct.unpack_from(">hhh", frame, 10 + 6 * i)[0]: struct.unpack_from(">hhh", frame, 10 + 6 * i)[1:]
            for i in range(count)}
    assert keys[18] == (0, 3) and keys[0][0] == 3
    client.close()


def test_cli_rejects_unknown_and_invalid_config(tmp_path):
    bad = tmp_path / "bad.properties"
    bad.write_text("broker.id=0\nlog.segmnt.bytes=100\n")
    env = {"PYTHONPATH": str(REPO / "platform"), "PATH": "/usr/bin:/bin"}
    out = subprocess.run([sys.executable, "-m", "logbus.cli", "broker", str(bad)], capture_output=True,
                         text=True, timeout=30, env=env)
    assert out.returncode != 0
    assert out.stderr.strip().splitlines()[-1] == "logbus: config error: unknown config key 'log.segmnt.bytes'"
    out = subprocess.run([sys.executable, "-m", "logbus.cli", "broker", str(bad), "--override",
                          "log.segmnt.bytes", ], capture_output=True, text=True, timeout=30, env=env)
    assert out.returncode != 0 and "key=value" in out.stderr
    bad.write_text("broker.id=zero\n")
    out = subprocess.run([sys.executable, "-m", "logbus.cli", "broker", str(bad)], capture_output=True,
                         text=True, timeout=30, env=env)
    assert out.returncode != 0 and "invalid value 'zero' for broker.id" in out.stderr
    bad.write_text("schema.registry.url=http://127.0.0.1:1\n")
    out = subprocess.run([sys.executable, "-m", "logbus.cli", "audit-service", str(bad)], capture_output=True,
                         text=True, timeout=30, env=env)
    assert out.returncode == 2 and out.stderr.strip() == (
        "logbus: config error: at least one audit.cluster.<name>.bootstrap.servers is required")
    out = subprocess.run([sys.executable, "-m", "logbus.cli", "audit-service", str(tmp_path / "none")],
                         capture_output=True, text=True, timeout=30, env=env)
    assert out.returncode == 2 and out.stderr.strip().startswith("logbus: config error: cannot read")
    bad.write_text("bootstrap.servers=127.0.0.1:1\nschema.registry.url=http://127.0.0.1:1\n")
    out = subprocess.run([sys.executable, "-m", "logbus.cli", "load", "--config", str(bad)], capture_output=True,
                         text=True, timeout=30, env=env)
    assert out.returncode == 2 and out.stderr.strip() == "logbus: config error: warehouse.path is required"
    bad.write_text("{not json")
    out = subprocess.run([sys.executable, "-m", "logbus.cli", "up", "--topology", str(bad), "--state-dir",
                          str(tmp_path / "st")], capture_output=True, text=True, timeout=30, env=env)
    assert out.returncode == 2 and out.stderr.startswith("logbus: topology ") and "not valid JSON" in out.stderr
    out = subprocess.run([sys.executable, "-m", "logbus.cli", "status", "--state-dir", str(tmp_path / "none")],
                         capture_output=True, text=True, timeout=30, env=env)
    assert out.returncode == 2 and out.stderr.strip().startswith("logbus: no topology in")
    out = subprocess.run([sys.executable, "-m", "logbus.cli", "down", "--state-dir", str(tmp_path / "none")],
                         capture_output=True, text=True, timeout=30, env=env)
    assert out.returncode == 2 and out.stderr.strip().startswith("logbus: no topology in")
