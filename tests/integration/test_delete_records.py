"""DeleteRecords (key 21), judged by confluent-kafka's and kafka-python's admin clients: the log start moves to the
offset asked for (-1: the high watermark), segments below it go, consumers start there and ListOffsets' earliest
answers it, across a restart too; Kafka's errors for an offset past the high watermark, a compacted topic and an
unknown partition. In a cluster the answer comes once every live replica's log starts there (Kafka's
DelayedDeleteRecords): followers take the leader's log start from their fetches and report theirs back; a paused
follower makes it REQUEST_TIMED_OUT after the request's timeout, a stopped one does not hold it back."""

from __future__ import annotations

import datetime
import os
import signal

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from rawclient import RawClient, request_module
from support import wait_until

from broker.protocol.messages import ErrorCode

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]
KEY = 21


def produce(bootstrap: str, topic: str, n: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(n):
        producer.produce(topic, f"m{i}".encode() * 20)
        if i % 50 == 49:
            producer.flush(30)  # batches of 50: several segments of 4 KiB
    assert producer.flush(30) == 0


def create(admin: AdminClient, topic: str, replicas: int = 1, **config: str) -> None:
    config = {"segment.bytes": "4096", "file.delete.delay.ms": "0", **config}
    admin.create_topics([NewTopic(topic, 1, replicas, config=config)])[topic].result(30)


def delete(admin: AdminClient, topic: str, offset: int, partition: int = 0):
    return admin.delete_records([TopicPartition(topic, partition, offset)],
                                request_timeout=30)[TopicPartition(topic, partition, offset)].result(30)


def first_offset(bootstrap: str, topic: str, start: int) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "dr", "auto.offset.reset": "earliest",
                         "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition(topic, 0, start)])
        while True:
            msg = consumer.poll(10)
            assert msg is not None, "no record"
            if not msg.error():
                return msg.offset()
    finally:
        consumer.close()


def watermarks(bootstrap: str, topic: str) -> tuple[int, int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "dr-w"})
    try:
        return consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
    finally:
        consumer.close()


def segments(log_dir, topic: str) -> list[str]:
    return sorted(p.name for p in (log_dir / f"{topic}-0").glob("*.log"))


def test_delete_records_moves_the_log_start(fresh_broker):
    from kafka import KafkaAdminClient
    from kafka import TopicPartition as KTopicPartition

    b = fresh_broker().start()
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    create(admin, "dr")
    produce(b.bootstrap, "dr", 300)
    before = segments(b.log_dir, "dr")
    assert len(before) > 3

    assert delete(admin, "dr", 120).low_watermark == 120
    assert watermarks(b.bootstrap, "dr") == (120, 300)
    assert first_offset(b.bootstrap, "dr", 50) == 120  # below the log start: reset to the earliest, 120
    wait_until(lambda: len(segments(b.log_dir, "dr")) < len(before), 10, what="segments below 120 deleted")
    assert delete(admin, "dr", 100).low_watermark == 120  # never backwards

    for offset, code in ((301, "OFFSET_OUT_OF_RANGE"), (-7, "OFFSET_OUT_OF_RANGE")):
        with pytest.raises(KafkaException) as refused:
            delete(admin, "dr", offset)
        assert refused.value.args[0].name() == code
    # what clients refuse before sending (an unknown partition), sent raw: the broker's own answer
    m = request_module(KEY, 2)
    raw = RawClient("127.0.0.1", b.port)
    try:
        answer = raw.request(KEY, 2, m.DeleteRecordsRequest(topics=(m.DeleteRecordsTopic(name="dr", partitions=(
            m.DeleteRecordsPartition(partition_index=3, offset=1),)),), timeout=datetime.timedelta(seconds=5)))
    finally:
        raw.close()
    part = answer.topics[0].partitions[0]
    assert (part.partition_index, part.error_code, part.low_watermark) == (3, ErrorCode.unknown_topic_or_partition, -1)
    create(admin, "dr-compacted", **{"cleanup.policy": "compact"})
    with pytest.raises(KafkaException) as refused:
        delete(admin, "dr-compacted", 0)
    assert refused.value.args[0].name() == "POLICY_VIOLATION"

    # kafka-python's admin client, to the high watermark (-1)
    kadmin = KafkaAdminClient(bootstrap_servers=b.bootstrap, request_timeout_ms=30000)
    try:
        result = kadmin.delete_records({KTopicPartition("dr", 0): 200})
        assert [(tp.partition, r["low_watermark"], r["error_code"]) for tp, r in result.items()] == [(0, 200, 0)]
        kadmin.delete_records({KTopicPartition("dr", 0): -1})
    finally:
        kadmin.close()
    assert watermarks(b.bootstrap, "dr") == (300, 300)
    produce(b.bootstrap, "dr", 10)
    assert first_offset(b.bootstrap, "dr", 0) == 300

    b.stop()  # the log start is checkpointed: a restart keeps it
    b.start()
    assert watermarks(b.bootstrap, "dr") == (300, 310)


