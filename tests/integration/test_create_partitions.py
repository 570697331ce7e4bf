"""CreatePartitions (API 37) and ``logbus topics alter``, with outside clients: confluent-kafka's
``AdminClient.create_partitions`` and kafka-python's ``KafkaAdminClient.create_partitions``, against a standalone
broker and a 3-broker cluster on a real ZooKeeper. Growth is seen by Metadata on every broker, the new partitions
take writes and reads, a consumer group rebalances onto them, and they survive restarts. The raw client only
sends what the outside clients never send (a topic twice, version 0 to a broker that is not the controller)."""

from __future__ import annotations

import datetime
import json
import os
import subprocess
import sys
import time
import uuid

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic
from rawclient import RawClient, request_module
from support import REPO, BrokerProcess, Cluster, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

LIMIT = 200  # max.broker.partitions of the standalone broker


@pytest.fixture(scope="module")
def standalone(tmp_path_factory):
    proc = BrokerProcess(tmp_path_factory.mktemp("standalone"), num_partitions=1, group_initial_rebalance_delay_ms=0,
                         max_broker_partitions=LIMIT).start()
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = Cluster(tmp_path_factory.mktemp("cluster"), 3, group_initial_rebalance_delay_ms=0)
    try:
        c.start()
        yield c
    finally:
        c.stop()


def new_topic(bootstrap: str, partitions: int, rf: int = 1) -> str:
    name = f"grow-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept until the result is in: its end cancels it
    admin.create_topics([NewTopic(name, partitions, rf)])[name].result(30)
    return name


def grow(bootstrap: str, topic: str, count: int, assignment=None, validate_only: bool = False) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    new = NewPartitions(topic, count) if assignment is None else NewPartitions(topic, count, assignment)
    admin.create_partitions([new], validate_only=validate_only,
                            operation_timeout=15, request_timeout=30)[topic].result(40)


def refusal(bootstrap: str, topic: str, count: int, assignment=None, validate_only: bool = False) -> tuple[str, str]:
    with pytest.raises(KafkaException) as err:
        grow(bootstrap, topic, count, assignment, validate_only)
    return err.value.args[0].name(), err.value.args[0].str()


def partitions_seen(bootstrap: str, topic: str) -> dict[int, tuple[int, list[int], list[int]]]:
    """partition -> (leader, replicas, isr) from Metadata."""
    md = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=15).topics[topic]
    assert md.error is None, md.error
    return {p.id: (p.leader, list(p.replicas), list(p.isrs)) for p in md.partitions.values()}


def produce_to(bootstrap: str, topic: str, partitions, per_partition: int = 20, acks: str = "all") -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": acks, "enable.idempotence": acks == "all"})
    for p in partitions:
        for i in range(per_partition):
            producer.produce(topic, f"{p}:{i}".encode(), partition=p)
    assert producer.flush(30) == 0


def read_back(bootstrap: str, topic: str, partition: int, count: int) -> list[str]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, partition, 0)])
    out: list[str] = []
    deadline = time.monotonic() + 30
    while len(out) < count and time.monotonic() < deadline:
        for msg in consumer.consume(100, timeout=0.5):
            if msg.error():
                raise KafkaException(msg.error())
            out.append(msg.value().decode())
    consumer.close()
    return out


def raw_create_partitions(host: str, port: int, version: int, entries, timeout_ms: int = 15000):
    """CreatePartitions at ``version``; ``entries`` are (topic, count, assignments or None)."""
    m = request_module(37, version)
    body = m.CreatePartitionsRequest(
        topics=tuple(m.CreatePartitionsTopic(name=name, count=count, assignments=None if a is None else tuple(
            m.CreatePartitionsAssignment(broker_ids=tuple(r)) for r in a)) for name, count, a in entries),
        timeout=datetime.timedelta(milliseconds=timeout_ms), validate_only=False)
    client = RawClient(host, port)
    try:
        return [(r.name, r.error_code.value, r.error_message) for r in client.request(37, version, body).results]
    finally:
        client.close()


