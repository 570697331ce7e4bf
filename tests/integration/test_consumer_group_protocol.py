"""Kafka's "consumer" group protocol (KIP-848, ConsumerGroupHeartbeat) judged by confluent-kafka with
``group.protocol=consumer``: the coordinator's assignment split between members with no partition owned twice,
a member that leaves and one that is killed (its session ends) giving their partitions back, offsets committed
with the member epoch and resumed, the group listed and described by the admin client."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest
from confluent_kafka import Consumer, ConsumerGroupState, ConsumerGroupType, KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from support import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]
TOPIC, GROUP, PARTITIONS, MESSAGES = "kip848", "kip848-group", 4, 400


@pytest.fixture
def broker(fresh_broker):
    return fresh_broker(group_consumer_heartbeat_interval_ms=500, group_consumer_session_timeout_ms=6000).start()


def consumer(bootstrap: str, **extra) -> Consumer:
    return Consumer({"bootstrap.servers": bootstrap, "group.id": GROUP, "group.protocol": "consumer",
                     "auto.offset.reset": "earliest", "enable.auto.commit": False, **extra})


def owned(c: Consumer) -> set:
    return {(tp.topic, tp.partition) for tp in c.assignment()}


def pump(*consumers: Consumer, seen: dict | None = None) -> None:
    """One poll of each consumer (heartbeats and rebalance callbacks run in poll); records into ``seen``."""
    for c in consumers:
        msg = c.poll(0.2)
        if msg is not None and not msg.error() and seen is not None:
            seen.setdefault(id(c), set()).add((msg.partition(), msg.offset()))


def settled(*consumers: Consumer, seen: dict, total: int = PARTITIONS) -> bool:
    """Every partition owned by exactly one consumer, as evenly as the count allows."""
    pump(*consumers, seen=seen)
    sets = [owned(c) for c in consumers]
    union = set().union(*sets)
    return (len(union) == total and sum(len(s) for s in sets) == total
            and max(len(s) for s in sets) - min(len(s) for s in sets) <= 1)


def test_the_coordinator_assigns_and_members_come_and_go(broker, tmp_path):
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)])[TOPIC].result(30)
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(MESSAGES):
        producer.produce(TOPIC, key=str(i).encode(), value=b"v", partition=i % PARTITIONS)
    assert producer.flush(10) == 0

    a = consumer(broker.bootstrap)
    a.subscribe([TOPIC])
    seen: dict = {}
    wait_until(lambda: pump(a, seen=seen) or len(owned(a)) == PARTITIONS, timeout=30, what="a owns everything")
    b = consumer(broker.bootstrap)
    b.subscribe([TOPIC])
    wait_until(lambda: settled(a, b, seen=seen) and len(owned(a)) == 2, timeout=30,
               what="a and b two partitions each")
    # both read on, and commit with their member epoch
    deadline = time.monotonic() + 20
    while len(set().union(*seen.values())) < MESSAGES and time.monotonic() < deadline:
        pump(a, b, seen=seen)
    assert set().union(*seen.values()) >= {(i % PARTITIONS, i // PARTITIONS) for i in range(MESSAGES)}
    a.commit(asynchronous=False)
    b.commit(asynchronous=False)
    committed = {(tp.partition, tp.offset) for tp in a.committed([*a.assignment(), *b.assignment()], timeout=10)}
    assert committed == {(p, MESSAGES // PARTITIONS) for p in range(PARTITIONS)}

    # the admin client sees one group on the consumer protocol, two members, each with its partitions
    listed = admin.list_consumer_groups().result(timeout=10)
    assert GROUP in {g.group_id for g in listed.valid}
    described = admin.describe_consumer_groups([GROUP])[GROUP].result(timeout=10)  # ConsumerGroupDescribe
    assert described.type == ConsumerGroupType.CONSUMER and described.state == ConsumerGroupState.STABLE
    assert described.partition_assignor == "uniform" and len(described.members) == 2
    assert sorted(len(m.assignment.topic_partitions) for m in described.members) == [2, 2]
    assert all(m.target_assignment.topic_partitions == m.assignment.topic_partitions for m in described.members)
    with pytest.raises(KafkaException) as err:  # a live group keeps its offsets
        admin.delete_consumer_groups([GROUP])[GROUP].result(timeout=10)
    assert err.value.args[0].code() == KafkaError.NON_EMPTY_GROUP

    # b leaves (epoch -1): its partitions go back to a
    b.close()
    wait_until(lambda: pump(a) or len(owned(a)) == PARTITIONS, timeout=30, what="a owns everything again")

    # a member killed with SIGKILL: its session ends and a gets its partitions back
    script = textwrap.dedent(f"""
        from confluent_kafka import Consumer
        c = Consumer({{"bootstrap.servers": "{broker.bootstrap}", "group.id": "{GROUP}",
                      "group.protocol": "consumer"}})
        c.subscribe(["{TOPIC}"])
        while True:
            c.poll(0.2)
            if c.assignment():
                print("assigned", flush=True)
    """)
    child = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    lines: list = []
    threading.Thread(target=lambda: lines.extend(child.stdout), daemon=True).start()
    try:  # a must keep polling: it hands over two partitions only once its revocation ran
        wait_until(lambda: pump(a) or ("assigned\n" in lines and len(owned(a)) == 2), timeout=30,
                   what="the new member assigned, a down to two partitions")
        child.send_signal(signal.SIGKILL)
        child.wait(10)
        wait_until(lambda: pump(a) or len(owned(a)) == PARTITIONS, timeout=30, what="the dead member's partitions")
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(10)

    # a new member resumes from the committed offsets: nothing is read again
    a.close()
    c = consumer(broker.bootstrap)
    c.subscribe([TOPIC])
    again: dict = {}
    wait_until(lambda: pump(c, seen=again) or len(owned(c)) == PARTITIONS, timeout=30, what="c owns everything")
    end = time.monotonic() + 2
    while time.monotonic() < end:
        pump(c, seen=again)
    assert not again, "records read again after the committed offsets"
    c.close()
    assert "UNKNOWN_SERVER_ERROR" not in (broker.output.read_text())


def test_a_coordinator_failover_costs_no_rebalance(cluster):
    """The coordinator of a "consumer"-protocol group killed with SIGKILL: the next one reads the group's state
    (members, epochs, assignment) from ZooKeeper, as Kafka's reads it from ``__consumer_offsets``, so both members
    go on heartbeating in their epochs: no partition is revoked or lost, and commits with the member epoch pass."""
    from broker.groups.coordinator import coordinator_for

    c = cluster(group_consumer_heartbeat_interval_ms=500, group_consumer_session_timeout_ms=15000)
    topic, group = "kip848-failover", "kip848-failover-group"
    admin = AdminClient({"bootstrap.servers": c.bootstrap})
    admin.create_topics([NewTopic(topic, PARTITIONS, 3)])[topic].result(30)
    producer = Producer({"bootstrap.servers": c.bootstrap})
    for i in range(MESSAGES):
        producer.produce(topic, value=b"v", partition=i % PARTITIONS)
    assert producer.flush(20) == 0

    events: list = []

    def member(name: str) -> Consumer:
        m = consumer(c.bootstrap, **{"group.id": group})
        m.subscribe([topic], on_assign=lambda _c, ps: events.append((name, "assign", len(ps))),
                     on_revoke=lambda _c, ps: events.append((name, "revoke", len(ps))),
                     on_lost=lambda _c, ps: events.append((name, "lost", len(ps))))
        return m

    a, b = member("a"), member("b")
    seen: dict = {}
    try:
        wait_until(lambda: settled(a, b, seen=seen), timeout=60, what="a and b two partitions each")
        before = admin.describe_consumer_groups([group])[group].result(timeout=10)
        ids = {m.member_id for m in before.members}
        held = (owned(a), owned(b))
        events.clear()
        coordinator = coordinator_for(group, [0, 1, 2])
        c.brokers[coordinator].kill9()
        wait_until(lambda: c.registered() == {0, 1, 2} - {coordinator}, 30, what="the coordinator gone")
        end = time.monotonic() + 8  # heartbeats every 0.5 s: many reach the new coordinator
        while time.monotonic() < end:
            pump(a, b, seen=seen)
        admin = AdminClient({"bootstrap.servers": c.bootstrap})
        after = admin.describe_consumer_groups([group])[group].result(timeout=20)
        assert after.coordinator.id != coordinator and after.state == ConsumerGroupState.STABLE
        assert {m.member_id for m in after.members} == ids  # the same members, not new ones
        assert events == [] and (owned(a), owned(b)) == held  # nothing revoked, lost or assigned again
        for i in range(MESSAGES):  # and they read on
            producer.produce(topic, value=b"w", partition=i % PARTITIONS)
        assert producer.flush(20) == 0
        wait_until(lambda: pump(a, b, seen=seen) or len(set().union(*seen.values())) >= 2 * MESSAGES, timeout=30,
                   what="the records written after the failover")
        a.commit(asynchronous=False)  # with the member epoch, checked by the new coordinator
        b.commit(asynchronous=False)
        assert events == []
    finally:
        a.close()
        b.close()
