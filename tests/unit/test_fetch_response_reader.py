"""The replica fetcher's hand decoder of Fetch v12 responses (:func:`fetch_response.decode_v12`) against kio's
reader on the frames kio's writer makes (tagged fields included), against logbus's own encoder, and on broken
frames: every field equal, records zero-copy views of the frame, and nothing but MalformedRequest on bad input."""

from __future__ import annotations

import io
import sys

import pytest
from broker.protocol import codec, fetch_response, records
from broker.protocol.batch_builder import build_batch
from broker.protocol.guard import MalformedRequest
from hypothesis import given, settings
from hypothesis import strategies as st

pytestmark = [pytest.mark.unit, pytest.mark.timeout(120)]

KIO = sys.modules[codec.response_type(1, 12).__module__]
I32, I64 = st.integers(-(2**31), 2**31 - 1), st.integers(-(2**63), 2**63 - 1)


def kio_frame(correlation_id: int, response) -> bytes:
    """A response frame without its size prefix, as kio writes it."""
    return codec.encode_response(1, 12, correlation_id, response)[4:]


@st.composite
def responses(draw):
    def partition():
        return KIO.PartitionData(
            partition_index=draw(I32), error_code=draw(st.sampled_from(list(KIO.ErrorCode)[:20])),
            high_watermark=draw(I64), last_stable_offset=draw(I64), log_start_offset=draw(I64),
            # non-default tagged fields: kio writes them, the decoder must step over them
            diverging_epoch=KIO.EpochEndOffset(epoch=draw(I32), end_offset=draw(I64)),
            current_leader=KIO.LeaderIdAndEpoch(leader_id=draw(I32), leader_epoch=draw(I32)),
            snapshot_id=KIO.SnapshotId(end_offset=draw(I64), epoch=draw(I32)),
            aborted_transactions=draw(st.none() | st.lists(st.builds(
                KIO.AbortedTransaction, producer_id=I64, first_offset=I64), max_size=3).map(tuple)),
            preferred_read_replica=draw(I32), records=draw(st.none() | st.binary(max_size=300)))

    topics = tuple(KIO.FetchableTopicResponse(topic=draw(st.text(max_size=20)),
                                              partitions=tuple(partition() for _ in range(draw(st.integers(0, 3)))))
                   for _ in range(draw(st.integers(0, 3))))
    import datetime
    return KIO.FetchResponse(throttle_time=datetime.timedelta(milliseconds=draw(st.integers(0, 10**6))),
                             error_code=draw(st.sampled_from(list(KIO.ErrorCode)[:5])), session_id=draw(I32),
                             responses=topics)


def kio_read(frame: bytes) -> tuple[int, object]:
    """kio's own reader (without the guard's walk, which refuses the tagged structs kio writes)."""
    correlation_id = int.from_bytes(frame[:4], "big", signed=True)
    assert frame[4] == 0  # the response header's empty tag section
    body, _ = codec._response_reader(1, 12)(memoryview(frame).toreadonly(), 5)  # noqa: SLF001
    return correlation_id, body


def same(mine: fetch_response.FetchedResponse, theirs) -> None:
    assert mine.error_code == theirs.error_code and mine.session_id == theirs.session_id
    assert len(mine.responses) == len(theirs.responses)
    for t_mine, t_theirs in zip(mine.responses, theirs.responses):
        assert t_mine.topic == t_theirs.topic and len(t_mine.partitions) == len(t_theirs.partitions)
        for p, q in zip(t_mine.partitions, t_theirs.partitions):
            assert (p.partition_index, p.error_code, p.high_watermark, p.last_stable_offset, p.log_start_offset,
                    p.preferred_read_replica) == (q.partition_index, q.error_code, q.high_watermark,
                                                  q.last_stable_offset, q.log_start_offset, q.preferred_read_replica)
            expected = None if q.aborted_transactions is None else \
                [(a.producer_id, a.first_offset) for a in q.aborted_transactions]
            assert p.aborted_transactions == expected
            assert (None if p.records is None else bytes(p.records)) == q.records


@settings(max_examples=300, deadline=None)
@given(responses(), I32)
def test_equals_kio_on_what_kio_writes(response, correlation_id):
    frame = kio_frame(correlation_id, response)
    got_id, mine = fetch_response.decode_v12(frame)
    their_id, theirs = kio_read(frame)
    assert got_id == their_id == correlation_id
    same(mine, theirs)


def test_records_are_views_of_the_frame_not_copies():
    data = bytes(range(256)) * 4
    parts = fetch_response.encode(12, 7, [("t", [fetch_response.PartitionData(0, 0, 10, 10, 0, data, [(5, 1)])])])
    frame = bytearray(b"".join(parts)[4:])
    _, response = fetch_response.decode_v12(frame)
    records = response.responses[0].partitions[0].records
    assert isinstance(records, memoryview) and records.obj is frame and bytes(records) == data
    assert response.responses[0].partitions[0].aborted_transactions == [(5, 1)]


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.text(max_size=10), st.lists(st.tuples(I32, st.binary(max_size=200)), max_size=3)),
                max_size=3), I32)
def test_reads_what_logbus_encodes(topics, correlation_id):
    encoded = [(name, [fetch_response.PartitionData(i, 0, 5, 4, 1, data) for i, data in ps]) for name, ps in topics]
    frame = b"".join(fetch_response.encode(12, correlation_id, encoded))[4:]
    got_id, mine = fetch_response.decode_v12(frame)
    their_id, theirs = codec.decode_response(1, 12, memoryview(frame).toreadonly())
    assert got_id == correlation_id == their_id
    same(mine, theirs)