def group_follows_growth(bootstrap: str, topic: str, grow_to: int) -> None:
    """Two confluent-kafka consumers in one group on ``topic`` (metadata refreshed every second): after the topic
    grows to ``grow_to`` partitions, the group's assignment covers them all and the records written to the new
    partitions are consumed."""
    old = len(partitions_seen(bootstrap, topic))
    consumers = [Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{topic}", "auto.offset.reset": "earliest",
                           "topic.metadata.refresh.interval.ms": 1000, "session.timeout.ms": 10000,
                           "heartbeat.interval.ms": 500}) for _ in range(2)]
    got: dict[int, set[str]] = {}

    def poll_all() -> set[int]:
        for c in consumers:
            msg = c.poll(0.2)
            if msg is not None and not msg.error():
                got.setdefault(msg.partition(), set()).add(msg.value().decode())
        return {tp.partition for c in consumers for tp in c.assignment()}

    try:
        for c in consumers:
            c.subscribe([topic])
        wait_until(lambda: poll_all() == set(range(old)), 60, interval=0, what="the group assigned the old partitions")
        grow(bootstrap, topic, grow_to)
        produce_to(bootstrap, topic, range(old, grow_to), per_partition=5)
        wait_until(lambda: poll_all() == set(range(grow_to)), 60, interval=0, what="a rebalance onto new partitions")
        assert all(c.assignment() for c in consumers)  # both members have partitions
        new = set(range(old, grow_to))
        wait_until(lambda: poll_all() is not None and all(len(got.get(p, ())) == 5 for p in new), 60, interval=0,
                   what="records of the new partitions consumed")
    finally:
        for c in consumers:
            c.close()


def logbus(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "logbus.cli", "--log-level", "ERROR", *args], capture_output=True,
                          text=True, timeout=90, env=dict(os.environ, PYTHONPATH=str(REPO / "platform")))


# ---- standalone ----------------------------------------------------------------------------------------------
def test_confluent_grows_a_topic_and_the_new_partitions_take_writes(standalone):
    topic = new_topic(standalone.bootstrap, 2)
    produce_to(standalone.bootstrap, topic, [0, 1], acks="1")
    grow(standalone.bootstrap, topic, 5)
    seen = partitions_seen(standalone.bootstrap, topic)
    assert sorted(seen) == [0, 1, 2, 3, 4] and all(v[0] == 0 for v in seen.values())
    assert all((standalone.log_dir / f"{topic}-{p}").is_dir() for p in range(5))
    produce_to(standalone.bootstrap, topic, [2, 3, 4], acks="1")
    for p in range(5):
        assert read_back(standalone.bootstrap, topic, p, 20) == [f"{p}:{i}" for i in range(20)]


def test_errors_validate_only_and_limits(standalone):
    b = standalone.bootstrap
    topic = new_topic(b, 3)
    assert refusal(b, topic, 2) == ("INVALID_PARTITIONS",
                                    "Topic currently has 3 partitions, which is higher than the requested 2.")
    assert refusal(b, topic, 3) == ("INVALID_PARTITIONS", "Topic already has 3 partitions.")
    assert refusal(b, "no-such-topic", 4) == ("UNKNOWN_TOPIC_OR_PART", "The topic 'no-such-topic' does not exist.")
    assert refusal(b, topic, 5, [[0]]) == ("INVALID_REPLICA_ASSIGNMENT",
                                           "Increasing the number of partitions by 2 but 1 assignments provided.")
    assert refusal(b, topic, 4, [[7]])[0] == "INVALID_REPLICA_ASSIGNMENT"  # no broker 7
    assert refusal(b, topic, 4, [[0, 0]])[0] == "INVALID_REPLICA_ASSIGNMENT"  # a broker twice
    grow(b, topic, 6, validate_only=True)
    assert refusal(b, topic, 2, validate_only=True)[0] == "INVALID_PARTITIONS"  # validated like the real thing
    name, message = refusal(b, topic, LIMIT + 10)
    assert name == "POLICY_VIOLATION" and "max.broker.partitions" in message
    started = time.monotonic()
    assert refusal(b, topic, 100_000)[0] == "POLICY_VIOLATION"  # confluent-kafka's largest count
    assert time.monotonic() - started < 5  # refused at once, nothing created
    assert len(partitions_seen(b, topic)) == 3  # none of the above changed the topic
    grow(b, topic, 4, [[0]])  # a valid manual assignment
    assert len(partitions_seen(b, topic)) == 4
    # what the outside clients never send: a topic twice (one INVALID_REQUEST per name), and version 0
    other = new_topic(b, 1)
    results = raw_create_partitions(standalone.host, standalone.port, 0, [(topic, 9, None), (other, 2, None),
                                                                         (topic, 8, None)])
    assert results == [(topic, 42, "Duplicate topic in request."), (other, 0, None)]
    assert len(partitions_seen(b, topic)) == 4 and len(partitions_seen(b, other)) == 2


