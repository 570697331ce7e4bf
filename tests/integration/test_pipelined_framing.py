"""The listener's framing (issue 20): it reads what the socket has and handles every whole frame in it, in order,
answering them together. Against a real broker process: a burst of pipelined requests sent in one TCP write is
answered in order and read back by kafka-python and confluent-kafka; frames split across many writes (small and
larger than the listener's read chunk) are reassembled; a bad frame in the middle of a burst closes that
connection only, after the answers to the frames before it."""

import datetime
import io
import socket
import struct
import time
import uuid

import pytest
from confluent_kafka import Producer
from kafka import KafkaConsumer, TopicPartition
from kio.index import load_request_schema, load_response_schema
from kio.serial import entity_reader, entity_writer
from rawclient import RawClient, batch, request_module
from support import BrokerProcess, read_topic

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

PRODUCE_V, METADATA_V = 7, 9


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    """This module's broker: batches up to 4 MB, so one Produce frame can be larger than the memory pool's
    free size (1 MiB)."""
    proc = BrokerProcess(tmp_path_factory.mktemp("broker"), num_partitions=1, message_max_bytes=4_000_000).start()
    yield proc
    proc.stop()


def frame(api_key: int, version: int, correlation: int, body) -> bytes:
    req_type = load_request_schema(api_key, version)
    header = struct.pack(">hhih", api_key, version, correlation, 4) + b"test"
    if req_type.__flexible__:
        header += b"\x00"
    buf = io.BytesIO()
    entity_writer(req_type)(buf, body)
    payload = header + buf.getvalue()
    return struct.pack(">i", len(payload)) + payload


def produce_body(topic: str, records: bytes, acks: int = 1, version: int = PRODUCE_V):
    m = request_module(0, version)
    return m.ProduceRequest(transactional_id=None, acks=acks, timeout=datetime.timedelta(seconds=10), topic_data=(
        m.TopicProduceData(name=topic, partition_data=(m.PartitionProduceData(index=0, records=records),)),))


def metadata_body(topic: str):
    m = request_module(3, METADATA_V)
    return m.MetadataRequest(topics=(m.MetadataRequestTopic(name=topic),), allow_auto_topic_creation=True,
                             include_cluster_authorized_operations=False, include_topic_authorized_operations=False)


def read_frames(sock: socket.socket, count: int) -> list[bytes]:
    frames, buf = [], bytearray()
    while len(frames) < count:
        chunk = sock.recv(1 << 20)
        if not chunk:
            raise ConnectionError(f"closed by broker after {len(frames)} response(s)")
        buf += chunk
        while len(buf) >= 4 and len(buf) - 4 >= struct.unpack_from(">i", buf)[0]:
            size = struct.unpack_from(">i", buf)[0]
            frames.append(bytes(buf[4:4 + size]))
            del buf[:4 + size]
    return frames


def produce_answer(frame_bytes: bytes, version: int = PRODUCE_V) -> tuple[int, int, int]:
    """(correlation id, error code, base offset) of a Produce response."""
    correlation = struct.unpack_from(">i", frame_bytes)[0]
    body, _ = entity_reader(load_response_schema(0, version))(frame_bytes, 4 + (version >= 9))  # v9: header tags
    part = body.responses[0].partition_responses[0]
    return correlation, part.error_code.value, part.base_offset


def create(broker, topic: str) -> None:
    client = RawClient(broker.host, broker.port)
    try:
        client.request(3, METADATA_V, metadata_body(topic))  # auto-creates the topic
        deadline = time.monotonic() + 30
        while client.request(3, METADATA_V, metadata_body(topic)).topics[0].error_code.value != 0:
            assert time.monotonic() < deadline, "topic not created"
            time.sleep(0.1)
    finally:
        client.close()