def test_followers_take_the_leaders_log_start(cluster):
    c = cluster(3)
    admin = AdminClient({"bootstrap.servers": c.bootstrap})
    create(admin, "dr-replicated", replicas=3, **{"min.insync.replicas": "2"})
    produce(c.bootstrap, "dr-replicated", 200)
    assert delete(admin, "dr-replicated", 150).low_watermark == 150
    state = c.state("dr-replicated", 0)
    followers = [i for i in state["isr"] if i != state["leader"]]
    assert followers
    for i in followers:  # the answer came once each follower's log started at 150: its first segment is gone
        assert "00000000000000000000.log" not in segments(c.brokers[i].log_dir, "dr-replicated"), i
    # the leader gone, a follower leads from 150
    c.brokers[state["leader"]].stop()
    wait_until(lambda: c.state("dr-replicated", 0)["leader"] in followers, 30, what="a new leader")
    assert watermarks(c.bootstrap, "dr-replicated") == (150, 200)


def test_the_answer_waits_for_live_followers_only(cluster):
    """A paused follower (its ZooKeeper session alive, so its broker counts as live) holds the answer back until the
    request's timeout: REQUEST_TIMED_OUT, the leader's log start moved all the same. Resumed, it catches up and the
    same request succeeds. A stopped follower's broker is not live: the answer does not wait for it, and it takes
    the log start when it comes back. (kafka-python talks to the leader alone: a client that asks the paused broker
    for metadata would wait on it, not on the DeleteRecords.)"""
    from kafka import KafkaAdminClient
    from kafka import TopicPartition as KTopicPartition
    from kafka.errors import RequestTimedOutError

    c = cluster(3, zookeeper_session_timeout_ms=30000)
    admin = AdminClient({"bootstrap.servers": c.bootstrap})
    create(admin, "dr-live", replicas=3)
    produce(c.bootstrap, "dr-live", 200)
    state = c.state("dr-live", 0)
    leader = state["leader"]
    paused, other = [i for i in state["isr"] if i != leader]
    kadmin = KafkaAdminClient(bootstrap_servers=c.brokers[leader].bootstrap, request_timeout_ms=30000)
    try:
        pid = c.brokers[paused].proc.pid
        os.kill(pid, signal.SIGSTOP)
        try:
            with pytest.raises(RequestTimedOutError):
                kadmin.delete_records({KTopicPartition("dr-live", 0): 100}, timeout_ms=2000,
                                      partition_leader_id=leader)
            assert "00000000000000000000.log" not in segments(c.brokers[other].log_dir, "dr-live")
            assert "00000000000000000000.log" in segments(c.brokers[paused].log_dir, "dr-live")
        finally:
            os.kill(pid, signal.SIGCONT)
        result = kadmin.delete_records({KTopicPartition("dr-live", 0): 100}, timeout_ms=20000,
                                       partition_leader_id=leader)
        assert [(r["low_watermark"], r["error_code"]) for r in result.values()] == [(100, 0)]
        assert "00000000000000000000.log" not in segments(c.brokers[paused].log_dir, "dr-live")

        c.brokers[paused].stop()
        wait_until(lambda: paused not in c.registered(), 30, what="the broker gone")
        result = kadmin.delete_records({KTopicPartition("dr-live", 0): 180}, timeout_ms=10000)
        assert [(r["low_watermark"], r["error_code"]) for r in result.values()] == [(180, 0)]
    finally:
        kadmin.close()
    first = segments(c.brokers[other].log_dir, "dr-live")[0]
    assert int(first.split(".")[0]) > 100, first
    c.brokers[paused].start()
    wait_until(lambda: segments(c.brokers[paused].log_dir, "dr-live")[0] == first, 60,
               what="the restarted follower taking the log start")
