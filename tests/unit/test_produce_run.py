"""A run of unbatched Produce requests handled as one (broker.handlers.produce_run): the run's answers are the ones
each request would get alone, offsets in request order, one write; a frame that differs or fails a check ends the
run and is left for the listener to handle alone. A real partition log under a temporary directory; the broker
around it is a fake (unit)."""

from __future__ import annotations

import datetime
import io
import struct
from collections import Counter

import pytest
from kio.serial import entity_writer
from rawclient import request_module

from broker.handlers import produce_run
from broker.log.log import LogConfig, PartitionLog
from broker.protocol import batch_builder, produce_response, validation
from broker.protocol.messages import ErrorCode

pytestmark = [pytest.mark.unit, pytest.mark.timeout(30)]


class _Metrics:
    def __init__(self):
        self.requests = Counter()
        self.messages = Counter()

    def request(self, api, seconds, count=1):
        self.requests[api] += count

    def produced(self, topic, messages, nbytes):
        self.messages[topic] += messages


class _Topic:
    partitions = 1
    configs: dict = {}


class _Cleaner:
    def compacted(self, topic):
        return False


class _Broker:
    def __init__(self, plog):
        self.plog = plog
        self.topics = {"t": _Topic(), "u": _Topic()}
        self.cluster = None
        self.cleaner = _Cleaner()
        self.metrics = _Metrics()
        self.notified = 0

    def leader_log(self, topic, index):
        return ErrorCode.none, self.plog

    def notify_append(self, topic, index):
        self.notified += 1


class _Listener:
    max_request_bytes = 100 * 1024 * 1024

    def __init__(self, broker):
        self.broker = broker


def _batch(value: bytes, records: int = 1) -> bytes:
    return batch_builder.build_batch([batch_builder.encode_record(i, None, value) for i in range(records)],
                                     timestamp_ms=1_700_000_000_000)


def _frame(correlation_id: int, batch: bytes, topic: str = "t", acks: int = 1) -> bytes:
    """A Produce v9 frame as librdkafka's unbatched producer sends it, size prefix included."""
    m = request_module(0, 9)
    request = m.ProduceRequest(transactional_id=None, acks=acks, timeout=datetime.timedelta(seconds=5),
                               topic_data=(m.TopicProduceData(name=topic, partition_data=(
                                   m.PartitionProduceData(index=0, records=batch),)),))
    body = io.BytesIO()
    entity_writer(type(request))(body, request)
    payload = struct.pack(">hhih", 0, 9, correlation_id, 7) + b"rdkafka" + b"\x00" + body.getvalue()
    return struct.pack(">i", len(payload)) + payload


def _setup(tmp_path, **config):
    plog = PartitionLog(str(tmp_path / "t-0"), "t", 0, LogConfig(**config))
    broker = _Broker(plog)
    return plog, broker, _Listener(broker)


def _answered(answer: bytes) -> tuple[int, int, int]:
    """(correlation id, error code, base offset) of a one-partition Produce v9 answer without an error message, as
    the general encoder writes it."""
    expected = {produce_response.encode(9, cid, [("t", [[0, 0, base, 0, None]])]): (cid, 0, base)
                for cid in range(64) for base in range(80)}
    assert answer in expected, answer
    return expected[answer]


def _stored(plog) -> list[bytes]:
    region = plog.read(0, 1 << 20)
    data = region.read() if region is not None else b""
    values, pos = [], 0
    while pos < len(data):
        length = struct.unpack_from(">i", data, pos + 8)[0] + 12
        values.append(bytes(data[pos:pos + length]))
        pos += length
    return values


def test_a_run_appends_every_request_in_order_and_answers_each(tmp_path):
    plog, broker, listener = _setup(tmp_path)
    batches = [_batch(b"v%d" % i) for i in range(5)]
    data = b"".join(_frame(10 + i, b) for i, b in enumerate(batches))
    answers, pos = produce_run.answer(listener, data, 0, None)
    assert pos == len(data)
    assert [_answered(a) for a in answers] == [(10 + i, 0, i) for i in range(5)]
    assert plog.log_end_offset == 5 and plog.high_watermark == 5
    stored = _stored(plog)
    assert [s[16:] for s in stored] == [b[16:] for b in batches]  # the bytes as sent, offsets patched
    assert [struct.unpack_from(">q", s)[0] for s in stored] == list(range(5))
    assert broker.metrics.requests["Produce"] == 5 and broker.metrics.messages["t"] == 5 and broker.notified == 1


def test_a_corrupt_batch_ends_the_run_before_it(tmp_path):
    plog, broker, listener = _setup(tmp_path)
    bad = bytearray(_batch(b"bad"))
    bad[-1] ^= 0xFF  # the CRC no longer matches
    frames = [_frame(1, _batch(b"a")), _frame(2, _batch(b"b")), _frame(3, bytes(bad)), _frame(4, _batch(b"c"))]
    data = b"".join(frames)
    answers, pos = produce_run.answer(listener, data, 0, None)
    assert [_answered(a)[:2] for a in answers] == [(1, 0), (2, 0)]
    assert pos == len(frames[0]) + len(frames[1])  # the corrupt frame is left for the listener
    assert plog.log_end_offset == 2
    assert produce_run.answer(listener, data, pos, None) is None  # it starts no run of its own


def test_a_frame_for_another_topic_ends_the_run(tmp_path):
    plog, broker, listener = _setup(tmp_path)
    frames = [_frame(1, _batch(b"a")), _frame(2, _batch(b"b")), _frame(3, _batch(b"c"), topic="u")]
    answers, pos = produce_run.answer(listener, b"".join(frames), 0, None)
    assert len(answers) == 2 and pos == len(frames[0]) + len(frames[1])


