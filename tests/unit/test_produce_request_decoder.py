"""The hand decoder of Produce requests (broker.protocol.produce_request) against the generic path it replaces on
the hot path: the guard's schema walk, then kio's reader. Valid requests of every version decode to the same
fields; broken ones (truncated anywhere, a byte changed anywhere) are refused where the generic path refuses
them and decode alike where it accepts them."""

import datetime

import pytest
from broker.protocol import codec, guard, produce_request
from broker.protocol.codec import MalformedRequest
from hypothesis import given, settings
from hypothesis import strategies as st
from rawclient import request_module

pytestmark = [pytest.mark.unit, pytest.mark.timeout(120)]


def generic(header, payload):
    """What codec.decode_body did for Produce before the hand decoder: guard.check, then kio."""
    checked = guard.check(codec.request_type(0, header.api_version), payload, header.body_offset)
    try:
        return codec._reader(0, header.api_version)(checked, header.body_offset)[0]
    except Exception as exc:
        raise MalformedRequest(str(exc)) from exc


def fields(request) -> tuple:
    return (request.transactional_id, request.acks, request.timeout // datetime.timedelta(milliseconds=1)
            if isinstance(request.timeout, datetime.timedelta) else request.timeout,
            [(t.name, [(p.index, None if p.records is None else bytes(p.records)) for p in t.partition_data])
             for t in request.topic_data])


def outcome(decoder, header, payload):
    try:
        return "ok", fields(decoder(header, payload))
    except MalformedRequest:
        return "refused", None


def hand(header, payload):
    return codec.decode_body(header, payload)


names = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=0, max_size=12)
partitions = st.lists(st.tuples(st.integers(-2**31, 2**31 - 1), st.none() | st.binary(max_size=300)), max_size=3)
requests = st.tuples(st.integers(3, 9), st.none() | names, st.integers(-1, 1), st.integers(0, 2**31 - 1),
                     st.lists(st.tuples(names, partitions), max_size=3))


def encode(version, txn_id, acks, timeout, topics) -> bytes:
    m = request_module(0, version)
    body = m.ProduceRequest(
        transactional_id=txn_id, acks=acks, timeout=datetime.timedelta(milliseconds=timeout),
        topic_data=tuple(m.TopicProduceData(name=name, partition_data=tuple(
            m.PartitionProduceData(index=i, records=r) for i, r in parts)) for name, parts in topics))
    return codec.encode_request(0, version, 7, "decoder-test", body)[4:]


@settings(max_examples=300, deadline=None)
@given(requests)
def test_valid_requests_decode_as_the_generic_path_does(spec):
    payload = encode(*spec)
    header = codec.read_header(payload)
    assert type(hand(header, payload)) is produce_request.ProduceRequest  # the hand decoder did it
    assert outcome(hand, header, payload) == outcome(generic, header, payload) == ("ok", fields(
        generic(header, payload)))
    view = memoryview(bytearray(payload)).toreadonly()  # the listener's large frames: zero-copy records
    assert outcome(hand, header, view) == outcome(generic, header, payload)


@settings(max_examples=150, deadline=None)
@given(requests, st.data())
def test_truncated_requests_are_refused_like_the_generic_path(spec, data):
    payload = encode(*spec)
    header = codec.read_header(payload)
    cut = data.draw(st.integers(header.body_offset, len(payload) - 1))
    assert outcome(hand, header, payload[:cut]) == outcome(generic, header, payload[:cut]) == ("refused", None)


@settings(max_examples=400, deadline=None)
@given(requests, st.data())
def test_a_changed_byte_is_refused_or_accepted_like_the_generic_path(spec, data):
    payload = bytearray(encode(*spec))
    header = codec.read_header(payload)
    at = data.draw(st.integers(header.body_offset, len(payload) - 1))
    payload[at] = data.draw(st.sampled_from([0x00, 0x01, 0x7f, 0x80, 0xfe, 0xff, payload[at] ^ 0x40]))
    payload = bytes(payload)
    assert outcome(hand, header, payload) == outcome(generic, header, payload)


