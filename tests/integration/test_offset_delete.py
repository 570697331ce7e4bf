"""OffsetDelete (key 47), judged by kafka-python's ``delete_group_offsets``: committed offsets of partitions go,
a topic the group's live members subscribe to is GROUP_SUBSCRIBED_TO_TOPIC (a classic group and a KIP-848 one),
an unknown group GROUP_ID_NOT_FOUND, an unknown topic UNKNOWN_TOPIC_OR_PARTITION."""

from __future__ import annotations

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaAdminClient
from kafka import TopicPartition as KTopicPartition
from kafka import errors as kerrors
from support import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


def committed(bootstrap: str, group: str, topics: list[str]) -> dict[str, int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        found = consumer.committed([TopicPartition(t, 0) for t in topics], timeout=10)
        return {tp.topic: tp.offset for tp in found if tp.offset >= 0}
    finally:
        consumer.close()


def commit(bootstrap: str, group: str, topics: list[str]) -> None:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:  # a simple commit (no membership), as a tool resetting offsets would
        consumer.commit(offsets=[TopicPartition(t, 0, 5) for t in topics], asynchronous=False)
    finally:
        consumer.close()


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_offset_delete_with_kafka_python(broker, protocol):
    topics = [f"od-{protocol}-a", f"od-{protocol}-b"]
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    for f in admin.create_topics([NewTopic(t, 1, 1) for t in topics]).values():
        f.result(30)
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for t in topics:
        for i in range(10):
            producer.produce(t, b"x%d" % i)
    producer.flush(30)
    group = f"od-group-{protocol}"
    commit(broker.bootstrap, group, topics)
    assert committed(broker.bootstrap, group, topics) == {topics[0]: 5, topics[1]: 5}

    kadmin = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=30000)
    member = None
    try:
        assert kadmin.delete_group_offsets(group, [KTopicPartition(topics[0], 0)]) == {
            KTopicPartition(topics[0], 0): kerrors.NoError}
        assert committed(broker.bootstrap, group, topics) == {topics[1]: 5}

        # a live member subscribed to the second topic: its offsets stay
        conf = {"bootstrap.servers": broker.bootstrap, "group.id": group, "enable.auto.commit": False}
        if protocol == "consumer":
            conf["group.protocol"] = "consumer"
        member = Consumer(conf)
        member.subscribe([topics[1]])
        wait_until(lambda: member.poll(0.2) is not None and bool(member.assignment()), 30,
                   what="the member assigned")
        result = kadmin.delete_group_offsets(group, [KTopicPartition(topics[1], 0), KTopicPartition(topics[0], 0),
                                                     KTopicPartition("od-no-such-topic", 0)])
        assert result == {KTopicPartition(topics[1], 0): kerrors.GroupSubscribedToTopicError,
                          KTopicPartition(topics[0], 0): kerrors.NoError,
                          KTopicPartition("od-no-such-topic", 0): kerrors.UnknownTopicOrPartitionError}
        assert committed(broker.bootstrap, group, topics) == {topics[1]: 5}

        with pytest.raises(kerrors.GroupIdNotFoundError):
            kadmin.delete_group_offsets(f"od-nobody-{protocol}", [KTopicPartition(topics[0], 0)])
    finally:
        if member is not None:
            member.close()
        kadmin.close()
