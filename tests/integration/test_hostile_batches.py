"""Hostile record batches against a real broker (issue 24, "one request must never kill a broker").

Every batch here has a valid CRC, so only record-level validation can refuse it: a header whose counts lie,
compressed payloads that are garbage, use a codec that does not exist, or decompress to far more than they
claim. Each must get a Kafka error with nothing written, and must not stall other clients: a second connection
keeps doing ApiVersions + Metadata round trips meanwhile, and the slowest one is bounded.
"""

import datetime
import gzip
import io
import os
import struct
import threading
import time
import uuid

import cramjam
import crc32c
import lz4.frame
import pytest
import zstandard
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kio.index import load_request_schema, load_response_schema
from kio.serial import entity_reader, entity_writer
from rawclient import RawClient, batch, request_module

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

NONE_, CORRUPT_MESSAGE, MESSAGE_TOO_LARGE, INVALID_RECORD = 0, 2, 10, 87
STALL_BOUND = 0.5  # seconds: the slowest round trip another client may see while a hostile batch is handled
BASE_TS = 1_700_000_000_000


# ---- batches built byte by byte, CRC valid ------------------------------------------------------------------
def varint(value: int) -> bytes:
    raw = (value << 1) ^ (value >> 63)
    out = bytearray()
    while raw >= 0x80:
        out.append(raw & 0x7F | 0x80)
        raw >>= 7
    out.append(raw)
    return bytes(out)


def record(offset_delta: int, key: bytes | None = b"k", value: bytes | None = b"v") -> bytes:
    body = b"\x00" + varint(offset_delta) + varint(offset_delta)  # timestamp delta = offset delta
    body += varint(-1) if key is None else varint(len(key)) + key
    body += varint(-1) if value is None else varint(len(value)) + value
    return varint(len(body) + 1) + body + b"\x00"


def make_batch(payload: bytes, count: int, codec: int = 0, last_offset_delta: int | None = None,
               base_offset: int = 0, base_ts: int = BASE_TS, producer: tuple[int, int, int] = (-1, -1, -1)) -> bytes:
    """``producer``: (producer id, epoch, base sequence)."""
    delta = count - 1 if last_offset_delta is None else last_offset_delta
    after_crc = struct.pack(">hiqqqhii", codec, delta, base_ts, base_ts + max(count - 1, 0), *producer,
                            count) + payload
    return struct.pack(">qiibI", base_offset, 9 + len(after_crc), 0, 2, crc32c.crc32c(after_crc)) + after_crc


def with_last_offset_delta(data: bytes, delta: int) -> bytes:
    """A batch built by an outside encoder with its lastOffsetDelta replaced, CRC recomputed."""
    out = bytearray(data)
    out[23:27] = struct.pack(">i", delta)
    out[17:21] = struct.pack(">I", crc32c.crc32c(bytes(out[21:])))
    return bytes(out)


def zstd_bomb(count: int = 5_000_000) -> bytes:
    """About 3 KB of zstd claiming ``count`` records (35 MB of them, decompressed), no keys."""
    return make_batch(zstandard.ZstdCompressor(level=19).compress(record(0, key=None, value=None) * count),
                      count, codec=4)


def zeros_value_batch(size: int = 500 << 20, base_offset: int = 0, base_ts: int = BASE_TS) -> bytes:
    """One keyed record whose value is ``size`` zero bytes: about 15 KB of zstd, never built in memory."""
    prefix = b"\x00" + varint(0) + varint(0) + varint(1) + b"k" + varint(size)
    comp = zstandard.ZstdCompressor().compressobj()
    parts = [comp.compress(varint(len(prefix) + size + 1) + prefix)]
    chunk = b"\x00" * (1 << 20)
    parts += [comp.compress(chunk) for _ in range(size >> 20)]
    parts += [comp.compress(b"\x00"), comp.flush()]
    return make_batch(b"".join(parts), 1, codec=4, base_offset=base_offset, base_ts=base_ts)