def test_kafka_python_admin_grows_and_reports_errors(standalone):
    from kafka.admin import KafkaAdminClient, NewPartitions as KafkaNewPartitions
    from kafka.errors import InvalidPartitionsError

    topic = new_topic(standalone.bootstrap, 1)
    admin = KafkaAdminClient(bootstrap_servers=standalone.bootstrap)
    try:
        response = admin.create_partitions({topic: 3})
        assert [(r.name, r.error_code) for r in response.results] == [(topic, 0)]
        admin.create_partitions({topic: KafkaNewPartitions(4)})  # the older form
        admin.create_partitions({topic: {"count": 5, "assignments": [[0]]}})
        admin.create_partitions({topic: 9}, validate_only=True)
        with pytest.raises(InvalidPartitionsError):
            admin.create_partitions({topic: 2})
        response = admin.create_partitions({topic: 5, "kp-missing": 2}, raise_errors=False)
        assert {r.name: r.error_code for r in response.results} == {topic: 37, "kp-missing": 3}
        started = time.monotonic()
        response = admin.create_partitions({topic: 2**31 - 1}, raise_errors=False)
        assert [r.error_code for r in response.results] == [44]  # POLICY_VIOLATION (max.broker.partitions)
        assert time.monotonic() - started < 5
    finally:
        admin.close()
    assert len(partitions_seen(standalone.bootstrap, topic)) == 5


def test_a_consumer_group_rebalances_onto_new_partitions(standalone):
    topic = new_topic(standalone.bootstrap, 2)
    group_follows_growth(standalone.bootstrap, topic, 4)


def test_cli_alter_and_its_one_line_errors(standalone):
    b = standalone.bootstrap
    topic = new_topic(b, 1)
    out = logbus("topics", "alter", "--bootstrap-server", b, "--topic", topic, "--partitions", "3")
    assert out.returncode == 0 and f"Topic {topic} now has 3 partitions." in out.stdout, out.stderr
    out = logbus("topics", "--alter", "--bootstrap-server", b, "--topic", topic, "--partitions", "5",
                 "--replica-assignment", "0,0,0,0,0")  # kafka-topics.sh's spelling, every partition named
    assert out.returncode == 0, out.stderr
    assert "PartitionCount: 5" in logbus("topics", "describe", "--bootstrap-server", b, "--topic", topic).stdout
    for args, expected in [(["--partitions", "2"], "INVALID_PARTITIONS"),
                           (["--partitions", "5"], "Topic already has 5 partitions."),
                           (["--partitions", "7", "--replica-assignment", "0,0,0,0,0,0,9"],
                            "INVALID_REPLICA_ASSIGNMENT"),
                           (["--partitions", "7", "--replica-assignment", "0,0"], "names 2 partitions"),
                           ([], "alter needs --partitions")]:
        bad = logbus("topics", "alter", "--bootstrap-server", b, "--topic", topic, *args)
        assert bad.returncode == 1 and expected in bad.stderr, (args, bad.stderr)
        assert bad.stderr.strip().count("\n") == 0 and "Traceback" not in bad.stderr
    bad = logbus("topics", "alter", "--bootstrap-server", b, "--topic", "cli-missing", "--partitions", "2")
    assert bad.returncode == 1 and "UNKNOWN_TOPIC_OR_PART" in bad.stderr and bad.stderr.strip().count("\n") == 0
    assert len(partitions_seen(b, topic)) == 5


