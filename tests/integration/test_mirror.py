"""The mirror between two clusters (one ZooKeeper, chroots /live and /offline, brokers on 127.0.1.x and
127.0.2.x): sequences per partition, headers, timestamps, new topics, no loops, kill -9 of the mirror, a WAN cut
(a TCP proxy the test closes and reopens), offset translation. The default copy path (whole batches) in all of
them, the record path (``--copy records``) in the first."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from support import (
    REPO,
    BrokerProcess,
    ZooKeeperProcess,
    free_port,
    mirror_process,
    wait_until,
)
from tcp_proxy import TcpProxy

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]
COUNT = 100_000


def MirrorProcess(workdir: Path, source: str, target: str, copy: str = "batches"):
    return mirror_process(workdir, source, target, "pv|clicks|loop", "--stats-file", str(workdir / "stats.json"),
                          "--copy", copy)


@pytest.fixture
def clusters(tmp_path):
    with two_clusters(tmp_path) as made:
        yield made


@contextlib.contextmanager
def two_clusters(tmp_path, **offline_overrides):
    """The live broker behind a TCP proxy (the WAN) and two offline brokers, one ZooKeeper; mirrors the test starts
    go in ``made["mirrors"]`` and are stopped first."""
    zk = ZooKeeperProcess(tmp_path / "zk").start()
    proxy_port = free_port("127.0.1.2")
    live = BrokerProcess(tmp_path / "live", 0, host="127.0.1.1", zookeeper_connect=zk.connect + "/live",
                         num_partitions=3, group_initial_rebalance_delay_ms=0)
    live.settings["advertised.listeners"] = f"PLAINTEXT://127.0.1.2:{proxy_port}"  # clients go through the WAN
    offline = [BrokerProcess(tmp_path / f"offline{i}", i, host=f"127.0.2.{i + 1}",
                             zookeeper_connect=zk.connect + "/offline", group_initial_rebalance_delay_ms=0,
                             default_replication_factor=2, zookeeper_session_timeout_ms=3000, **offline_overrides)
               for i in range(2)]
    proxy = TcpProxy("127.0.1.2", proxy_port, live.host, live.port).start()
    mirrors: list = []
    try:
        live.start()
        for b in offline:
            b.start()
        yield {"live": f"127.0.1.2:{proxy_port}", "offline": ",".join(b.bootstrap for b in offline),
               "offline_brokers": offline, "proxy": proxy, "dir": tmp_path, "mirrors": mirrors}
    finally:
        for m in mirrors:
            m.stop()
        live.stop()
        for b in offline:
            b.stop()
        proxy.close()
        zk.stop()


def produce(bootstrap: str, topic: str, count: int, partitions: int = 3) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1, config={"retention.ms": "-1"})])[topic].result(30)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 10, "queue.buffering.max.messages": 500000})
    for i in range(count):
        while True:
            try:
                producer.produce(topic, f"v{i}".encode(), f"k{i}".encode(), headers=[("n", str(i).encode())],
                                 timestamp=1_700_000_000_000 + i)
                break
            except BufferError:
                producer.poll(0.01)
    assert producer.flush(60) == 0


def read(bootstrap: str, topic: str) -> dict[int, list]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "check", "enable.auto.commit": False})
    parts = consumer.list_topics(topic, timeout=20).topics[topic].partitions
    out: dict[int, list] = defaultdict(list)
    for p in parts:
        end = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=20)[1]
        if end == 0:
            continue
        consumer.assign([TopicPartition(topic, p, 0)])
        while (position := out[p][-1][0] + 1 if out[p] else 0) < end:
            # never more than are left: consume() waits its whole timeout for a count it cannot reach
            msgs = consumer.consume(min(10000, end - position), timeout=5)
            assert msgs, f"stuck reading {topic}-{p}"
            for m in msgs:
                assert not m.error(), m.error()
                headers = dict(m.headers() or [])
                out[p].append((m.offset(), m.key(), m.value(), m.timestamp()[1], headers))
    consumer.close()
    return out


def target_count(bootstrap: str, topic: str) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "count"})
    try:
        md = consumer.list_topics(topic, timeout=10).topics.get(topic)
        if md is None or md.error is not None:
            return 0
        return sum(consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in md.partitions)
    except KafkaException:  # e.g. a partition leader just died: ask again later
        return 0
    finally:
        consumer.close()


def warnings(mirror, limit: int = 40) -> str:
    """The mirror log's warning and error lines (a stream that failed says why there), the last ``limit``."""
    lines = [line for line in mirror.log_text().splitlines()
             if any(word in line for word in ("WARNING", "ERROR", "failed", "Traceback"))]
    return "\n".join(lines[-limit:]) or "(none)"


