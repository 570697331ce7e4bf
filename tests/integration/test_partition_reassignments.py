"""AlterPartitionReassignments and ListPartitionReassignments (keys 45, 46) on three brokers with ZooKeeper, judged
by kafka-python's admin client: a reassignment moves a partition's replicas (records kept), one that cannot finish
(its new replica's broker paused) is listed with its adding and removing replicas and can be cancelled, which
reverts the replicas; Kafka's errors for bad replica lists, unknown partitions and a cancellation of nothing."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaAdminClient
from kafka import TopicPartition as KTopicPartition
from kafka import errors as kerrors
from support import REPO, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]


def replicas(c, topic: str) -> list[int]:
    admin = AdminClient({"bootstrap.servers": c.bootstrap})
    return list(admin.list_topics(topic, timeout=10).topics[topic].partitions[0].replicas)


def count(bootstrap: str, topic: str) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "ra-count", "auto.offset.reset": "earliest"})
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        seen = 0
        while (msg := consumer.poll(5)) is not None:
            seen += not msg.error()
        return seen
    finally:
        consumer.close()


def test_reassignments_through_the_kafka_api(cluster):
    c = cluster(3, **{"zookeeper.session.timeout.ms": "30000"})
    admin = AdminClient({"bootstrap.servers": c.bootstrap})
    controller = admin.describe_cluster(request_timeout=10).result(20).controller.id
    paused = min(b for b in (0, 1, 2) if b != controller)  # kafka-python sends these requests to the controller
    first, second = sorted({0, 1, 2} - {paused})
    admin.create_topics([NewTopic("ra", num_partitions=1, replica_assignment=[[paused, first]])])["ra"].result(30)
    producer = Producer({"bootstrap.servers": c.bootstrap, "acks": "all"})
    for i in range(100):
        producer.produce("ra", b"r%d" % i)
    assert producer.flush(30) == 0
    tp = KTopicPartition("ra", 0)
    kadmin = KafkaAdminClient(bootstrap_servers=c.bootstrap, request_timeout_ms=30000)
    try:
        assert kadmin.alter_partition_reassignments({tp: [first, second]}) == {tp: None}
        wait_until(lambda: replicas(c, "ra") == [first, second] and kadmin.list_partition_reassignments() == {}, 60,
                   what="the reassignment done")
        assert count(c.bootstrap, "ra") == 100

        # errors
        result = kadmin.alter_partition_reassignments({tp: [first, first], KTopicPartition("ra", 7): [0, 1]})
        assert result == {tp: kerrors.InvalidReplicationAssignmentError,
                          KTopicPartition("ra", 7): kerrors.UnknownTopicOrPartitionError}
        assert kadmin.alter_partition_reassignments({tp: [first, 9]}) == {
            tp: kerrors.InvalidReplicationAssignmentError}
        assert kadmin.alter_partition_reassignments({tp: None}) == {tp: kerrors.NoReassignmentInProgressError}

        # a broker paused: a move onto it cannot finish; it is listed, then cancelled
        os.kill(c.brokers[paused].proc.pid, signal.SIGSTOP)
        try:
            assert kadmin.alter_partition_reassignments({tp: [paused, second]}) == {tp: None}
            wait_until(lambda: kadmin.list_partition_reassignments() == {tp: {
                "replicas": [paused, second, first], "adding_replicas": [paused], "removing_replicas": [first]}},
                30, what="the reassignment listed")
            assert kadmin.list_partition_reassignments({"ra": [0]}) == kadmin.list_partition_reassignments()
            assert kadmin.alter_partition_reassignments({tp: None}) == {tp: None}
            assert kadmin.list_partition_reassignments() == {}
            # back to the replicas before, in Kafka's order: the reassignment's list without the adding ones
            wait_until(lambda: replicas(c, "ra") == [second, first], 30, what="the replicas reverted")
        finally:
            os.kill(c.brokers[paused].proc.pid, signal.SIGCONT)
    finally:
        kadmin.close()
    assert count(c.bootstrap, "ra") == 100


def cli(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "logbus.cli", "--log-level", "ERROR", "reassign-partitions", *argv],
                          capture_output=True, text=True, timeout=90,
                          env=dict(os.environ, PYTHONPATH=str(REPO / "platform")))


def test_the_cli_through_the_brokers(cluster, tmp_path):
    """``logbus reassign-partitions --bootstrap-server`` (kafka-reassign-partitions.sh's modern form): --execute,
    --verify until complete, --cancel, Kafka's refusals as one line."""
    c = cluster(3)
    admin = AdminClient({"bootstrap.servers": c.bootstrap})
    admin.create_topics([NewTopic("rc", num_partitions=1, replica_assignment=[[0, 1]])])["rc"].result(30)
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [{"topic": "rc", "partition": 0, "replicas": [1, 2]}]}))
    started = cli("--bootstrap-server", c.bootstrap, "--reassignment-json-file", str(plan), "--execute")
    assert started.returncode == 0 and started.stdout.strip() == \
        "Successfully started partition reassignments for rc-0", started.stderr
    wait_until(lambda: cli("--bootstrap-server", c.bootstrap, "--plan", str(plan), "--verify").returncode == 0, 60,
               interval=1, what="the reassignment complete")
    verified = cli("--bootstrap-server", c.bootstrap, "--plan", str(plan), "--verify")
    assert verified.stdout.splitlines() == ["Status of partition reassignment:",
                                            "Reassignment of partition rc-0 is complete."]
    assert replicas(c, "rc") == [1, 2]
    cancelled = cli("--bootstrap-server", c.bootstrap, "--plan", str(plan), "--cancel")
    assert cancelled.returncode == 1 and cancelled.stderr.strip() == \
        "logbus: reassignment refused for rc-0: NoReassignmentInProgressError"
    plan.write_text(json.dumps({"version": 1, "partitions": [{"topic": "rc", "partition": 0, "replicas": [1, 9]}]}))
    refused = cli("--bootstrap-server", c.bootstrap, "--plan", str(plan))
    assert refused.returncode == 1 and refused.stderr.strip() == \
        "logbus: reassignment refused for rc-0: InvalidReplicationAssignmentError"
    classic = cli("--zookeeper", "127.0.0.1:1", "--plan", str(plan), "--cancel")  # refused before connecting
    assert classic.returncode == 1 and classic.stderr.strip() == \
        "logbus: --cancel needs --bootstrap-server (a cancellation goes through the controller)"