# The hot path's shape (v9, no transactional id, one topic of one partition), which the hand decoder reads
# straight (produce_request._decode_one): names around the one-byte compact length, record sets around the
# one- and two-byte ones.
one_partition = st.tuples(st.just(9), st.none(), st.integers(-1, 1), st.integers(0, 2**31 - 1),
                          st.tuples(st.text(min_size=0, max_size=130), st.tuples(
                              st.integers(-2**31, 2**31 - 1),
                              st.none() | st.binary(max_size=200) | st.integers(16_370, 16_400).map(bytes))
                          ).map(lambda t: [(t[0], [t[1]])]))


@settings(max_examples=300, deadline=None)
@given(one_partition, st.data())
def test_the_one_partition_shape_decodes_and_refuses_like_the_generic_path(spec, data):
    payload = bytearray(encode(*spec))
    header = codec.read_header(payload)
    name, [(_, records)] = spec[4][0]
    taken = produce_request._decode_one(bytes(payload), header.body_offset, len(payload))
    if 0 < len(name.encode()) < 127 and records is not None and len(records) < 16_383:
        assert taken is not None  # the straight decoder took it
    assert outcome(hand, header, bytes(payload)) == outcome(generic, header, bytes(payload))
    view = memoryview(bytes(payload)).toreadonly()  # the listener's large frames
    assert outcome(hand, header, view) == outcome(generic, header, bytes(payload))
    at = data.draw(st.integers(header.body_offset, len(payload) - 1))
    payload[at] = data.draw(st.sampled_from([0x00, 0x01, 0x02, 0x7f, 0x80, 0xfe, 0xff, payload[at] ^ 0x40]))
    assert outcome(hand, header, bytes(payload)) == outcome(generic, header, bytes(payload))
    cut = data.draw(st.integers(header.body_offset, len(payload) - 1))
    assert outcome(hand, header, bytes(payload[:cut])) == outcome(generic, header, bytes(payload[:cut]))


def test_hostile_counts_and_lengths_are_refused_before_any_allocation():
    for version in (3, 9):
        payload = encode(version, None, 1, 1000, [("t", [(0, b"x" * 20)])])
        header = codec.read_header(payload)
        body = header.body_offset
        if version == 9:  # compact: txn id null (00), acks, timeout, then the topics' count as a huge varint
            hostile = payload[:body + 7] + bytes.fromhex("ffffffff0f")
        else:
            hostile = payload[:body + 8] + (2**31 - 1).to_bytes(4, "big")
        with pytest.raises(MalformedRequest, match="tried to allocate a collection of size"):
            codec.decode_body(header, hostile)


present = st.lists(st.tuples(st.integers(-2**31, 2**31 - 1), st.lists(st.binary(max_size=200), min_size=1,
                                                                          max_size=3)), max_size=3)


@settings(max_examples=300, deadline=None)
@given(st.integers(3, 8), st.none() | names, st.integers(-1, 1), st.integers(0, 2**31 - 1),
       st.lists(st.tuples(names, present), max_size=3), st.integers(0, 2**31 - 1))
def test_hand_encoded_frames_are_kios_byte_for_byte(version, txn_id, acks, timeout, topics, correlation):
    """The mirror's Produce frames (encode_parts: record buffers sent as they are) equal kio's encoding."""
    parts = produce_request.encode_parts(version, correlation, "mirror-test", txn_id, acks, timeout, topics)
    m = request_module(0, version)
    body = m.ProduceRequest(
        transactional_id=txn_id, acks=acks, timeout=datetime.timedelta(milliseconds=timeout),
        topic_data=tuple(m.TopicProduceData(name=name, partition_data=tuple(
            m.PartitionProduceData(index=i, records=b"".join(bufs)) for i, bufs in ps)) for name, ps in topics))
    assert b"".join(bytes(p) for p in parts) == codec.encode_request(0, version, correlation, "mirror-test", body)


def test_flexible_versions_are_not_encoded_by_hand():
    with pytest.raises(ValueError):
        produce_request.encode_parts(9, 1, "c", None, -1, 1000, [])