GARBAGE = os.urandom(300)


def garbage_batch(codec: int) -> bytes:
    recs = b"".join(record(i) for i in range(3))
    payload = {
        1: gzip.compress(recs)[:-9] + b"\x00" * 9,  # a gzip stream whose deflate data is cut short
        2: b"\x40" + GARBAGE,                        # raw snappy: a 32-byte preamble, then nonsense
        3: lz4.frame.compress(recs)[:7] + GARBAGE,   # a real lz4 frame header, then nonsense
        4: zstandard.ZstdCompressor().compress(recs)[:6] + GARBAGE,
    }.get(codec, recs)                               # 5-7: codecs that do not exist
    return make_batch(payload, 3, codec=codec)


# ---- requests ---------------------------------------------------------------------------------------------------
def produce_request(topic, records, acks=1):
    m = request_module(0, 7)
    return m.ProduceRequest(transactional_id=None, acks=acks, timeout=datetime.timedelta(seconds=30), topic_data=(
        m.TopicProduceData(name=topic, partition_data=(m.PartitionProduceData(index=0, records=records),)),))


def produce(client, topic, records):
    """(error code, base offset) of one partition's answer."""
    part = client.request(0, 7, produce_request(topic, records)).responses[0].partition_responses[0]
    return part.error_code.value, part.base_offset


def list_offsets(client, topic, timestamp):
    """(error code, timestamp, offset) of a ListOffsets v7 query for partition 0."""
    m = request_module(2, 7)
    resp = client.request(2, 7, m.ListOffsetsRequest(replica_id=-1, isolation_level=0, topics=(
        m.ListOffsetsTopic(name=topic, partitions=(m.ListOffsetsPartition(partition_index=0, timestamp=timestamp),)),)))
    part = resp.topics[0].partitions[0]
    return part.error_code.value, part.timestamp, part.offset


def end_offset(broker, topic):
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "x"})
    try:
        return consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[1]
    finally:
        consumer.close()


def create_topic(broker, prefix, **configs):
    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(name, 1, 1, config={k.replace("_", "."): v for k, v in configs.items()})])[
        name].result(10)
    return name


class Prober(threading.Thread):
    """ApiVersions + Metadata round trips on a connection of its own, back to back, until stopped."""

    def __init__(self, broker):
        super().__init__(daemon=True)
        self.client = RawClient(broker.host, broker.port, timeout=30)
        self.samples: list[float] = []
        self.stopped = threading.Event()

    def run(self):
        api_versions = request_module(18, 0).ApiVersionsRequest()
        metadata = request_module(3, 1).MetadataRequest(topics=None)
        while not self.stopped.is_set():
            started = time.perf_counter()
            self.client.request(18, 0, api_versions)
            self.client.request(3, 1, metadata)
            self.samples.append(time.perf_counter() - started)

    def __enter__(self):
        self.start()
        while not self.samples:  # connected and answered once before the hostile request goes out
            time.sleep(0.01)
        return self

    def __exit__(self, *exc):
        time.sleep(0.1)
        self.stopped.set()
        self.join(30)
        self.client.close()

    @property
    def slowest(self) -> float:
        return max(self.samples)


@pytest.fixture(scope="module")
def topic(broker):
    return create_topic(broker, "hostile")


@pytest.fixture(scope="module")
def compacted(broker):
    return create_topic(broker, "hostile-compact", cleanup_policy="compact")


# ---- produce ----------------------------------------------------------------------------------------------------
def test_last_offset_delta_max_is_invalid_record_and_offsets_stay_right(broker):
    topic = create_topic(broker, "delta")
    client = RawClient(broker.host, broker.port)
    assert produce(client, topic, batch([b"one", b"two"])) == (NONE_, 0)
    assert produce(client, topic, with_last_offset_delta(batch([b"lie"]), 2**31 - 1))[0] == INVALID_RECORD
    assert produce(client, topic, with_last_offset_delta(batch([b"a", b"b"]), 0))[0] == INVALID_RECORD
    assert produce(client, topic, batch([b"three"])) == (NONE_, 2)
    client.close()
    assert end_offset(broker, topic) == 3


