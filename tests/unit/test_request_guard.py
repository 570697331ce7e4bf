"""The request guard: no declared length or count may reach an allocation bigger than the frame (issue 24, #1/#6).

Frames are hand-made bytes (the shapes a hostile client sends) and valid requests encoded by kio's writers.
"""

import datetime
import struct

import pytest
from broker.protocol import codec, guard
from broker.protocol.codec import MalformedRequest
from rawclient import request_module

pytestmark = [pytest.mark.unit, pytest.mark.timeout(30)]

HUGE_VARINT = "ffffffff0f"  # compact count 2^32 - 1, i.e. 2^32 - 2 elements


def header(api_key: int, version: int) -> str:
    """Request header v2 (flexible): key, version, correlation id 1, null client id, no tagged fields."""
    return struct.pack(">hhih", api_key, version, 1, -1).hex() + "00"


# The findings: one huge compact array count in the first collection of each request.
REPRODUCERS = {
    "Metadata v12 (the 21-byte frame)": "0003000c0000000100017800" + HUGE_VARINT,
    "JoinGroup v7": header(11, 7) + "0267" + "00002710" + "00002710" + "01" + "00" + "09" + b"consumer".hex()
    + HUGE_VARINT,
    "CreateTopics v5": header(19, 5) + HUGE_VARINT,
    "ListGroups v4": header(16, 4) + HUGE_VARINT,
    "OffsetFetch v6": header(9, 6) + "0267" + HUGE_VARINT,
    "OffsetForLeaderEpoch v4": header(23, 4) + "ffffffff" + HUGE_VARINT,
}


def decode(hex_payload: str):
    payload = bytes.fromhex(hex_payload)
    return codec.decode_body(codec.read_header(payload), payload)


@pytest.mark.parametrize("name", REPRODUCERS)
def test_a_huge_collection_count_is_refused_before_any_allocation(name):
    with pytest.raises(MalformedRequest, match="collection of size 4294967294, but there are only"):
        decode(REPRODUCERS[name])


def produce(version=3, records=b"x" * 10, topic_data=None):
    m = request_module(0, version)
    data = topic_data if topic_data is not None else (
        m.TopicProduceData(name="t", partition_data=(m.PartitionProduceData(index=0, records=records),)),)
    return m.ProduceRequest(transactional_id=None, acks=1, timeout=datetime.timedelta(seconds=5),
                            topic_data=data)


def encoded(api_key, version, body) -> bytes:
    return codec.encode_request(api_key, version, 7, "guard-test", body)[4:]


def test_valid_requests_pass_and_decode():
    for version in (3, 7, 9):
        payload = encoded(0, version, produce(version, records=b"r" * 5000))
        request = codec.decode_body(codec.read_header(payload), payload)
        assert request.topic_data[0].partition_data[0].records == b"r" * 5000
    m = request_module(3, 12)
    payload = encoded(3, 12, m.MetadataRequest(topics=None, allow_auto_topic_creation=True,
                                               include_topic_authorized_operations=False))
    assert codec.decode_body(codec.read_header(payload), payload).topics is None  # nullable: all topics


def test_legacy_bytes_and_string_lengths_past_the_frame_are_refused():
    payload = bytearray(encoded(0, 3, produce(3, records=b"abcd")))
    # records length (int32) sits right before the 4 record bytes at the end of the frame
    struct.pack_into(">i", payload, len(payload) - 8, 2**31 - 1)
    with pytest.raises(MalformedRequest, match="records: length 2147483647 but only 4 bytes remain"):
        decode(payload.hex())
    payload = bytearray(encoded(0, 3, produce(3)))
    body = codec.read_header(payload).body_offset
    struct.pack_into(">h", payload, body, 30000)  # transactional_id: a 30,000-byte string in a short frame
    with pytest.raises(MalformedRequest, match="transactional_id: length 30000"):
        decode(payload.hex())


def test_a_null_where_the_schema_allows_none_is_refused():
    payload = bytearray(encoded(0, 3, produce(3)))
    body = codec.read_header(payload).body_offset
    # transactional_id null (int16 -1), acks, timeout, then topic_data: an array that may not be null
    struct.pack_into(">i", payload, body + 2 + 2 + 4, -1)
    with pytest.raises(MalformedRequest, match="topic_data: null or negative array"):
        decode(bytes(payload[: body + 12]).hex())
    # Produce's records may be null in Kafka's schema: that passes, and the handler answers INVALID_RECORD
    assert decode(encoded(0, 3, produce(3, records=None)).hex()).topic_data[0].partition_data[0].records is None


def test_tagged_fields_are_bounded():
    payload = encoded(3, 12, request_module(3, 12).MetadataRequest(
        topics=(), allow_auto_topic_creation=True, include_topic_authorized_operations=False))
    assert payload[-1] == 0  # the body's empty tagged-field section
    with pytest.raises(MalformedRequest, match="tagged fields but only"):
        decode(payload[:-1].hex() + HUGE_VARINT)
    with pytest.raises(MalformedRequest, match="tagged field 5: size"):
        decode(payload[:-1].hex() + "01" + "05" + "7f" + "00")  # one tag claiming 127 bytes, 1 present
    with pytest.raises(MalformedRequest, match="longer than 5 bytes"):
        decode(payload[:-1].hex() + "ffffffffffff01")


def test_every_request_schema_compiles():
    """Every (key, version) kio knows has a walker: a schema shape the guard cannot walk fails here."""
    compiled = 0
    for api_key in range(100):
        for version in range(20):
            try:
                cls = codec.request_type(api_key, version)
            except Exception:
                continue
            guard._entity(cls)
            compiled += 1
    assert compiled > 250


def test_unknown_tagged_fields_are_skipped_as_kip_482_says():
    """A tag the schema does not know is cut out before kio (which refuses them); known ones are kept."""
    request = decode("0003000c0000000100017800" + "00" + "00" + "00" + "02" + "0503aabbcc" + "0900")
    assert request.topics is None and request.allow_auto_topic_creation is False
    request = decode("00120003000000010001780002610231" + "01" + "0501ff")
    assert request.client_software_name == "a" and request.client_software_version == "1"
