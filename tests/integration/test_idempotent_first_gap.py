"""An idempotent producer's first batch in a partition must start at sequence 0 when the partition has lost
nothing (:mod:`broker.log.producer_state`): the start-up loss it closes, with librdkafka, is a first request to a
new topic's partition refused (NOT_LEADER_OR_FOLLOWER while its leadership settled) while the next one, a later
sequence, was taken; librdkafka then counts the first records as delivered (a later sequence acknowledged implies
the earlier ones were: ``rd_kafka_dr_implicit_ack``) and they are never sent again. Here, on a real broker through
the wire: the gap is refused with OUT_OF_ORDER_SEQUENCE_NUMBER (45) and nothing is written; the batches in order
are taken; a real client reads them all, in order."""

import datetime

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka.record.default_records import DefaultRecordBatchBuilder
from rawclient import RawClient, request_module

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


def idempotent_batch(producer_id: int, epoch: int, first_seq: int, values: list[bytes]) -> bytes:
    b = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False, producer_id=producer_id,
                                  producer_epoch=epoch, base_sequence=first_seq, batch_size=1 << 20)
    for i, value in enumerate(values):
        b.append(i, timestamp=1_700_000_000_000 + first_seq + i, key=None, value=value, headers=[])
    return bytes(b.build())


def produce(client: RawClient, topic: str, data: bytes) -> tuple[int, int]:
    m = request_module(0, 7)
    body = m.ProduceRequest(transactional_id=None, acks=-1, timeout=datetime.timedelta(seconds=10), topic_data=(
        m.TopicProduceData(name=topic, partition_data=(m.PartitionProduceData(index=0, records=data),)),))
    answer = client.request(0, 7, body).responses[0].partition_responses[0]
    return answer.error_code.value, answer.base_offset


def test_a_gap_at_a_producers_start_is_refused_and_the_batches_in_order_are_taken(broker):
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})  # kept: a collected client fails its futures
    admin.create_topics([NewTopic("first-gap", 1, 1)])["first-gap"].result(30)
    client = RawClient(broker.host, broker.port)
    try:
        m = request_module(22, 4)
        pid = client.request(22, 4, m.InitProducerIdRequest(
            transactional_id=None, transaction_timeout=datetime.timedelta(seconds=60), producer_id=-1,
            producer_epoch=-1))
        assert pid.error_code.value == 0
        ident = (pid.producer_id, pid.producer_epoch)
        assert produce(client, "first-gap", idempotent_batch(*ident, 2, [b"c"]))[0] == 45  # the gap: refused
        assert produce(client, "first-gap", idempotent_batch(*ident, 0, [b"a", b"b"])) == (0, 0)
        assert produce(client, "first-gap", idempotent_batch(*ident, 2, [b"c"])) == (0, 2)
        assert produce(client, "first-gap", idempotent_batch(*ident, 2, [b"c"])) == (0, 2)  # a retry: not again
    finally:
        client.close()
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "first-gap", "enable.auto.commit": False,
                         "enable.partition.eof": True})
    try:
        consumer.assign([TopicPartition("first-gap", 0, 0)])
        got = []
        while True:
            msg = consumer.poll(10)
            assert msg is not None, got
            if msg.error():
                break  # end of the partition
            got.append((msg.offset(), msg.value()))
    finally:
        consumer.close()
    assert got == [(0, b"a"), (1, b"b"), (2, b"c")]
