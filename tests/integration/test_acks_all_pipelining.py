"""A producer's acks=all requests pipelined on one connection (issue 20): the leader appends the next Produce while
earlier ones wait for the ISR, and the client still gets every answer in order, the log every message once and in
order. Real ZooKeeper, three broker processes, confluent-kafka with several requests in flight (its Metadata
requests on the same connections are answered in order too)."""

from __future__ import annotations

import json

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from support import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

COUNT = 30_000


def test_pipelined_acks_all_requests_are_answered_in_order_and_stored_once_in_order(cluster):
    c = cluster()
    admin = AdminClient({"bootstrap.servers": c.bootstrap})
    admin.create_topics([NewTopic("piped", 1, 3, config={"min.insync.replicas": "2"})])["piped"].result(30)
    wait_until(lambda: len(c.state("piped", 0)["isr"]) == 3, 60, what="full ISR")
    in_flight = [0]

    def stats(text: str) -> None:
        for b in json.loads(text)["brokers"].values():
            in_flight[0] = max(in_flight[0], b["waitresp_cnt"])

    errors = []
    producer = Producer({"bootstrap.servers": c.bootstrap, "acks": "all", "enable.idempotence": False,
                         "max.in.flight.requests.per.connection": 5, "linger.ms": 1, "batch.num.messages": 50,
                         "retries": 0, "statistics.interval.ms": 50, "stats_cb": stats,
                         "topic.metadata.refresh.interval.ms": 100})
    for i in range(COUNT):
        while True:
            try:
                producer.produce("piped", str(i).encode(), partition=0,
                                 on_delivery=lambda err, msg: err is not None and errors.append(err))
                break
            except BufferError:
                producer.poll(0.01)
    assert producer.flush(120) == 0
    assert errors == [], errors[:3]  # retries=0: a misordered answer or a dropped connection would show here
    assert in_flight[0] > 1, "the client never had two requests in flight: nothing was pipelined"

    consumer = Consumer({"bootstrap.servers": c.bootstrap, "group.id": "piped-check", "enable.auto.commit": False})
    try:
        assert consumer.get_watermark_offsets(TopicPartition("piped", 0), timeout=10) == (0, COUNT)
        consumer.assign([TopicPartition("piped", 0, 0)])
        values: list[int] = []
        while len(values) < COUNT:
            batch = consumer.consume(5000, timeout=10)
            assert batch, f"only {len(values)} of {COUNT} messages came back"
            values += [int(m.value()) for m in batch if m.error() is None]
        assert values == list(range(COUNT))
    finally:
        consumer.close()