def test_a_pipelined_burst_in_one_write_is_answered_in_order(broker):
    topic = f"burst-{uuid.uuid4().hex[:8]}"
    create(broker, topic)
    values = [f"m{i:05d}".encode() for i in range(2000)]
    burst = bytearray()
    for i, value in enumerate(values):
        burst += frame(0, PRODUCE_V, 10_000 + i, produce_body(topic, batch([value])))
        if i % 500 == 250:  # other APIs interleaved: answered in their place
            burst += frame(3, METADATA_V, 90_000 + i, metadata_body(topic))
    with socket.create_connection((broker.host, broker.port), timeout=30) as sock:
        sock.sendall(bytes(burst))  # ~230 KB in one write: the broker reads it in a few large chunks
        answers = read_frames(sock, len(values) + 4)
    correlations = [struct.unpack_from(">i", a)[0] for a in answers]
    expected = []
    for i in range(len(values)):
        expected.append(10_000 + i)
        if i % 500 == 250:
            expected.append(90_000 + i)
    assert correlations == expected
    produced = [produce_answer(a) for a in answers if struct.unpack_from(">i", a)[0] < 90_000]
    assert [(error, base) for _, error, base in produced] == [(0, i) for i in range(len(values))]
    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, enable_auto_commit=False,
                             consumer_timeout_ms=10_000)
    consumer.assign([TopicPartition(topic, 0)])
    consumer.seek_to_beginning()
    got = [(m.offset, m.value) for m in consumer][: len(values)]
    consumer.close()
    assert got == list(enumerate(values))


def test_confluent_kafka_unbatched_pipelining_keeps_order(broker):
    """librdkafka with one message per request and many requests in flight on one connection."""
    topic = f"unbatched-{uuid.uuid4().hex[:8]}"
    create(broker, topic)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "batch.num.messages": 1, "linger.ms": 0,
                         "acks": 1, "max.in.flight.requests.per.connection": 1000, "enable.idempotence": False})
    reports = []
    values = [f"u{i:05d}".encode() for i in range(5000)]
    for value in values:
        producer.produce(topic, value, partition=0, on_delivery=lambda err, msg: reports.append((err, msg.offset())))
        producer.poll(0)
    assert producer.flush(60) == 0
    assert all(err is None for err, _ in reports)
    assert sorted(offset for _, offset in reports) == list(range(len(values)))
    assert [m.value() for m in read_topic(broker.bootstrap, topic)] == values


def test_runs_of_unbatched_v9_requests_are_answered_as_each_alone(broker):
    """Produce v9 frames of one message each (librdkafka's unbatched producer) in one write: the broker handles runs
    of them as one (broker.handlers.produce_run). Among them: a corrupt batch, a request for another topic, a
    Metadata request, acks=0 requests and a batch of 20 records, each of which ends a run. Every request gets the
    answer it would get alone, in order; kafka-python reads back exactly the accepted records, in order."""
    topic, other = f"runs-{uuid.uuid4().hex[:8]}", f"runs-other-{uuid.uuid4().hex[:8]}"
    create(broker, topic)
    create(broker, other)
    corrupt = bytearray(batch([b"corrupt"]))
    corrupt[-1] ^= 0xFF  # its CRC no longer matches
    burst, expected, stored = bytearray(), [], []  # expected: (correlation, error, base offset or None)

    def produce(cid: int, records: bytes, values: list[bytes], error: int = 0, acks: int = 1, to: str = topic):
        nonlocal burst
        burst += frame(0, 9, cid, produce_body(to, records, acks=acks, version=9))
        if acks:
            expected.append((cid, error, len(stored) if error == 0 and to == topic else None))
        if error == 0 and to == topic:
            stored.extend(values)

    cid = 0
    for i in range(600):
        cid += 1
        if i == 100:
            produce(cid, bytes(corrupt), [], error=2)  # CORRUPT_MESSAGE
        elif i == 200:
            produce(cid, batch([b"elsewhere"]), [], to=other)
        elif i == 300:
            burst += frame(3, METADATA_V, cid, metadata_body(topic))
            expected.append((cid, None, None))
        elif 400 <= i < 410:
            produce(cid, batch([b"quiet%d" % i]), [b"quiet%d" % i], acks=0)
        elif i == 500:
            values = [b"batched%d" % j for j in range(20)]
            produce(cid, batch(values), values)
        else:
            produce(cid, batch([b"r%d" % i]), [b"r%d" % i])
    with socket.create_connection((broker.host, broker.port), timeout=30) as sock:
        sock.sendall(bytes(burst))
        answers = read_frames(sock, len(expected))
    got = []
    for answer, (cid, _, _) in zip(answers, expected):
        if struct.unpack_from(">i", answer)[0] == cid and cid == 301:  # the Metadata answer
            got.append((cid, None, None))
            continue
        correlation, error, base = produce_answer(answer, 9)
        got.append((correlation, error, base if error == 0 and correlation != 201 else None))
    assert got == expected
    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, enable_auto_commit=False,
                             consumer_timeout_ms=10_000)
    consumer.assign([TopicPartition(topic, 0)])
    consumer.seek_to_beginning()
    records = [(m.offset, m.value) for m in consumer]
    consumer.close()
    assert records == list(enumerate(stored))