def test_record_count_zero_and_records_disagreeing_with_it_are_invalid(broker):
    topic = create_topic(broker, "count")
    client = RawClient(broker.host, broker.port)
    recs = [record(i) for i in range(3)]
    assert produce(client, topic, make_batch(b"", 0, last_offset_delta=-1))[0] == INVALID_RECORD
    assert produce(client, topic, make_batch(b"".join(recs[:2]), 3))[0] == INVALID_RECORD  # fewer
    assert produce(client, topic, make_batch(b"".join(recs), 2))[0] == INVALID_RECORD  # more
    assert produce(client, topic, make_batch(b"".join([recs[0], recs[2], recs[1]]), 3))[0] == INVALID_RECORD
    assert produce(client, topic, make_batch(b"".join(recs), 3)) == (NONE_, 0)
    client.close()
    assert end_offset(broker, topic) == 3


def test_two_batches_in_one_partition_and_a_producer_id_without_a_sequence_are_invalid(broker):
    """Kafka's ProduceRequest.validateRecords (Produce v3+: exactly one batch per partition, of magic 2, checked
    before the CRCs) and LogValidator (a batch with a producer id has a base sequence >= 0): INVALID_RECORD,
    nothing written, the connection serves on."""
    topic = create_topic(broker, "one-batch")
    client = RawClient(broker.host, broker.port)
    recs = b"".join(record(i) for i in range(2))
    assert produce(client, topic, make_batch(recs, 2) + make_batch(recs, 2))[0] == INVALID_RECORD
    assert produce(client, topic, make_batch(recs, 2) + make_batch(recs, 2)[:-1] + b"?")[0] == INVALID_RECORD
    assert produce(client, topic, b"")[0] == INVALID_RECORD  # no batch at all
    old_magic = bytearray(make_batch(recs, 2))
    old_magic[16] = 1
    assert produce(client, topic, bytes(old_magic))[0] == INVALID_RECORD
    assert produce(client, topic, make_batch(recs, 2, producer=(7, 0, -1)))[0] == INVALID_RECORD
    assert produce(client, topic, make_batch(recs, 2, producer=(7, 0, -5)))[0] == INVALID_RECORD
    assert produce(client, topic, make_batch(recs, 2)) == (NONE_, 0)
    client.close()
    assert end_offset(broker, topic) == 2


def test_zstd_bomb_on_a_compacted_topic_is_refused_without_stalling_others(broker, compacted):
    bomb = zstd_bomb()
    assert len(bomb) < 4096
    client = RawClient(broker.host, broker.port, timeout=60)
    with Prober(broker) as prober:
        started = time.perf_counter()
        answers = [produce(client, compacted, bomb)[0] for _ in range(5)]
        took = (time.perf_counter() - started) / 5
    client.close()
    print(f"zstd bomb: {took * 1000:.1f} ms per answer; slowest other round trip {prober.slowest * 1000:.1f} ms "
          f"over {len(prober.samples)}")
    assert answers == [MESSAGE_TOO_LARGE] * 5
    assert prober.slowest < STALL_BOUND
    assert end_offset(broker, compacted) == 0


@pytest.mark.parametrize("which", ["normal", "compacted"])
def test_500_mb_of_zeros_in_one_value_is_too_large(broker, which):
    topic = create_topic(broker, f"zeros-{which}", **({"cleanup_policy": "compact"} if which == "compacted" else {}))
    data = zeros_value_batch()
    assert len(data) < 64 << 10
    client = RawClient(broker.host, broker.port, timeout=60)
    with Prober(broker) as prober:
        answers = [produce(client, topic, data)[0] for _ in range(3)]
    client.close()
    print(f"500 MB of zeros ({which}): slowest other round trip {prober.slowest * 1000:.1f} ms")
    assert answers == [MESSAGE_TOO_LARGE] * 3
    assert prober.slowest < STALL_BOUND
    assert end_offset(broker, topic) == 0