def test_values_of_other_lengths_join_the_run(tmp_path):
    plog, broker, listener = _setup(tmp_path)
    values = [b"x" * n for n in (1, 100, 130, 300, 7)]  # record-set lengths on both sides of a 2-byte varint
    data = b"".join(_frame(i, _batch(v)) for i, v in enumerate(values))
    answers, pos = produce_run.answer(listener, data, 0, None)
    assert len(answers) == 5 and pos == len(data)
    assert [s[-len(v) - 1:-1] for s, v in zip(_stored(plog), values)] == values  # value, then 0 headers


def test_acks_0_appends_and_answers_nothing(tmp_path):
    plog, broker, listener = _setup(tmp_path)
    data = b"".join(_frame(i, _batch(b"z"), acks=0) for i in range(3))
    answers, pos = produce_run.answer(listener, data, 0, None)
    assert answers == [] and pos == len(data) and plog.log_end_offset == 3
    assert broker.metrics.requests["Produce"] == 3


def test_what_is_not_an_unbatched_run_is_left_alone(tmp_path):
    plog, broker, listener = _setup(tmp_path)
    one = _frame(1, _batch(b"a"))
    assert produce_run.answer(listener, one, 0, None) is None  # a single frame
    assert produce_run.answer(listener, one + one[:20], 0, None) is None  # the next frame is not whole
    acks_all = b"".join(_frame(i, _batch(b"a"), acks=-1) for i in range(3))
    assert produce_run.answer(listener, acks_all, 0, None) is None
    batched = b"".join(_frame(i, _batch(b"a", validation.KERNEL_MIN_RECORDS)) for i in range(3))
    assert produce_run.answer(listener, batched, 0, None) is None
    assert plog.log_end_offset == 0 and broker.metrics.requests["Produce"] == 0


def test_a_run_holds_at_most_run_max_requests(tmp_path):
    plog, broker, listener = _setup(tmp_path)
    data = b"".join(_frame(i % 64, _batch(b"m")) for i in range(produce_run.RUN_MAX + 10))
    answers, pos = produce_run.answer(listener, data, 0, None)
    assert len(answers) == produce_run.RUN_MAX
    more, end = produce_run.answer(listener, data, pos, None)
    assert len(more) == 10 and end == len(data) and plog.log_end_offset == produce_run.RUN_MAX + 10


def test_a_refused_write_answers_every_request_of_the_run_with_a_storage_error(tmp_path, monkeypatch):
    plog, broker, listener = _setup(tmp_path)

    def refuse(data, summary):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(plog, "append", refuse)
    data = b"".join(_frame(i, _batch(b"a")) for i in range(3))
    answers, pos = produce_run.answer(listener, data, 0, None)
    assert pos == len(data) and plog.log_end_offset == 0
    assert answers == [produce_response.encode(9, i, [("t", [[0, ErrorCode.kafka_storage_error.value, -1, 0,
                                                              "[Errno 28] No space left on device"]])])
                       for i in range(3)]


def test_an_idempotent_producers_frames_are_left_alone_before_anything_is_decoded(tmp_path, monkeypatch):
    plog, broker, listener = _setup(tmp_path)
    idempotent = [batch_builder.build_batch([batch_builder.encode_record(0, None, b"i")], timestamp_ms=1,
                                            producer_id=7, producer_epoch=0, base_sequence=i) for i in range(3)]
    monkeypatch.setattr(produce_run.codec, "read_header", lambda *a: pytest.fail("decoded"))
    assert produce_run.answer(listener, b"".join(_frame(i, b) for i, b in enumerate(idempotent)), 0, None) is None


def _all_runs(listener, data: bytes) -> int:
    """Hand ``data`` to produce_run until it is used up (every frame joins a run); the number of runs."""
    runs, pos = 0, 0
    while pos < len(data):
        answers, pos = produce_run.answer(listener, data, pos, None)
        runs += 1
    return runs


def test_the_log_is_laid_out_as_if_the_requests_came_one_by_one(tmp_path):
    """Segments roll where they would for each request alone, and every batch gets its own index entries."""
    batch = _batch(b"s" * 50)
    per_segment = 300 // len(batch)  # batches a 300-byte segment takes before the next one rolls it
    plog, broker, listener = _setup(tmp_path, segment_bytes=300, index_interval_bytes=0)
    data = b"".join(_frame(i, batch) for i in range(per_segment * 5))
    assert _all_runs(listener, data) == 5  # a run ends before the request that would roll the segment
    assert [s.size for s in plog.segments] == [per_segment * len(batch)] * 5
    assert [len(s.offset_index) for s in plog.segments] == [per_segment] * 5  # index.interval.bytes=0: each batch


def test_a_frame_over_frame_max_ends_the_run(tmp_path):
    plog, broker, listener = _setup(tmp_path)
    frames = [_frame(1, _batch(b"a")), _frame(2, _batch(b"b")), _frame(3, _batch(b"c" * produce_run.FRAME_MAX))]
    answers, pos = produce_run.answer(listener, b"".join(frames), 0, None)
    assert len(answers) == 2 and pos == len(frames[0]) + len(frames[1])


def test_a_topic_with_flush_messages_is_left_alone(tmp_path):
    plog, broker, listener = _setup(tmp_path, flush_interval_messages=3)
    assert produce_run.answer(listener, b"".join(_frame(i, _batch(b"f")) for i in range(5)), 0, None) is None
