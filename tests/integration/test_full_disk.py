"""A full disk under a real broker's ``log.dirs`` (a 32 MiB tmpfs, filled by a filler file): the broker refuses
writes with KAFKA_STORAGE_ERROR, keeps serving everything else, never keeps a partial write, and takes writes
again as soon as space returns, without a restart. Standalone, and as one replica of three (a follower that falls
out of the ISR and rejoins it; a replica elected leader while its disk is full).

Real processes only: ZooKeeper, brokers, confluent-kafka clients, and the raw wire client for the exact error
codes. Mounting needs root (CI and this machine run as root); the test is skipped where it cannot mount.
"""

import datetime
import errno
import os
import subprocess
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from rawclient import RawClient, batch, request_module
from support import BrokerProcess, Cluster, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

DISK_SIZE = "32m"
STORAGE_ERROR = 56
NOT_COORDINATOR = 16


class SmallDisks:
    """tmpfs mounts for log dirs, and what runs on them: stopped first, then unmounted."""

    def __init__(self):
        self.mounted: list[Path] = []
        self.owners: list = []  # objects with stop(), stopped (in reverse) before unmounting

    def mount(self, path: Path) -> Path:
        path.mkdir(parents=True, exist_ok=True)
        if os.geteuid() != 0:
            pytest.skip("mounting a tmpfs needs root")
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={DISK_SIZE}", "tmpfs", str(path)],
                              capture_output=True, text=True)
        if done.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs on {path}: {done.stderr.strip()}")
        self.mounted.append(path)
        return path

    def close(self) -> None:
        try:
            for owner in reversed(self.owners):
                owner.stop()
        finally:
            for path in reversed(self.mounted):
                subprocess.run(["umount", str(path)], check=False)


@pytest.fixture
def disks():
    made = SmallDisks()
    try:
        yield made
    finally:
        made.close()


def fill(disk: Path, leave: int = 0) -> Path:
    """Write a filler file until the disk refuses more; then give back ``leave`` bytes."""
    filler = disk / f"filler-{uuid.uuid4().hex[:6]}"
    with open(filler, "wb", buffering=0) as f:
        for chunk in (1 << 20, 4096):
            try:
                while True:
                    f.write(b"\0" * chunk)
            except OSError as exc:
                assert exc.errno == errno.ENOSPC, exc
        if leave:
            f.truncate(max(os.fstat(f.fileno()).st_size - leave, 0))
    return filler


# ---- clients ----------------------------------------------------------------------------------------------------
def create_topic(bootstrap: str, topic: NewTopic) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept alive until the result is in
    admin.create_topics([topic])[topic.topic].result(15)


def produce(bootstrap: str, topic: str, values: list[bytes], **config) -> tuple[list, list]:
    """(acknowledged (offset, value) pairs, delivery errors), with confluent-kafka and acks=all."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                         "linger.ms": 5, "message.timeout.ms": 60000, **config})
    acked, failed = [], []

    def report(err, msg):
        if err is None:
            acked.append((msg.offset(), msg.value()))
        else:
            failed.append(err)

    for value in values:
        producer.produce(topic, value, partition=0, on_delivery=report)
        producer.poll(0)
    assert producer.flush(90) == 0
    return sorted(acked), failed


def read_all(bootstrap: str, topic: str) -> list[tuple[int, bytes]]:
    """Every record of partition 0 up to its high watermark, CRCs checked by the client."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"read-{uuid.uuid4().hex[:6]}",
                         "enable.auto.commit": False, "check.crcs": True})
    out = []
    try:
        end = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=15)[1]
        consumer.assign([TopicPartition(topic, 0, 0)])
        while len(out) < end:
            for m in consumer.consume(min(1000, end - len(out)), timeout=5):  # returns once it has them all
                assert not m.error(), m.error()
                out.append((m.offset(), m.value()))
    finally:
        consumer.close()
    return out


