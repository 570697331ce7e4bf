"""ElectLeaders (key 43) on three brokers with ZooKeeper, judged by confluent-kafka's and kafka-python's
``elect_leaders``: after a broker's restart its partitions stay led by others (automatic rebalancing off), a
preferred election gives the leadership back, a partition led by its preferred replica already is
ELECTION_NOT_NEEDED, a preferred replica that is down is PREFERRED_LEADER_NOT_AVAILABLE, an unclean election of a
partition with a live leader ELECTION_NOT_NEEDED."""

from __future__ import annotations

import datetime

import pytest
from confluent_kafka import ElectionType, KafkaError, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from rawclient import RawClient, request_module
from support import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]


def test_preferred_and_unclean_elections(cluster):
    from kafka import KafkaAdminClient

    c = cluster(3, **{"auto.leader.rebalance.enable": "false"})
    admin = AdminClient({"bootstrap.servers": c.bootstrap})
    admin.create_topics([NewTopic("el", num_partitions=2, replica_assignment=[[0, 1, 2], [1, 2, 0]])])["el"].result(30)
    wait_until(lambda: c.state("el", 0)["leader"] == 0 and c.state("el", 1)["leader"] == 1, 30,
               what="the preferred leaders")

    c.brokers[0].stop()  # partition 0 moves to broker 1; broker 0 comes back as a follower
    wait_until(lambda: c.state("el", 0)["leader"] == 1, 30, what="partition 0 led by broker 1")
    c.brokers[0].start()
    wait_until(lambda: 0 in c.state("el", 0)["isr"], 60, what="broker 0 back in the ISR")
    assert c.state("el", 0)["leader"] == 1

    admin = AdminClient({"bootstrap.servers": c.bootstrap})
    # (confluent-kafka 2.16's binding fails on any keyword argument of elect_leaders: defaults only)
    result = admin.elect_leaders(ElectionType.PREFERRED, [TopicPartition("el", 0), TopicPartition("el", 1)]).result(40)
    outcome = {tp.partition: (err.code() if err is not None and err.code() != KafkaError.NO_ERROR else None)
               for tp, err in result.items()}
    assert outcome == {0: None, 1: KafkaError.ELECTION_NOT_NEEDED}
    assert c.state("el", 0)["leader"] == 0

    # kafka-python: every partition (it names them all: nothing to do), then unclean
    kadmin = KafkaAdminClient(bootstrap_servers=c.bootstrap, request_timeout_ms=30000)
    try:
        response = kadmin.elect_leaders(0, None, timeout_ms=20000)
        assert response.error_code == 0
        assert {(r.topic, p.partition_id, p.error_code) for r in response.replica_election_results
                for p in r.partition_result} == {("el", 0, KafkaError.ELECTION_NOT_NEEDED),
                                                 ("el", 1, KafkaError.ELECTION_NOT_NEEDED)}
        response = kadmin.elect_leaders(1, {"el": [0]}, timeout_ms=20000, raise_errors=False)
        [part] = response.replica_election_results[0].partition_result
        assert (part.partition_id, part.error_code) == (0, KafkaError.ELECTION_NOT_NEEDED)
    finally:
        kadmin.close()

    # raw: every partition (null) answers only elections made, the other brokers are NOT_CONTROLLER
    m = request_module(43, 2)
    answers = []
    for b in c.brokers.values():
        raw = RawClient("127.0.0.1", b.port)
        try:
            answers.append(raw.request(43, 2, m.ElectLeadersRequest(election_type=0, topic_partitions=None,
                                                                    timeout=datetime.timedelta(seconds=10))))
        finally:
            raw.close()
    assert sorted(a.error_code for a in answers) == [0, KafkaError.NOT_CONTROLLER, KafkaError.NOT_CONTROLLER]
    assert [a.replica_election_results for a in answers if a.error_code == 0] == [()]

    # the preferred replica down: PREFERRED_LEADER_NOT_AVAILABLE
    c.brokers[1].stop()
    wait_until(lambda: c.state("el", 1)["leader"] == 2, 30, what="partition 1 led by broker 2")
    admin = AdminClient({"bootstrap.servers": c.bootstrap})
    result = admin.elect_leaders(ElectionType.PREFERRED, [TopicPartition("el", 1)]).result(40)
    [(tp, err)] = result.items()
    assert err.code() == KafkaError.PREFERRED_LEADER_NOT_AVAILABLE


def test_a_standalone_broker_needs_no_election(fresh_broker):
    b = fresh_broker().start()
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    admin.create_topics([NewTopic("el-one", 1, 1)])["el-one"].result(30)
    result = admin.elect_leaders(ElectionType.PREFERRED, [TopicPartition("el-one", 0)]).result(40)
    assert [err.code() for err in result.values()] == [KafkaError.ELECTION_NOT_NEEDED]
