"""Wire-level behaviour real clients rely on: pipelining, acks=0 silence, Fetch long-poll."""

import datetime
import struct
import threading
import time
import uuid

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from rawclient import RawClient, batch, request_module

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]


def frame(api_key, version, correlation, body):
    import io

    from kio.index import load_request_schema
    from kio.serial import entity_writer

    buf = io.BytesIO()
    entity_writer(load_request_schema(api_key, version))(buf, body)
    payload = struct.pack(">hhih", api_key, version, correlation, -1) + buf.getvalue()
    return struct.pack(">i", len(payload)) + payload


def produce_body(topic, acks, values):
    m = request_module(0, 7)
    return m.ProduceRequest(transactional_id=None, acks=acks, timeout=datetime.timedelta(seconds=5), topic_data=(
        m.TopicProduceData(name=topic, partition_data=(m.PartitionProduceData(index=0, records=batch(values)),)),))


def fetch_body(topic, offset, max_wait_ms, min_bytes):
    m = request_module(1, 11)
    return m.FetchRequest(replica_id=-1, max_wait=datetime.timedelta(milliseconds=max_wait_ms), min_bytes=min_bytes,
                          max_bytes=1 << 20, isolation_level=0, session_id=0, session_epoch=-1, topics=(
                              m.FetchTopic(topic=topic, partitions=(m.FetchPartition(
                                  partition=0, current_leader_epoch=-1, fetch_offset=offset, log_start_offset=-1,
                                  partition_max_bytes=1 << 20),)),), forgotten_topics_data=(), rack_id="")


@pytest.fixture
def topic(broker):
    name = f"wire-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(name, 1, 1)])[name].result(10)
    return name


def test_pipelined_requests_answered_in_order_and_acks0_unanswered(broker, topic):
    client = RawClient(broker.host, broker.port)
    m = request_module(18, 0)
    wire = (frame(0, 7, 1, produce_body(topic, 0, [b"silent"]))       # acks=0: no response at all
            + frame(0, 7, 2, produce_body(topic, 1, [b"acked"]))
            + frame(18, 0, 3, m.ApiVersionsRequest())
            + frame(0, 7, 4, produce_body(topic, -1, [b"all"])))
    client.send_bytes(wire)  # all four in one write: pipelined
    correlations = [struct.unpack_from(">i", client.recv_frame())[0] for _ in range(3)]
    assert correlations == [2, 3, 4]
    client.close()
    probe = RawClient(broker.host, broker.port)
    probe.correlation = 9
    resp = probe.request(1, 11, fetch_body(topic, 0, 0, 0))
    assert resp.responses[0].partitions[0].high_watermark == 3  # the acks=0 batch was written too
    probe.close()


def test_answers_to_a_pipelined_burst_leave_together_and_survive_a_bad_frame_after_them(broker, topic):
    """Small responses to pipelined requests are written together (one send, not one each): 100 produce requests
    in one write get 100 answers in order; answers owed before a frame that closes the connection still go out."""
    client = RawClient(broker.host, broker.port)
    client.send_bytes(b"".join(frame(0, 7, i, produce_body(topic, 1, [b"v%d" % i])) for i in range(1, 101)))
    assert [struct.unpack_from(">i", client.recv_frame())[0] for _ in range(100)] == list(range(1, 101))
    m = request_module(18, 0)
    client.send_bytes(frame(18, 0, 101, m.ApiVersionsRequest()) + struct.pack(">ihhih", 10, 999, 0, 102, -1))
    assert struct.unpack_from(">i", client.recv_frame())[0] == 101  # then the unknown api key closes the link
    with pytest.raises(ConnectionError):
        client.recv_frame()
    client.close()
    probe = RawClient(broker.host, broker.port)
    resp = probe.request(1, 11, fetch_body(topic, 0, 0, 0))
    assert resp.responses[0].partitions[0].high_watermark == 100
    probe.close()


def test_fetch_long_polls_until_data_or_max_wait(broker, topic):
    client = RawClient(broker.host, broker.port)
    started = time.monotonic()
    resp = client.request(1, 11, fetch_body(topic, 0, 700, 1))
    waited = time.monotonic() - started
    assert resp.responses[0].partitions[0].records == b""  # empty, never null (librdkafka needs that)
    assert 0.6 <= waited < 3

    def later():
        time.sleep(0.3)
        producer = Producer({"bootstrap.servers": broker.bootstrap})
        producer.produce(topic, b"wake up")
        producer.flush(10)

    thread = threading.Thread(target=later)
    thread.start()
    started = time.monotonic()
    resp = client.request(1, 11, fetch_body(topic, 0, 10_000, 1))
    waited = time.monotonic() - started
    thread.join()
    assert len(resp.responses[0].partitions[0].records) > 0
    assert waited < 5  # answered by the append, long before max_wait (10 s)
    client.close()