def raw_produce(client: RawClient, topic: str, values: list[bytes]) -> int:
    m = request_module(0, 7)
    body = m.ProduceRequest(transactional_id=None, acks=-1, timeout=datetime.timedelta(seconds=10), topic_data=(
        m.TopicProduceData(name=topic, partition_data=(m.PartitionProduceData(index=0, records=batch(values)),)),))
    return client.request(0, 7, body).responses[0].partition_responses[0].error_code.value


def raw_commit(client: RawClient, group: str, topic: str, offset: int) -> int:
    m = request_module(8, 2)
    body = m.OffsetCommitRequest(group_id=group, generation_id_or_member_epoch=-1, member_id="",
                                 retention_time=datetime.timedelta(milliseconds=-1), topics=(
                                     m.OffsetCommitRequestTopic(name=topic, partitions=(
                                         m.OffsetCommitRequestPartition(partition_index=0, committed_offset=offset,
                                                                        committed_metadata=""),)),))
    return client.request(8, 2, body).topics[0].partitions[0].error_code.value


def metadata_errors(client: RawClient, topic: str) -> list[int]:
    m = request_module(3, 9)
    body = m.MetadataRequest(topics=(m.MetadataRequestTopic(name=topic),), allow_auto_topic_creation=False,
                             include_cluster_authorized_operations=False, include_topic_authorized_operations=False)
    return [p.error_code.value for p in client.request(3, 9, body).topics[0].partitions]


def segment_bytes(partition_dir: Path) -> int:
    return sum(p.stat().st_size for p in partition_dir.glob("*.log"))


def values(prefix: str, n: int, size: int = 20_000) -> list[bytes]:
    return [f"{prefix}-{i:05d}-".encode() + os.urandom(size) for i in range(n)]


# ---- standalone ---------------------------------------------------------------------------------------------------
def test_a_full_log_dir_refuses_writes_with_storage_error_and_resumes_when_space_returns(tmp_path, disks):
    disk = disks.mount(tmp_path / "disk")
    broker = BrokerProcess(tmp_path / "broker", log_dirs=str(disk / "logs"), log_segment_bytes=1 << 20,
                           num_partitions=1)
    disks.owners.append(broker)
    broker.start()
    create_topic(broker.bootstrap, NewTopic("fd", 1, 1))
    acked, failed = produce(broker.bootstrap, "fd", values("before", 150))
    assert not failed and [o for o, _ in acked] == list(range(150))

    filler = fill(disk, leave=24 << 10)  # room for part of a batch: the append is torn, then cut back
    partition_dir = disk / "logs" / "fd-0"
    size_before = segment_bytes(partition_dir)
    client = RawClient(broker.host, broker.port)
    codes = [raw_produce(client, "fd", [os.urandom(60_000)]) for _ in range(5)]
    assert codes == [STORAGE_ERROR] * 5, codes  # on the same connection: it stays open
    assert segment_bytes(partition_dir) == size_before  # nothing of the refused batches stays behind
    fill(disk)  # and now not a byte left
    _, refused = produce(broker.bootstrap, "fd", values("refused", 3), **{"enable.idempotence": False,
                                                                          "retries": 0})
    assert [e.code() for e in refused] == [KafkaError.KAFKA_STORAGE_ERROR] * 3
    assert metadata_errors(client, "fd") == [0] and broker.alive()
    assert raw_commit(client, "readers", "fd", 10) == NOT_COORDINATOR  # retriable; the connection stays open
    assert read_all(broker.bootstrap, "fd") == acked  # reads are served throughout
    client.close()

    for path in disk.glob("filler-*"):  # space returns: writes resume, no restart
        path.unlink()
    more, failed = produce(broker.bootstrap, "fd", values("after", 50))
    assert not failed and [o for o, _ in more] == list(range(150, 200))
    acked += more
    assert read_all(broker.bootstrap, "fd") == acked
    client = RawClient(broker.host, broker.port)
    assert raw_commit(client, "readers", "fd", 10) == 0
    client.close()

    fill(disk)  # a stop on a full disk: it cannot vouch for the logs (no clean-shutdown marker) but exits cleanly
    assert broker.stop() == 0
    assert "the next start recovers them" in broker.log_text()
    for path in disk.glob("filler-*"):
        path.unlink()
    broker.start()  # recovers: every batch past the recovery point is read and its CRC checked
    assert read_all(broker.bootstrap, "fd") == acked
    broker.stop()  # then a clean restart, and a kill -9 and a restart that recovers again
    broker.start()
    assert read_all(broker.bootstrap, "fd") == acked
    broker.kill9()
    broker.start()
    assert read_all(broker.bootstrap, "fd") == acked
    text = broker.log_text()
    assert "Traceback" not in text
    assert "torn or corrupt" not in text  # recovery found nothing to cut: no partial write was ever left
    assert text.count(" ERROR ") <= 8, text  # each incident is reported, not each refused request
    assert not filler.exists()