def test_standalone_restart_keeps_the_new_partitions(fresh_broker):
    proc = fresh_broker(num_partitions=1).start()
    topic = new_topic(proc.bootstrap, 1)
    grow(proc.bootstrap, topic, 3)
    produce_to(proc.bootstrap, topic, [1, 2], acks="1")
    assert proc.stop() == 0
    proc.start()
    assert sorted(partitions_seen(proc.bootstrap, topic)) == [0, 1, 2]
    assert read_back(proc.bootstrap, topic, 2, 20) == [f"2:{i}" for i in range(20)]
    proc.kill9()  # and after a crash
    proc.start()
    assert sorted(partitions_seen(proc.bootstrap, topic)) == [0, 1, 2]
    assert read_back(proc.bootstrap, topic, 1, 20) == [f"1:{i}" for i in range(20)]


# ---- cluster -----------------------------------------------------------------------------------------------------
def assignment_in_zookeeper(c: Cluster, topic: str) -> dict[int, list[int]]:
    zk = c.zk()
    try:
        return {int(p): r for p, r in json.loads(zk.get(f"/brokers/topics/{topic}")[0])["partitions"].items()}
    finally:
        zk.stop()
        zk.close()


def seen_if(broker: BrokerProcess, topic: str, predicate):
    """What ``broker``'s Metadata shows of ``topic`` (see partitions_seen), when ``predicate`` holds, else None."""
    seen = partitions_seen(broker.bootstrap, topic)
    return seen if predicate(seen) else None


def test_cluster_places_new_partitions_and_every_broker_serves_them(cluster):
    topic = new_topic(cluster.bootstrap, 3, rf=2)
    before = assignment_in_zookeeper(cluster, topic)
    grow(cluster.bootstrap, topic, 9)  # waits for the new leaders (operation_timeout)
    after = assignment_in_zookeeper(cluster, topic)
    assert {p: after[p] for p in before} == before  # the old partitions stay where they were
    assert sorted(after) == list(range(9)) and all(len(set(r)) == 2 for r in after.values())
    leaders = [after[p][0] for p in range(9)]
    assert leaders[3:] == leaders[:3] * 2  # the round-robin goes on where the topic left off
    for p in range(3, 9):
        state = cluster.state(topic, p)
        assert state["leader"] == after[p][0] and sorted(state["isr"]) == sorted(after[p])
    for b in cluster.brokers.values():  # Metadata of every broker shows them, with the same leaders
        seen = wait_until(lambda: seen_if(b, topic, lambda s: len(s) == 9), 20,
                          what=f"broker {b.settings['broker.id']} seeing 9 partitions")
        assert {p: v[:2] for p, v in seen.items()} == {p: (r[0], r) for p, r in after.items()}
        for p, replicas in after.items():  # each assigned broker created the log
            if b.settings["broker.id"] in replicas:
                assert (b.log_dir / f"{topic}-{p}").is_dir()
    produce_to(cluster.bootstrap, topic, range(9))
    for p in (0, 4, 8):
        assert read_back(cluster.bootstrap, topic, p, 20) == [f"{p}:{i}" for i in range(20)]


