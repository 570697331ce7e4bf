"""The replica fetcher's hand-framed Fetch v12 request (:func:`fetch_request.encode_v12`) against the frame kio's
writer makes of the same request (the fetcher's former path): byte for byte, for any topics, partitions and
values, and decodable by the broker's own request reader."""

from __future__ import annotations

import datetime
import sys

import pytest
from broker.protocol import codec, fetch_request
from hypothesis import given, settings
from hypothesis import strategies as st

pytestmark = [pytest.mark.unit, pytest.mark.timeout(120)]

KIO = sys.modules[codec.request_type(1, 12).__module__]
I32, I64 = st.integers(-(2**31), 2**31 - 1), st.integers(-(2**63), 2**63 - 1)
NAMES = st.text(st.characters(min_codepoint=0x21, max_codepoint=0x2FF), min_size=1, max_size=200)
TOPICS = st.lists(st.tuples(NAMES, st.lists(st.tuples(I32, I32, I64, I64, I32), max_size=4)), max_size=4)


def kio_frame(correlation_id: int, client_id: str, replica_id: int, max_wait: int, min_bytes: int,
              max_bytes: int, topics, session_id: int = 0, session_epoch: int = -1, forgotten=()) -> bytes:
    request = KIO.FetchRequest(
        replica_id=replica_id, max_wait=datetime.timedelta(milliseconds=max_wait), min_bytes=min_bytes,
        max_bytes=max_bytes, isolation_level=0, session_id=session_id, session_epoch=session_epoch,
        topics=tuple(KIO.FetchTopic(topic=name, partitions=tuple(
            KIO.FetchPartition(partition=index, current_leader_epoch=epoch, fetch_offset=offset,
                               last_fetched_epoch=-1, log_start_offset=log_start, partition_max_bytes=limit)
            for index, epoch, offset, log_start, limit in partitions)) for name, partitions in topics),
        forgotten_topics_data=tuple(KIO.ForgottenTopic(topic=name, partitions=tuple(indexes))
                                    for name, indexes in forgotten), rack_id="")
    return codec.encode_request(1, 12, correlation_id, client_id, request)


@settings(max_examples=200, deadline=None)
@given(I32, st.text(max_size=40), I32, st.integers(0, 2**31 - 1), I32, I32, TOPICS)
def test_the_frame_is_kios_byte_for_byte(correlation_id, client_id, replica_id, max_wait, min_bytes, max_bytes,
                                         topics):
    ours = fetch_request.encode_v12(correlation_id, client_id.encode(), replica_id, max_wait, min_bytes,
                                    max_bytes, topics)
    assert ours == kio_frame(correlation_id, client_id, replica_id, max_wait, min_bytes, max_bytes, topics)


@settings(max_examples=200, deadline=None)
@given(I32, I32, I32, TOPICS, st.lists(st.tuples(NAMES, st.lists(I32, max_size=4)), max_size=4))
def test_a_session_fetch_is_kios_byte_for_byte(correlation_id, session_id, session_epoch, topics, forgotten):
    ours = fetch_request.encode_v12(correlation_id, b"replica-fetcher-1", 1, 500, 1, 10485760, topics,
                                    session_id, session_epoch, forgotten)
    assert ours == kio_frame(correlation_id, "replica-fetcher-1", 1, 500, 1, 10485760, topics, session_id,
                             session_epoch, forgotten)


def test_the_broker_reads_it_back():
    frame = fetch_request.encode_v12(7, b"replica-fetcher-2", 2, 500, 1, 10485760,
                                     [("events", [(0, 3, 123456789, 1000, 1048576), (4, 3, 0, -1, 1048576)])])
    payload = memoryview(frame)[4:].toreadonly()
    header = codec.read_header(payload)
    assert (header.api_key, header.api_version, header.correlation_id, header.client_id) == (1, 12, 7,
                                                                                            "replica-fetcher-2")
    body = codec.decode_body(header, payload)
    assert body.replica_id == 2 and body.max_wait == datetime.timedelta(milliseconds=500)
    assert [(p.partition, p.current_leader_epoch, p.fetch_offset, p.log_start_offset, p.partition_max_bytes)
            for p in body.topics[0].partitions] == [(0, 3, 123456789, 1000, 1048576), (4, 3, 0, -1, 1048576)]
    assert body.topics[0].topic == "events" and body.rack_id == ""