# ---- three replicas -----------------------------------------------------------------------------------------------
def isr(cluster: Cluster, topic: str) -> list[int]:
    return sorted(cluster.state(topic, 0)["isr"])


def test_a_replica_on_a_full_disk_leaves_the_isr_rejoins_it_and_can_lead(tmp_path, disks):
    cluster = Cluster(tmp_path / "cluster", 3, min_insync_replicas=2, log_segment_bytes=1 << 20)
    disk = disks.mount(tmp_path / "cluster" / "broker1" / "logs")  # broker 1's log.dirs
    disks.owners.append(cluster)
    cluster.start()
    topic = "fd3"
    create_topic(cluster.bootstrap, NewTopic(topic, num_partitions=1, replica_assignment=[[0, 1, 2]]))
    acked, failed = produce(cluster.bootstrap, topic, values("before", 60))
    assert not failed
    wait_until(lambda: isr(cluster, topic) == [0, 1, 2], 30, what="full ISR")

    # 1. A follower's disk fills: it stays up, leaves the ISR, and rejoins once space returns.
    fill(disk)
    more, failed = produce(cluster.bootstrap, topic, values("follower-full", 60))
    assert not failed
    acked += more
    wait_until(lambda: isr(cluster, topic) == [0, 2], 30, what="broker 1 out of the ISR")
    follower = RawClient(cluster.brokers[1].host, cluster.brokers[1].port)
    assert metadata_errors(follower, topic) == [0] and cluster.brokers[1].alive()
    follower.close()
    for path in disk.glob("filler-*"):
        path.unlink()
    wait_until(lambda: isr(cluster, topic) == [0, 1, 2], 30, what="broker 1 back in the ISR")

    # 2. Its disk fills again and the leader stops: broker 1 is elected on a full disk. It refuses writes with
    # KAFKA_STORAGE_ERROR, then leads normally (the ISR grows back to all three) once space returns.
    fill(disk)
    cluster.brokers[0].stop()
    wait_until(lambda: cluster.state(topic, 0)["leader"] == 1, 30, what="broker 1 elected leader")
    leader = RawClient(cluster.brokers[1].host, cluster.brokers[1].port)
    assert wait_until(lambda: raw_produce(leader, topic, [b"refused"]) == STORAGE_ERROR, 10,
                      what="KAFKA_STORAGE_ERROR from the new leader")
    for path in disk.glob("filler-*"):
        path.unlink()
    leader.close()
    more, failed = produce(cluster.bootstrap, topic, values("new-leader", 30), **{"message.timeout.ms": 20000})
    assert not failed, failed
    acked += more
    cluster.brokers[0].start()
    wait_until(lambda: isr(cluster, topic) == [0, 1, 2], 30, what="broker 0 back in the ISR")
    got = read_all(cluster.bootstrap, topic)
    assert got == sorted(acked) and [o for o, _ in got] == list(range(len(got)))
    text = cluster.brokers[1].log_text()
    assert "Traceback" not in text
    assert f"{topic}-0: ISR is now [1]\n" not in text  # elected on a full disk, it kept track of its followers