def test_cluster_manual_assignment_errors_and_any_broker(cluster):
    from kafka.admin import KafkaAdminClient
    from kafka.errors import InvalidReplicationAssignmentError

    topic = new_topic(cluster.bootstrap, 1, rf=2)
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap)
    try:
        admin.create_partitions({topic: {"count": 3, "assignments": [[2, 1], [1, 0]]}})
        for assignments in ([[2, 2]], [[2]], [[2, 9]], [[0, 1], [1, 2]]):
            with pytest.raises(InvalidReplicationAssignmentError):
                admin.create_partitions({topic: {"count": 4, "assignments": assignments}})
        admin.create_partitions({topic: {"count": 4, "assignments": [[0, 2]]}}, validate_only=True)
    finally:
        admin.close()
    assert {p: r for p, r in assignment_in_zookeeper(cluster, topic).items() if p} == {1: [2, 1], 2: [1, 0]}
    wait_until(lambda: all(cluster.state(topic, p)["leader"] == r for p, r in ((1, 2), (2, 1))), 20,
               what="the assigned preferred replicas leading")
    assert refusal(cluster.bootstrap, topic, 4, [[0, 1, 2]])[0] == "INVALID_REPLICA_ASSIGNMENT"
    assert refusal(cluster.bootstrap, "cluster-missing", 2)[0] == "UNKNOWN_TOPIC_OR_PART"
    # like CreateTopics, any broker takes the request, not only the controller (clients send it there)
    zk = cluster.zk()
    try:
        controller = json.loads(zk.get("/controller")[0])["brokerid"]
    finally:
        zk.stop()
        zk.close()
    other = next(b for i, b in cluster.brokers.items() if i != controller)
    assert raw_create_partitions(other.host, other.port, 0, [(topic, 5, None)]) == [(topic, 0, None)]
    assert len(assignment_in_zookeeper(cluster, topic)) == 5 and cluster.state(topic, 4)["leader"] >= 0
    # timeout_ms 0: answered before the controller has elected the new leaders, as Kafka does
    [(_, code, message)] = raw_create_partitions(other.host, other.port, 3, [(topic, 6, None)], timeout_ms=0)
    assert code == 7 and "no leader yet" in message  # REQUEST_TIMED_OUT, but the partition exists
    wait_until(lambda: len(partitions_seen(cluster.bootstrap, topic)) == 6, 20, what="partition 5 in Metadata")
    wait_until(lambda: partitions_seen(cluster.bootstrap, topic)[5][0] >= 0, 20, what="partition 5 led")


def test_cluster_refuses_growth_during_a_reassignment(cluster):
    topic = new_topic(cluster.bootstrap, 1, rf=1)
    zk = cluster.zk()
    try:  # a reassignment that cannot finish (onto a broker that never registers): the topic stays in one
        zk.create("/admin/reassign_partitions", json.dumps(
            {"version": 1, "partitions": [{"topic": topic, "partition": 0, "replicas": [7]}]}).encode())
        assert refusal(cluster.bootstrap, topic, 2) == (
            "REASSIGNMENT_IN_PROGRESS", f"A partition reassignment is in progress for the topic '{topic}'.")
        wait_until(lambda: json.loads(zk.get(f"/brokers/topics/{topic}")[0])["adding_replicas"], 20,
                   what="the controller adding the new replica")
        zk.delete("/admin/reassign_partitions")  # the topic's assignment still lists the replica being added
        assert refusal(cluster.bootstrap, topic, 2)[0] == "REASSIGNMENT_IN_PROGRESS"
    finally:
        if zk.exists("/admin/reassign_partitions"):
            zk.delete("/admin/reassign_partitions")
        zk.stop()
        zk.close()
    assert len(partitions_seen(cluster.bootstrap, topic)) == 1


def test_cluster_consumer_group_rebalances_onto_new_partitions(cluster):
    topic = new_topic(cluster.bootstrap, 2, rf=3)
    group_follows_growth(cluster.bootstrap, topic, 5)


def test_cluster_new_partitions_survive_a_broker_restart(cluster):
    topic = new_topic(cluster.bootstrap, 1, rf=3)
    grow(cluster.bootstrap, topic, 4)
    produce_to(cluster.bootstrap, topic, range(4))
    restarted = cluster.brokers[1]
    assert restarted.stop() == 0
    restarted.start()
    cluster.wait_registered({0, 1, 2})
    seen = wait_until(lambda: seen_if(restarted, topic, lambda s: len(s) == 4 and all(1 in v[2] for v in s.values())),
                      60, what="the restarted broker back in every ISR")
    assert sorted(seen) == [0, 1, 2, 3]
    assert all((restarted.log_dir / f"{topic}-{p}").is_dir() for p in range(4))
    for p in range(4):
        assert read_back(restarted.bootstrap, topic, p, 20) == [f"{p}:{i}" for i in range(20)]
