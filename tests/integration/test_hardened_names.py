"""Regression tests for names and ids a client chooses: a topic name with a trailing newline (accepted before:
``re.match`` with ``$``), a group id with ``/`` (it wrote into another group's offset registry in ZooKeeper and
broke that group), and InitProducerId naming another producer's id (it bumped that producer's epoch)."""

import datetime

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from rawclient import RawClient, request_module

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


def test_topic_name_with_a_trailing_newline_is_refused(broker):
    client = RawClient(broker.host, broker.port)
    try:
        m = request_module(19, 5)
        body = m.CreateTopicsRequest(topics=(m.CreatableTopic(name="orders\n", num_partitions=1, replication_factor=1,
                                                              assignments=(), configs=()),),
                                     timeout=datetime.timedelta(seconds=10), validate_only=False)
        assert client.request(19, 5, body).topics[0].error_code.value == 17  # INVALID_TOPIC_EXCEPTION
        assert "orders\n" not in AdminClient({"bootstrap.servers": broker.bootstrap}).list_topics(timeout=10).topics
    finally:
        client.close()


def test_init_producer_id_never_hands_out_another_producers_id(broker):
    client = RawClient(broker.host, broker.port)
    try:
        m = request_module(22, 4)
        first = client.request(22, 4, m.InitProducerIdRequest(
            transactional_id=None, transaction_timeout=datetime.timedelta(seconds=60), producer_id=-1,
            producer_epoch=-1))
        assert first.error_code.value == 0 and first.producer_epoch == 0
        stolen = client.request(22, 4, m.InitProducerIdRequest(
            transactional_id=None, transaction_timeout=datetime.timedelta(seconds=60),
            producer_id=first.producer_id, producer_epoch=32767 - 1))
        assert stolen.error_code.value == 0
        assert stolen.producer_id != first.producer_id and stolen.producer_epoch == 0  # Kafka: always a new id
    finally:
        client.close()


def test_group_ids_with_slashes_keep_their_own_offsets(cluster):
    c = cluster(1)
    admin = AdminClient({"bootstrap.servers": c.bootstrap})
    admin.create_topics([NewTopic("t", 1, 1)])["t"].result(30)
    for group, offset in (("g", 5), ("g/offsets/t", 7), ("g/offsets/t/0", 9), ("..", 11)):
        consumer = Consumer({"bootstrap.servers": c.bootstrap, "group.id": group})
        consumer.commit(offsets=[TopicPartition("t", 0, offset)], asynchronous=False)
        consumer.close()
    for group, offset in (("g", 5), ("g/offsets/t", 7), ("g/offsets/t/0", 9), ("..", 11)):
        consumer = Consumer({"bootstrap.servers": c.bootstrap, "group.id": group})
        assert consumer.committed([TopicPartition("t", 0)], 30)[0].offset == offset, group
        consumer.close()
    zk = c.zk()
    try:
        assert sorted(zk.get_children("/consumers")) == ["%2E%2E", "g", "g%2Foffsets%2Ft", "g%2Foffsets%2Ft%2F0"]
        assert zk.get_children("/consumers/g/offsets") == ["t"]  # nothing of the other groups inside g's registry
    finally:
        zk.stop()
        zk.close()
