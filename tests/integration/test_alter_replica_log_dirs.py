"""AlterReplicaLogDirs (key 34), judged by kafka-python's ``alter_replica_log_dirs`` and ``describe_log_dirs``: a
replica moves to another log dir of its broker while a producer goes on writing to it, and every record is read
back, in order, after the move and after a restart; Kafka's errors for a dir that is not a log dir and for a
partition the broker holds no replica of (whose replica is then created in that dir); in a cluster a follower
moved while it replicates keeps replicating into its new dir and can take over as leader with every record."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaAdminClient, TopicPartitionReplica
from kafka.errors import LogDirNotFoundError, NoError, ReplicaNotAvailableError
from support import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]


class Writer(threading.Thread):
    """Numbered records of 100 bytes, as fast as acknowledgements come, until stopped; counts the acknowledged."""

    def __init__(self, bootstrap: str, topic: str, acks: str = "1"):
        super().__init__(daemon=True)
        self.producer = Producer({"bootstrap.servers": bootstrap, "acks": acks, "linger.ms": 2,
                                  "enable.idempotence": acks == "all"})
        self.topic, self.sent, self.acked, self.failed = topic, 0, set(), []
        self.stopping = threading.Event()

    def _done(self, err, msg):
        if err is None:
            self.acked.add(int(msg.value()[:8]))
        else:
            self.failed.append(err)

    def run(self):
        while not self.stopping.is_set():
            for _ in range(200):
                self.producer.produce(self.topic, b"%08d" % self.sent + b"x" * 92, partition=0, on_delivery=self._done)
                self.sent += 1
            self.producer.poll(0.01)

    def stop(self) -> None:
        self.stopping.set()
        self.join(30)
        assert self.producer.flush(60) == 0


def read_all(bootstrap: str, topic: str, count: int) -> list[int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"read-{time.monotonic()}",
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, 0)])
    out: list[int] = []
    deadline = time.monotonic() + 60
    try:
        while len(out) < count and time.monotonic() < deadline:
            for msg in consumer.consume(1000, 1):
                if not msg.error():
                    out.append(int(msg.value()[:8]))
    finally:
        consumer.close()
    return out


def where(kadmin: KafkaAdminClient, topic: str, broker_id: int | None = None) -> dict[str, bool]:
    """log dir -> is_future_key of the replica of ``topic``-0 there."""
    answers = kadmin.describe_log_dirs({topic: [0]}, brokers=None if broker_id is None else [broker_id])
    out = {}
    for answer in answers:
        if broker_id is not None and answer["broker"] != broker_id:
            continue
        for d in answer["log_dirs"]:
            for t in d["topics"]:
                for p in t["partitions"]:
                    out[d["log_dir"]] = p["is_future_key"]
    return out


def test_a_replica_moves_between_log_dirs_while_it_is_written(fresh_broker, tmp_path):
    dirs = [str(tmp_path / "d1"), str(tmp_path / "d2")]
    b = fresh_broker(**{"log.dirs": ",".join(dirs)}).start()
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    admin.create_topics([NewTopic("mv", 1, 1, config={"segment.bytes": "65536", "file.delete.delay.ms": "0"})])[
        "mv"].result(30)
    writer = Writer(b.bootstrap, "mv")
    writer.start()
    kadmin = KafkaAdminClient(bootstrap_servers=b.bootstrap, request_timeout_ms=30000)
    try:
        wait_until(lambda: len(writer.acked) > 20_000, 60, what="records written before the move")
        (source,) = where(kadmin, "mv")
        target = next(d for d in dirs if d != source)
        answer = kadmin.alter_replica_log_dirs({TopicPartitionReplica("mv", 0, 0): target})
        assert answer == {TopicPartitionReplica("mv", 0, 0): NoError}
        wait_until(lambda: where(kadmin, "mv") == {target: False}, 60, what="the replica in its new dir")
        moved_at = len(writer.acked)
        wait_until(lambda: len(writer.acked) > moved_at + 10_000, 60, what="records written after the move")
        writer.stop()
        assert not writer.failed
        wait_until(lambda: not Path(source, "mv-0").exists() and not list(Path(source).glob("mv-0.*")), 30,
                   what="the old directory removed")
        assert sorted(p.name for p in Path(target).iterdir() if p.name.startswith("mv-")) == ["mv-0"]

        # Kafka's errors; a replica not created yet is created in the dir asked for
        answer = kadmin.alter_replica_log_dirs({("mv", 0, 0): str(tmp_path / "elsewhere"),
                                                ("later", 0, 0): source})
        assert answer == {TopicPartitionReplica("mv", 0, 0): LogDirNotFoundError,
                          TopicPartitionReplica("later", 0, 0): ReplicaNotAvailableError}
        admin.create_topics([NewTopic("later", 1, 1)])["later"].result(30)
        assert where(kadmin, "later") == {source: False}
        assert kadmin.alter_replica_log_dirs({("mv", 0, 0): target}) == {TopicPartitionReplica("mv", 0, 0): NoError}
    finally:
        writer.stopping.set()
        kadmin.close()
    total = writer.sent
    assert len(writer.acked) == total
    assert read_all(b.bootstrap, "mv", total) == list(range(total))
    b.stop()
    b.start()
    assert read_all(b.bootstrap, "mv", total) == list(range(total))
    assert (Path(target) / "mv-0").is_dir() and not (Path(source) / "mv-0").exists()


def test_a_follower_moved_while_it_replicates_can_lead_with_every_record(cluster):
    c = cluster(3)
    admin = AdminClient({"bootstrap.servers": c.bootstrap})
    admin.create_topics([NewTopic("mv-rf3", 1, 3, config={"segment.bytes": "65536", "min.insync.replicas": "2"})])[
        "mv-rf3"].result(30)
    wait_until(lambda: len(c.state("mv-rf3", 0)["isr"]) == 3, 30, what="a full ISR")
    state = c.state("mv-rf3", 0)
    follower = next(i for i in state["isr"] if i != state["leader"])
    f = c.brokers[follower]
    second = str(f.workdir / "second-dir")
    f.stop()
    f.settings["log.dirs"] = f"{f.log_dir},{second}"
    f.start()
    wait_until(lambda: len(c.state("mv-rf3", 0)["isr"]) == 3, 60, what="the follower back in the ISR")
    writer = Writer(c.bootstrap, "mv-rf3", acks="all")
    writer.start()
    kadmin = KafkaAdminClient(bootstrap_servers=c.bootstrap, request_timeout_ms=30000)
    try:
        wait_until(lambda: len(writer.acked) > 10_000, 60, what="records before the move")
        answer = kadmin.alter_replica_log_dirs({TopicPartitionReplica("mv-rf3", 0, follower): second})
        assert answer == {TopicPartitionReplica("mv-rf3", 0, follower): NoError}
        wait_until(lambda: where(kadmin, "mv-rf3", follower) == {second: False}, 60,
                   what="the follower's replica in its new dir")
        moved_at = len(writer.acked)
        wait_until(lambda: len(writer.acked) > moved_at + 5_000, 60, what="records after the move")
    finally:
        writer.stop()
        kadmin.close()
    assert not writer.failed
    total = writer.sent
    wait_until(lambda: len(c.state("mv-rf3", 0)["isr"]) == 3, 60, what="every replica caught up")
    for other in [i for i in c.brokers if i != follower]:  # the moved follower is the one left to lead
        c.brokers[other].stop()
    wait_until(lambda: c.state("mv-rf3", 0)["leader"] == follower, 60, what="the moved follower leading")
    assert read_all(f.bootstrap, "mv-rf3", total) == list(range(total))