@pytest.mark.parametrize("codec", [1, 2, 3, 4, 5, 6, 7])
@pytest.mark.parametrize("which", ["normal", "compacted"])
def test_garbage_compressed_payloads_and_unknown_codecs_are_refused(broker, topic, compacted, codec, which):
    name = topic if which == "normal" else compacted
    before = end_offset(broker, name)
    client = RawClient(broker.host, broker.port)
    assert produce(client, name, garbage_batch(codec))[0] == CORRUPT_MESSAGE
    error, _ = produce(client, name, make_batch(b"".join(record(i) for i in range(2)), 2))  # connection still fine
    client.close()
    assert error == NONE_
    assert end_offset(broker, name) == before + 2


def test_valid_compressed_batches_of_every_codec_are_accepted(broker, compacted):
    recs = b"".join(record(i, key=b"key%d" % i, value=b"value" * i) for i in range(20))
    payloads = {1: gzip.compress(recs), 2: bytes(cramjam.snappy.compress_raw(recs)), 3: lz4.frame.compress(recs),
                4: zstandard.ZstdCompressor().compress(recs), 0: recs}
    client = RawClient(broker.host, broker.port)
    before = end_offset(broker, compacted)
    for codec, payload in payloads.items():
        assert produce(client, compacted, make_batch(payload, 20, codec=codec))[0] == NONE_, codec
    client.close()
    assert end_offset(broker, compacted) == before + 100


def test_a_heavy_valid_batch_is_checked_off_the_event_loop(broker, compacted):
    """~100,000 keyed records in one uncompressed 1 MB batch: every one is walked, in a worker thread."""
    recs = b""
    count = 0
    while len(recs) < 1_000_000:
        recs += record(count, key=b"k", value=None)
        count += 1
    data = make_batch(recs, count)
    client = RawClient(broker.host, broker.port, timeout=60)
    before = end_offset(broker, compacted)
    with Prober(broker) as prober:
        started = time.perf_counter()
        answers = [produce(client, compacted, data)[0] for _ in range(3)]
        took = (time.perf_counter() - started) / 3
    client.close()
    print(f"{count:,} records in one batch: {took * 1000:.0f} ms per answer; slowest other round trip "
          f"{prober.slowest * 1000:.1f} ms")
    assert answers == [NONE_] * 3
    assert prober.slowest < STALL_BOUND
    assert end_offset(broker, compacted) == before + 3 * count


def produce_frame(correlation: int, topic: str, records: bytes) -> bytes:
    buf = io.BytesIO()
    entity_writer(load_request_schema(0, 7))(buf, produce_request(topic, records))
    payload = struct.pack(">hhih", 0, 7, correlation, -1) + buf.getvalue()
    return struct.pack(">i", len(payload)) + payload


def test_pipelined_requests_keep_their_order_across_inline_and_worker_checks(broker):
    """Big compressed batches go to the worker pool, small ones are checked inline: answers and offsets still
    follow the order of the requests on the connection."""
    topic = create_topic(broker, "order")
    recs = b"".join(record(i, value=b"x" * 1000) for i in range(100))  # 100 KB: over the inline budget
    big = make_batch(zstandard.ZstdCompressor().compress(recs), 100, codec=4)
    small = make_batch(record(0), 1)
    client = RawClient(broker.host, broker.port, timeout=60)
    client.send_bytes(b"".join(produce_frame(correlation, topic, data) for correlation, data
                               in enumerate([big, small, big, small, small, big], start=1)))
    answers = []
    for _ in range(6):
        frame = client.recv_frame()
        body, _ = entity_reader(load_response_schema(0, 7))(frame, 4)
        part = body.responses[0].partition_responses[0]
        answers.append((struct.unpack_from(">i", frame)[0], part.error_code.value, part.base_offset))
    client.close()
    assert answers == [(1, 0, 0), (2, 0, 100), (3, 0, 101), (4, 0, 201), (5, 0, 202), (6, 0, 203)]


