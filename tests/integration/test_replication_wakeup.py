"""acks=all is completed by wake-ups, not by timeouts: an append wakes the followers' long-polling fetches at once,
and the follower fetch that follows (at the new log end) advances the high watermark and answers the waiting
produce. With ``replica.fetch.wait.max.ms`` far above the bound each produce is given here, a produce could only
complete in time through those two wake-ups. Real ZooKeeper, three broker processes, confluent-kafka."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from support import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

FETCH_WAIT_S = 40  # the followers' long poll; each produce below is given a quarter of it


def test_acks_all_completes_through_the_followers_wakeups_not_their_fetch_wait(cluster):
    # replica.lag.time.max.ms above the fetch wait: idle followers that poll for 40 s stay in the ISR (Kafka's rule)
    c = cluster(replica_fetch_wait_max_ms=FETCH_WAIT_S * 1000, replica_lag_time_max_ms=FETCH_WAIT_S * 3000)
    admin = AdminClient({"bootstrap.servers": c.bootstrap})
    admin.create_topics([NewTopic("woken", 1, 3, config={"min.insync.replicas": "3"})])["woken"].result(30)
    wait_until(lambda: len(c.state("woken", 0)["isr"]) == 3, 60, what="full ISR")
    producer = Producer({"bootstrap.servers": c.bootstrap, "acks": "all", "enable.idempotence": True,
                         "linger.ms": 0, "message.timeout.ms": FETCH_WAIT_S * 3000})
    producer.list_topics("woken", timeout=30)
    count = 6
    for i in range(count):
        outcome = []
        producer.produce("woken", f"m{i}".encode(), on_delivery=lambda err, msg: outcome.append(err))
        started = time.monotonic()
        left = producer.flush(FETCH_WAIT_S / 4)
        assert left == 0 and [e is None for e in outcome] == [True], (
            f"message {i}: not acknowledged within {FETCH_WAIT_S / 4:.0f} s ({outcome}); the followers' fetches "
            f"wait up to {FETCH_WAIT_S} s, so an append did not wake them or their next fetch did not complete "
            f"the produce (waited {time.monotonic() - started:.1f} s)")
        time.sleep(0.3)  # the followers are back in their long poll before the next append
    consumer = Consumer({"bootstrap.servers": c.bootstrap, "group.id": "woken-check"})
    try:
        assert consumer.get_watermark_offsets(TopicPartition("woken", 0), timeout=10) == (0, count)
    finally:
        consumer.close()
    assert len(c.state("woken", 0)["isr"]) == 3
