"""``logbus mirror --exactly-once`` between two clusters (the test_mirror rig: one ZooKeeper with /live and
/offline, the live broker behind a TCP proxy standing for the WAN): kill -9 of the mirror twice, a WAN cut and
the offline leader killed, while it copies. A read_committed reader of the offline cluster sees every source
record exactly once, in order; a read_uncommitted reader shows the aborted copies the kills left behind."""

from __future__ import annotations

import json
import time
from collections import defaultdict

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from support import mirror_process, wait_until

from test_mirror import produce, two_clusters

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]
COUNT = 60_000
TXN = dict(transaction_state_log_num_partitions=5, transaction_state_log_replication_factor=2,
           transaction_state_log_min_isr=1)


@pytest.fixture
def clusters(tmp_path):
    with two_clusters(tmp_path, **TXN) as made:
        yield made


def copies(bootstrap: str, topic: str, isolation: str) -> dict[int, list[int]]:
    """{partition: [source offsets of the copies, in target order]} up to the end of every partition."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "check", "enable.auto.commit": False,
                  "isolation.level": isolation, "enable.partition.eof": True})
    parts = list(c.list_topics(topic, timeout=20).topics[topic].partitions)
    c.assign([TopicPartition(topic, p, 0) for p in parts])
    out: dict[int, list[int]] = defaultdict(list)
    eof: set[int] = set()
    deadline = time.time() + 120
    while len(eof) < len(parts) and time.time() < deadline:
        for m in c.consume(10000, timeout=1):
            if m.error():
                if m.error().code() == -191:
                    eof.add(m.partition())
                continue
            eof.discard(m.partition())
            out[m.partition()].append(int(dict(m.headers())["logbus.mirror.offset"]))
    c.close()
    assert len(eof) == len(parts), "not at the end of every partition"
    return out


def committed_copies(bootstrap: str, topic: str) -> int:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "count", "isolation.level": "read_committed"})
    try:
        md = c.list_topics(topic, timeout=10).topics.get(topic)
        if md is None or md.error is not None:
            return 0
        return sum(c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in md.partitions)
    except Exception:  # noqa: BLE001 - a leader just died: ask again
        return 0
    finally:
        c.close()


def feed(bootstrap: str, topic: str, count: int) -> None:
    """``count`` more records to the source (the topic exists)."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 10})
    for i in range(count):
        while True:
            try:
                producer.produce(topic, f"more{i}".encode(), f"m{i}".encode())
                break
            except BufferError:
                producer.poll(0.01)
    assert producer.flush(60) == 0


def kill_in_a_transaction(mirror, clusters, topic: str, fed: list[int]) -> None:
    """kill -9 the mirror while a transaction of it is open on the target: some partition's high watermark
    (read_uncommitted) is past its last stable offset (read_committed), before the kill and still after it (a
    transaction that ended between the look and the kill, likelier on a loaded machine, does not count: the mirror
    is started again and the next one is waited for). A mirror that has already copied the backlog (fast on a quiet
    machine) is fed more records until one is seen open; ``fed[0]`` counts them all."""
    bootstrap = clusters["offline"]
    committed = Consumer({"bootstrap.servers": bootstrap, "group.id": "lso", "isolation.level": "read_committed"})
    uncommitted = Consumer({"bootstrap.servers": bootstrap, "group.id": "hw", "isolation.level": "read_uncommitted"})

    def open_now() -> bool:
        return any(uncommitted.get_watermark_offsets(TopicPartition(topic, p), timeout=5)[1] >
                   committed.get_watermark_offsets(TopicPartition(topic, p), timeout=5)[1] for p in range(3))

    try:
        deadline = time.monotonic() + 90
        next_feed = time.monotonic() + 2
        while True:
            if open_now():
                mirror.kill9()
                if open_now():  # nothing can end it now but the next InitProducerId or its timeout
                    return
                mirror.start()
            assert time.monotonic() < deadline, "no open transaction of the mirror seen"
            if time.monotonic() > next_feed:
                feed(clusters["live"], topic, 20_000)
                fed[0] += 20_000
                next_feed = time.monotonic() + 2
    finally:
        committed.close()
        uncommitted.close()


@pytest.mark.parametrize("copy", ["batches", "records"])
def test_exactly_once_across_mirror_kills_a_wan_cut_and_a_leader_failover(clusters, copy):
    """Both paths: whole batches with the transaction protocol spoken by the mirror (mirror.txn_stream, the default
    on PLAINTEXT) and librdkafka's transactional producer (``--copy records``, and every secured cluster)."""
    produce(clusters["live"], "pv", COUNT)
    fed = [COUNT]  # records on the source so far
    directory = clusters["dir"] / "mirror"
    mirror = mirror_process(directory, clusters["live"], clusters["offline"], "pv", "--exactly-once",
                            "--num.streams", "2", "--stats-file", str(directory / "stats.json"),
                            "--copy", copy).start()
    clusters["mirrors"].append(mirror)

    started = time.monotonic()

    def past(fraction):  # the LSO counts markers too: close enough to pace the faults
        wait_until(lambda: committed_copies(clusters["offline"], "pv") > COUNT * fraction, 180, interval=0.3,
                   what=f"{fraction:.0%} copied")
        print(f"{time.monotonic() - started:6.1f}s: {fraction:.0%} copied")

    past(0.25)
    kill_in_a_transaction(mirror, clusters, "pv", fed)
    mirror.start()
    past(0.45)
    clusters["proxy"].cut()
    time.sleep(8)
    clusters["proxy"].restore()
    past(0.6)
    kill_in_a_transaction(mirror, clusters, "pv", fed)
    mirror.start()
    past(0.7)
    admin = AdminClient({"bootstrap.servers": clusters["offline"]})
    leader = admin.list_topics("pv", timeout=10).topics["pv"].partitions[0].leader
    clusters["offline_brokers"][leader].kill9()
    time.sleep(2)
    clusters["offline_brokers"][leader].start()

    def complete():
        try:
            return sum(len(v) for v in copies(clusters["offline"], "pv", "read_committed").values()) >= fed[0]
        except AssertionError:
            return False

    wait_until(complete, 240, interval=3, what="every record copied")
    committed = copies(clusters["offline"], "pv", "read_committed")
    total = 0
    for p, offsets in committed.items():
        assert offsets == list(range(len(offsets))), f"partition {p}: a duplicate or a gap"
        total += len(offsets)
    assert total == fed[0]
    uncommitted = copies(clusters["offline"], "pv", "read_uncommitted")
    aborted = sum(len(v) for v in uncommitted.values()) - fed[0]
    stats = json.loads((directory / "stats.json").read_text())
    print(f"aborted copies seen by read_uncommitted: {aborted}; stats: {stats}")
    assert aborted > 0  # the kills hit open transactions: their copies exist but were never committed