def check_copy(source: dict[int, list], target: dict[int, list], runs: list | None = None) -> int:
    """Every source record is on the target, same partition, key, value, headers, timestamp, in order;
    returns the number of duplicates (re-sent around a crash). ``runs`` gets (partition, [(key, value, headers)])
    for each run of target records copied again."""
    duplicates = 0
    for p, records in source.items():
        seen = []
        last = -1
        previous_duplicate = False
        for _offset, key, value, ts, headers in target[p]:
            src_offset = int(headers["logbus.mirror.offset"])
            assert headers["logbus.mirror.source"] == b"live"
            assert int(headers["logbus.mirror.partition"]) == p
            if src_offset <= last:
                duplicates += 1
                if runs is not None:
                    if not previous_duplicate:
                        runs.append((p, []))
                    runs[-1][1].append((key, value, headers))
                previous_duplicate = True
                continue
            previous_duplicate = False
            assert src_offset == last + 1, f"partition {p}: gap after source offset {last}"
            last = src_offset
            seen.append((key, value, ts, headers["n"]))
        assert seen == [(k, v, ts, h["n"]) for _o, k, v, ts, h in records], f"partition {p} differs"
    return duplicates


@pytest.mark.parametrize("copy", ["batches", "records"])
def test_mirror_copies_every_partition_in_order_and_follows_new_topics(clusters, copy):
    """Both copy paths: whole batches over the mirror's own connections (the default) and librdkafka records."""
    produce(clusters["live"], "pv", COUNT)
    mirror = MirrorProcess(clusters["dir"] / "mirror", clusters["live"], clusters["offline"], copy).start()
    clusters["mirrors"].append(mirror)
    wait_until(lambda: target_count(clusters["offline"], "pv") >= COUNT, 120, interval=1, what="all mirrored")
    assert check_copy(read(clusters["live"], "pv"), read(clusters["offline"], "pv")) == 0
    produce(clusters["live"], "clicks", 100, partitions=2)  # a new topic matching the whitelist
    wait_until(lambda: target_count(clusters["offline"], "clicks") == 100, 60, interval=1, what="new topic mirrored")
    assert len(AdminClient({"bootstrap.servers": clusters["offline"]}).list_topics(
        "clicks", timeout=10).topics["clicks"].partitions) == 2
    # a record that is itself a mirrored copy is never mirrored again
    producer = Producer({"bootstrap.servers": clusters["live"]})
    admin = AdminClient({"bootstrap.servers": clusters["live"]})  # kept alive until the result is in
    admin.create_topics([NewTopic("loop", 1, 1)])["loop"].result(30)
    producer.produce("loop", b"copy", headers=[("logbus.mirror.source", b"elsewhere")])
    producer.produce("loop", b"original")
    assert producer.flush(10) == 0
    wait_until(lambda: target_count(clusters["offline"], "loop") >= 1, 60, interval=1, what="loop topic mirrored")
    time.sleep(2)
    assert [r[2] for r in read(clusters["offline"], "loop")[0]] == [b"original"]

    def stats() -> dict | None:  # written every few seconds: wait for the one that counts the loop topic
        counted = json.loads((mirror.dir / "stats.json").read_text())
        return counted if counted["records"] >= COUNT + 101 and counted["skipped_loops"] >= 1 else None

    counted = wait_until(stats, 30, interval=0.5, what="the mirror's stats counting the loop topic")
    assert counted["records"] >= COUNT + 101 and counted["skipped_loops"] == 1 and counted["errors"] == 0, \
        f"{counted}; the mirror's warnings:\n{warnings(mirror)}"
    # offset translation: a group half way through the source partitions
    group = Consumer({"bootstrap.servers": clusters["live"], "group.id": "reports", "enable.auto.commit": False})
    group.commit(offsets=[TopicPartition("pv", p, 1000) for p in range(3)], asynchronous=False)
    group.close()
    out = subprocess.run([sys.executable, "-m", "logbus.cli", "mirror-translate", "--source-bootstrap",
                          clusters["live"], "--target-bootstrap", clusters["offline"], "--group", "reports",
                          "--source-name", "live", "--apply"], capture_output=True, text=True, timeout=60,
                         env=dict(os.environ, PYTHONPATH=str(REPO / "platform")))
    assert out.returncode == 0, out.stderr
    translated = {(t["topic"], t["partition"]): t["offset"] for t in json.loads(out.stdout)}
    target = read(clusters["offline"], "pv")
    for p in range(3):
        offset = translated[("pv", p)]
        first = target[p][offset] if offset < len(target[p]) else None
        assert first is None or int(first[4]["logbus.mirror.offset"]) <= 1000  # resumes without a gap