@pytest.mark.parametrize("size", [300, 400_000, 1_500_000], ids=["small", "over-read-chunk", "over-pool-free"])
def test_a_frame_split_across_many_writes_is_reassembled(broker, size):
    """A Produce frame sent in pieces (the first piece holding only part of the size prefix), then a second
    request in the same write as the first's last piece: both answered, the record intact."""
    topic = f"split-{uuid.uuid4().hex[:8]}"
    create(broker, topic)
    value = bytes(range(256)) * (size // 256) + b"v" * (size % 256)
    first = frame(0, PRODUCE_V, 1, produce_body(topic, batch([value])))
    second = frame(0, PRODUCE_V, 2, produce_body(topic, batch([b"after"])))
    cuts = [2, 3, 7, 50] + list(range(100, len(first), max(len(first) // 40, 1)))
    with socket.create_connection((broker.host, broker.port), timeout=30) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        start = 0
        for cut in cuts:
            sock.sendall(first[start:cut])
            start = cut
            time.sleep(0.002)  # separate segments: the broker sees the frame arrive in pieces
        sock.sendall(first[start:] + second)
        answers = [produce_answer(a) for a in read_frames(sock, 2)]
    assert answers == [(1, 0, 0), (2, 0, 1)]
    assert [m.value() for m in read_topic(broker.bootstrap, topic)] == [value, b"after"]


def test_a_bad_frame_in_a_burst_closes_only_that_connection_after_the_frames_before_it(broker):
    topic = f"bad-{uuid.uuid4().hex[:8]}"
    create(broker, topic)
    good = [frame(0, PRODUCE_V, i, produce_body(topic, batch([b"g%d" % i]))) for i in range(1, 51)]
    later = [frame(0, PRODUCE_V, i, produce_body(topic, batch([b"late%d" % i]))) for i in range(52, 62)]
    bad = struct.pack(">i", 10) + struct.pack(">hhih", 999, 0, 51, -1)  # an unknown API key
    bystander = RawClient(broker.host, broker.port)  # another connection, open across the bad frame
    try:
        with socket.create_connection((broker.host, broker.port), timeout=30) as sock:
            sock.sendall(b"".join(good) + bad + b"".join(later))
            answers = []
            buf = bytearray()
            while True:
                try:
                    chunk = sock.recv(1 << 16)
                except ConnectionResetError:
                    break
                if not chunk:
                    break
                buf += chunk
            while len(buf) >= 4:
                size = struct.unpack_from(">i", buf)[0]
                answers.append(produce_answer(bytes(buf[4:4 + size])))
                del buf[:4 + size]
        assert answers == [(i, 0, i - 1) for i in range(1, 51)]  # every frame before the bad one, none after
        assert bystander.request(3, METADATA_V, metadata_body(topic)).topics[0].error_code.value == 0
    finally:
        bystander.close()
    assert broker.alive()
    assert "unknown api key 999" in broker.log_text()
    assert [m.value() for m in read_topic(broker.bootstrap, topic)] == [b"g%d" % i for i in range(1, 51)]
