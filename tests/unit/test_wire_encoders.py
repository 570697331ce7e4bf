"""The hand-written hot-path encoders produce exactly the bytes of kio's generated encoders."""

import datetime
import io

import pytest
from broker.protocol import fetch_response, produce_response
from broker.protocol.messages import build, nested
from kio.index import load_response_schema
from kio.serial import entity_writer

pytestmark = [pytest.mark.unit, pytest.mark.timeout(10)]


def kio_bytes(api_key, version, body):
    cls = load_response_schema(api_key, version)
    buf = io.BytesIO()
    entity_writer(cls)(buf, body)
    return buf.getvalue()


@pytest.mark.parametrize("version", range(3, 10))
def test_produce_response_matches_kio(version):
    topics = [("t1", [(0, 0, 42, 0, None), (1, 2, -1, 5, "CRC-32C mismatch")]), ("t2", [(3, 0, 7, 0, None)])]
    ours = produce_response.encode(version, 99, topics)
    cls = load_response_schema(0, version)
    part_cls, topic_cls = nested(cls, "PartitionProduceResponse"), nested(cls, "TopicProduceResponse")
    body = build(cls, throttle_time=0, responses=tuple(
        build(topic_cls, name=name, partition_responses=tuple(
            build(part_cls, index=i, error_code=e, base_offset=b, log_append_time=None, log_start_offset=s,
                  record_errors=(), error_message=m if version >= 8 else None) for i, e, b, s, m in parts))
        for name, parts in topics))
    header = (99).to_bytes(4, "big") + (b"\x00" if version >= 9 else b"")
    expected = header + kio_bytes(0, version, body)
    assert ours[4:] == expected
    assert int.from_bytes(ours[:4], "big") == len(ours) - 4


@pytest.mark.parametrize("version", range(3, 10))
def test_the_one_partition_produce_response_matches_kio(version):
    """The hot path's answer (one topic, one partition, no message) is framed from a cached template."""
    for name, entry in (("t1", (0, 0, 42, 0, None)), ("Ünïcode-topic", (7, 0, 2**40, 3, None)),
                        ("t1", (1, 6, -1, 5, None)), ("t1", (2, 0, 9, 0, None, 1_700_000_000_000))):
        ours = produce_response.encode(version, 99, [(name, [entry])])
        index, error, base, start, _message, *append_time = entry
        cls = load_response_schema(0, version)
        part_cls, topic_cls = nested(cls, "PartitionProduceResponse"), nested(cls, "TopicProduceResponse")
        body = build(cls, throttle_time=0, responses=(build(topic_cls, name=name, partition_responses=(
            build(part_cls, index=index, error_code=error, base_offset=base,
                  log_append_time=datetime.datetime.fromtimestamp(append_time[0] / 1000, datetime.timezone.utc)
                  if append_time else None, log_start_offset=start, record_errors=(), error_message=None),)),))
        header = (99).to_bytes(4, "big") + (b"\x00" if version >= 9 else b"")
        assert ours[4:] == header + kio_bytes(0, version, body)
        assert int.from_bytes(ours[:4], "big") == len(ours) - 4


@pytest.mark.parametrize("version", range(4, 13))
def test_fetch_response_matches_kio(version):
    records = b"\x01\x02\x03" * 10
    parts = fetch_response.encode(version, 7, [("topic", [
        fetch_response.PartitionData(0, 0, 100, 100, 3, records),
        fetch_response.PartitionData(1, 1, 5, 5, 0, b""),
    ])])
    ours = b"".join(parts)
    cls = load_response_schema(1, version)
    part_cls, topic_cls = nested(cls, "PartitionData"), nested(cls, "FetchableTopicResponse")
    body = build(cls, throttle_time=0, error_code=0, session_id=0, responses=(build(
        topic_cls, topic="topic", partitions=(
            build(part_cls, partition_index=0, error_code=0, high_watermark=100, last_stable_offset=100,
                  log_start_offset=3, aborted_transactions=(), preferred_read_replica=-1, records=records),
            build(part_cls, partition_index=1, error_code=1, high_watermark=5, last_stable_offset=5,
                  log_start_offset=0, aborted_transactions=(), preferred_read_replica=-1, records=b""))),))
    header = (7).to_bytes(4, "big") + (b"\x00" if version >= 12 else b"")
    assert ours[4:] == header + kio_bytes(1, version, body)


@pytest.mark.parametrize("version", range(3, 10))
def test_a_request_quota_raises_a_produce_answers_throttle(version):
    """``raise_throttle`` (a request_percentage throttle on a hand-framed answer) gives the bytes of the same answer
    encoded with that throttle time, and never lowers one."""
    topics = [("t1", [(0, 0, 42, 0, None)]), ("t2", [(3, 0, 7, 0, None)])]
    assert produce_response.raise_throttle(produce_response.encode(version, 5, topics), version, 250) == \
        produce_response.encode(version, 5, topics, throttle_ms=250)
    throttled = produce_response.encode(version, 5, topics, throttle_ms=900)
    assert produce_response.raise_throttle(throttled, version, 250) == throttled


@pytest.mark.parametrize("version", range(4, 13))
def test_a_request_quota_raises_a_fetch_answers_throttle(version):
    topics = [("topic", [fetch_response.PartitionData(0, 0, 100, 100, 3, b"\x01\x02\x03" * 10)])]
    parts = fetch_response.encode(version, 7, topics)
    fetch_response.raise_throttle(parts, version, 250)
    assert b"".join(parts) == b"".join(fetch_response.encode(version, 7, topics, throttle_ms=250))
    parts = fetch_response.encode(version, 7, topics, throttle_ms=900)
    fetch_response.raise_throttle(parts, version, 250)
    assert b"".join(parts) == b"".join(fetch_response.encode(version, 7, topics, throttle_ms=900))