def test_mirror_survives_its_kill_and_a_wan_cut(clusters):
    """A slow WAN (250 KB/s each way) so that the copy is still going when the mirror is killed and when the link
    is cut for longer than the group session (the member is dropped); restored at full speed. Each fault makes the next owner copy again
    what was acknowledged and not yet committed: at most one produce round per partition, whose target records
    take about ``max.partition.fetch.bytes`` (64 KiB here; see :func:`support.mirror_process`; a batch closes once
    it reaches that, so one record more at most). Allowed per run: two rounds (a round and a record, or two
    refused-commit-then-revoke turns in a row); per partition: three runs (the kill, the cut, and one produce
    re-sent after its answer was lost). Before the cycle stopped at a refused commit, a member dropped during
    the cut copied the rest of its fetch (about 10 rounds of a 300 KB source batch) in vain."""
    produce(clusters["live"], "pv", COUNT)
    clusters["proxy"].rate = 250_000
    mirror = MirrorProcess(clusters["dir"] / "mirror", clusters["live"], clusters["offline"]).start()
    clusters["mirrors"].append(mirror)
    wait_until(lambda: target_count(clusters["offline"], "pv") > COUNT // 4, 120, interval=0.5, what="progress")
    mirror.kill9()
    mirror.start()
    wait_until(lambda: target_count(clusters["offline"], "pv") > COUNT // 2, 120, interval=0.5, what="progress")
    clusters["proxy"].cut()  # the WAN is down for a while
    time.sleep(8)
    clusters["proxy"].rate = None  # back at full speed: the copy goes on at once, whatever the group thinks
    clusters["proxy"].restore()
    at_restore = target_count(clusters["offline"], "pv")
    assert at_restore < COUNT, "the copy was over before the cut: the cut tested nothing"
    wait_until(lambda: target_count(clusters["offline"], "pv") >= COUNT, 180, interval=2,
               what="caught up after the cut")
    time.sleep(3)
    runs: list = []
    duplicates = check_copy(read(clusters["live"], "pv"), read(clusters["offline"], "pv"), runs)
    print(f"duplicates around the crash: {duplicates} in runs {[(p, len(r)) for p, r in runs]}")
    round_bytes = 65536
    for partition, run in runs:
        size = sum(len(key) + len(value) + sum(len(k) + len(v) for k, v in headers.items())
                   for key, value, headers in run)  # less than the records take in a target batch
        assert size <= 2 * round_bytes, f"partition {partition}: {len(run)} records ({size} bytes) copied again"
    assert max(Counter(p for p, _ in runs).values(), default=0) <= 3  # the kill, the cut, a produce re-sent


def test_mirror_survives_a_target_leader_failover(clusters):
    produce(clusters["live"], "pv", COUNT // 2)
    mirror = MirrorProcess(clusters["dir"] / "mirror", clusters["live"], clusters["offline"]).start()
    clusters["mirrors"].append(mirror)
    wait_until(lambda: target_count(clusters["offline"], "pv") > COUNT // 8, 120, interval=0.5, what="progress")
    admin = AdminClient({"bootstrap.servers": clusters["offline"]})
    leader = admin.list_topics("pv", timeout=10).topics["pv"].partitions[0].leader
    clusters["offline_brokers"][leader].kill9()  # the mirror's target partition loses its leader
    wait_until(lambda: target_count(clusters["offline"], "pv") >= COUNT // 2, 180, interval=2,
               what="caught up after the failover")
    time.sleep(2)
    duplicates = check_copy(read(clusters["live"], "pv"), read(clusters["offline"], "pv"))
    print(f"duplicates around the failover: {duplicates}")
    stats = json.loads((mirror.dir / "stats.json").read_text())
    assert stats["records"] >= COUNT // 2


def test_mirror_waits_on_an_empty_cluster_and_copies_topics_created_later(clusters):
    """Started before the live cluster has any topic, the mirror used to commit an empty offset list, lose its
    only stream and exit 0 (issue 16); it must wait, then copy what comes, and exit 0 only when told to."""
    mirror = MirrorProcess(clusters["dir"] / "mirror", clusters["live"], clusters["offline"]).start()
    clusters["mirrors"].append(mirror)
    wait_until(lambda: "Subscribed topic not available" in mirror.log_text() or mirror.proc.poll() is not None,
               60, interval=0.5, what="the mirror meets the empty cluster")
    time.sleep(3)
    assert mirror.proc.poll() is None, f"the mirror exited ({mirror.proc.returncode}):\n{mirror.log_text()[-3000:]}"
    produce(clusters["live"], "pv", 1000)
    wait_until(lambda: target_count(clusters["offline"], "pv") >= 1000, 120, interval=1, what="copied")
    assert check_copy(read(clusters["live"], "pv"), read(clusters["offline"], "pv")) == 0
    wait_until(lambda: (mirror.dir / "stats.json").exists(), 30, interval=0.5, what="stats")
    stats = json.loads((mirror.dir / "stats.json").read_text())
    assert stats["restarts"] == 0, mirror.log_text()[-3000:]
    mirror.stop()
    assert mirror.proc.returncode == 0