# ---- ListOffsets --------------------------------------------------------------------------------------------------
def test_list_offsets_by_timestamp_answers_from_the_records(broker):
    topic = create_topic(broker, "times")
    client = RawClient(broker.host, broker.port)
    for i in range(3):  # offsets 10i .. 10i+9, timestamps BASE_TS + 1000i + 0..9, zstd-compressed
        recs = b"".join(record(j) for j in range(10))
        assert produce(client, topic, make_batch(zstandard.ZstdCompressor().compress(recs), 10, codec=4,
                                                 base_ts=BASE_TS + 1000 * i))[0] == NONE_
    assert list_offsets(client, topic, BASE_TS + 1005) == (NONE_, BASE_TS + 1005, 15)
    assert list_offsets(client, topic, BASE_TS + 1010) == (NONE_, BASE_TS + 2000, 20)
    assert list_offsets(client, topic, BASE_TS) == (NONE_, BASE_TS, 0)
    assert list_offsets(client, topic, BASE_TS + 9999) == (NONE_, -1, -1)
    assert list_offsets(client, topic, -3) == (NONE_, BASE_TS + 2009, 29)  # max timestamp
    assert list_offsets(client, topic, -1)[2] == 30
    client.close()


def _inject(broker, topic: str, data: bytes) -> None:
    """Append ``data`` (whole batches, offsets set) to the partition's log while the broker is down, and make the
    next start recover that segment: the way a hostile batch stored by an older broker looks."""
    broker.stop()
    part = broker.log_dir / f"{topic}-0"
    last = sorted(part.glob("*.log"))[-1]
    with open(last, "ab") as f:
        f.write(data)
    (broker.log_dir / ".kafka_cleanshutdown").unlink(missing_ok=True)
    broker.start()


def test_list_offsets_on_stored_hostile_batches_answers_an_error_and_never_stalls(fresh_broker):
    broker = fresh_broker().start()
    topic = create_topic(broker, "stored")
    client = RawClient(broker.host, broker.port)
    assert produce(client, topic, make_batch(b"".join(record(i) for i in range(3)), 3)) == (NONE_, 0)
    client.close()
    bomb_ts, garbage_ts = BASE_TS + 10_000, BASE_TS + 20_000
    garbage = make_batch(b"\x28\xb5\x2f\xfd" + os.urandom(200), 2, codec=4, base_offset=4, base_ts=garbage_ts)
    _inject(broker, topic, zeros_value_batch(base_offset=3, base_ts=bomb_ts) + garbage)
    client = RawClient(broker.host, broker.port, timeout=60)
    assert list_offsets(client, topic, -1)[2] == 6
    with Prober(broker) as prober:
        answers = [list_offsets(client, topic, bomb_ts)[0] for _ in range(3)]
    print(f"ListOffsets on a stored 500 MB-of-zeros batch: slowest other round trip {prober.slowest * 1000:.1f} ms")
    assert answers == [CORRUPT_MESSAGE] * 3
    assert prober.slowest < STALL_BOUND
    assert list_offsets(client, topic, garbage_ts)[0] == CORRUPT_MESSAGE
    assert list_offsets(client, topic, -3)[0] == CORRUPT_MESSAGE  # the max timestamp is in the garbage batch
    assert list_offsets(client, topic, BASE_TS + 1) == (NONE_, BASE_TS + 1, 1)  # the same connection, still fine
    client.close()
    assert "Traceback" not in broker.log_text()