@settings(max_examples=200, deadline=None)
@given(responses(), st.data())
def test_a_cut_or_changed_frame_is_malformed_or_decodes(response, data):
    frame = bytearray(kio_frame(1, response))
    cut = data.draw(st.integers(0, max(len(frame) - 1, 0)))
    with pytest.raises(MalformedRequest):
        fetch_response.decode_v12(bytes(frame[:cut]))
    if frame:
        at = data.draw(st.integers(0, len(frame) - 1))
        frame[at] ^= data.draw(st.integers(1, 255))
        try:
            fetch_response.decode_v12(bytes(frame))
        except MalformedRequest:
            pass  # anything else (IndexError, ValueError, a huge allocation) fails the test


def test_unknown_tagged_fields_are_skipped():
    parts = fetch_response.encode(12, 3, [("t", [fetch_response.PartitionData(2, 0, 9, 9, 0, b"abc")])])
    frame = b"".join(parts)[4:]
    # the partition's own tag section (the byte before the topic's and the body's): one field, tag 7, 2 bytes
    assert frame.endswith(b"abc\x00\x00\x00")
    tagged = frame[:-3] + b"\x01\x07\x02zz" + b"\x00\x00"
    _, response = fetch_response.decode_v12(tagged)
    assert bytes(response.responses[0].partitions[0].records) == b"abc"
    with pytest.raises(MalformedRequest):
        fetch_response.decode_v12(frame[:-3] + b"\x01\x07\x09zz")  # a field longer than the frame


def test_kio_writer_is_what_the_test_thinks():
    """The kio frames above really carry tagged fields (else the tag-skipping paths would go untested)."""
    response = KIO.FetchResponse(throttle_time=__import__("datetime").timedelta(0), error_code=KIO.ErrorCode.none,
                                 session_id=0, responses=(KIO.FetchableTopicResponse(topic="t", partitions=(
                                     KIO.PartitionData(partition_index=0, error_code=KIO.ErrorCode.none,
                                                       high_watermark=1, last_stable_offset=1, log_start_offset=0,
                                                       diverging_epoch=KIO.EpochEndOffset(epoch=3, end_offset=4),
                                                       aborted_transactions=None, preferred_read_replica=-1,
                                                       records=b"r"),)),))
    buf = io.BytesIO()
    codec._writer(1, 12)(buf, response)  # noqa: SLF001
    assert b"\x01\x00\x0d" in buf.getvalue()  # one tagged field, tag 0 (diverging_epoch), 13 bytes
    _, mine = fetch_response.decode_v12(kio_frame(9, response))
    assert bytes(mine.responses[0].partitions[0].records) == b"r"


def _tags(n: int) -> bytes:
    """A tag section of ``n`` unknown fields (tags 20, 21, ...; 3 bytes each)."""
    return bytes([n]) + b"".join(bytes([20 + i, 3]) + b"xyz" for i in range(n))


def _frame(tags: int, aborted: list | None, data: bytes | None) -> bytes:
    """A Fetch v12 response of one topic and one partition, built field by field, with ``tags`` unknown tagged
    fields in every tag section: the header's, each aborted transaction's, the partition's, the topic's, the
    body's (the encoders above write most of them empty)."""
    import struct
    out = struct.pack(">i", 42) + _tags(tags) + struct.pack(">ihi", 5, 0, 77)
    out += b"\x02" + b"\x02t" + b"\x02"  # one topic "t", one partition
    out += struct.pack(">ihqqq", 3, 0, 100, 90, 7)
    if aborted is None:
        out += b"\x00"
    else:
        out += bytes([len(aborted) + 1])
        for producer_id, first in aborted:
            out += struct.pack(">qq", producer_id, first) + _tags(tags)
    out += struct.pack(">i", -1)
    out += b"\x00" if data is None else bytes([len(data) + 1]) + data
    return out + _tags(tags) + _tags(tags) + _tags(tags)  # partition, topic, body


@pytest.mark.parametrize("tags", [0, 1, 2])
@pytest.mark.parametrize("aborted", [None, [], [(9, 4), (10, 6)]])
@pytest.mark.parametrize("data", [None, b"", b"batch-bytes"])
def test_tag_sections_at_every_level(tags, aborted, data):
    correlation_id, response = fetch_response.decode_v12(_frame(tags, aborted, data))
    assert correlation_id == 42
    assert (response.throttle_time_ms, response.error_code, response.session_id) == (5, 0, 77)
    (topic,) = response.responses
    (p,) = topic.partitions
    assert topic.topic == "t"
    assert (p.partition_index, p.error_code, p.high_watermark, p.last_stable_offset, p.log_start_offset,
            p.preferred_read_replica) == (3, 0, 100, 90, 7, -1)
    assert p.aborted_transactions == (None if aborted is None else list(aborted))
    assert (None if p.records is None else bytes(p.records)) == data
    if tags == 0 and data is not None:  # kio reads the same frame alike
        _, theirs = kio_read(_frame(0, aborted, data))
        same(response, theirs)


def test_a_batch_length_no_batch_can_have_ends_the_whole_batches():
    """A fetched records section whose second batch claims a negative or too short length: the first batch is
    handed on, the rest is not, and the scan ends (a negative length used to make it stand still: a follower's
    event loop hung on such a response)."""
    import struct
    batch = build_batch([b"v"], timestamp_ms=1)
    assert records.whole_batches_length(batch + batch) == 2 * len(batch)
    for bad_length in (-12, -13, -1, 0, 48):
        broken = batch + struct.pack(">qi", 0, bad_length) + bytes(64)
        assert records.whole_batches_length(broken) == len(batch)
