"""Long-running services ride out their clients' errors (issue 16): the mirror's commits and streams, the audit
counter's rounds, the audited producer's window roll-over. Fakes stand in for the Kafka clients here; the
integration tests run the same services against real brokers."""

from __future__ import annotations

import json
import threading
import time

import pytest
from confluent_kafka import KafkaError, KafkaException

from audit.counter import TierCounter
from logbus.retry import Backoff
from fake_messages import FakeMessage
from mirror.mirror import Mirror

pytestmark = [pytest.mark.unit, pytest.mark.timeout(60)]
NOWHERE = "127.0.0.1:9"  # the discard port: clients are created, never used against it


class FakeTP:
    def __init__(self, topic, partition):
        self.topic, self.partition = topic, partition


class FakeConsumer:
    def __init__(self, batches=(), refuse_commits=0, assigned=(("pv", 0),)):
        self.batches = list(batches)
        self.refuse_commits = refuse_commits
        self.commits: list[dict] = []
        self.assigned = [FakeTP(t, p) for t, p in assigned]
        self.closed = False

    def subscribe(self, _patterns):
        pass

    def consume(self, _n, timeout=0):
        if self.batches:
            return self.batches.pop(0)
        time.sleep(min(timeout, 0.01))
        return []

    def commit(self, offsets, asynchronous=True):
        if self.refuse_commits:
            self.refuse_commits -= 1
            raise KafkaException(KafkaError(KafkaError.REBALANCE_IN_PROGRESS))
        if not offsets:
            raise KafkaException(KafkaError(KafkaError._NO_OFFSET))  # what librdkafka does
        self.commits.append({(tp.topic, tp.partition): tp.offset for tp in offsets})

    def assignment(self):
        return self.assigned

    def position(self, _tps):
        return []

    def list_topics(self, topic=None, timeout=0):
        raise AssertionError("not used: the partition count is cached")

    def close(self):
        self.closed = True


class FakeProducer:
    def __init__(self, refuse=False):
        self.refuse = refuse
        self.queue: list = []
        self.produced = 0

    def produce(self, topic, value=None, key=None, on_delivery=None, **kwargs):
        self.queue.append(on_delivery)

    def poll(self, _t=0):
        return 0

    def flush(self, _t=-1):
        for cb in self.queue:
            if cb is not None:
                if self.refuse:
                    cb(KafkaError(KafkaError.MSG_SIZE_TOO_LARGE), None)
                else:
                    self.produced += 1
                    cb(None, _Delivered(self.produced))
        self.queue.clear()
        return 0


class _Delivered:
    def __init__(self, offset):
        self._o = offset

    def offset(self):
        return self._o


class FakeCheckpoints:
    def __init__(self):
        self.recorded = []

    def record(self, *args):
        self.recorded.append(args)

    def maybe_flush(self, force=False):
        return True

    def close(self):
        pass


@pytest.fixture
def mirror():
    m = Mirror({"bootstrap.servers": NOWHERE}, {"bootstrap.servers": NOWHERE}, "pv", source_name="live",
               copy="records")
    m.checkpoints = FakeCheckpoints()
    m._source_partition_cache["pv"] = 1
    m.target_partitions["pv"] = 1
    return m


def test_backoff_doubles_to_its_cap_and_resets():
    b = Backoff(0.5, 4.0, jitter=0)
    assert [b.next() for _ in range(6)] == [0.5, 1.0, 2.0, 4.0, 4.0, 4.0]
    b.reset()
    assert b.next() == 0.5
    jittered = Backoff(1.0, 1.0, jitter=0.2)
    assert all(0.8 <= jittered.next() <= 1.0 for _ in range(50))


def test_mirror_batch_of_only_errors_commits_nothing(mirror):
    """The crash of an empty live cluster: consume() returns only 'Subscribed topic not available'."""
    consumer = FakeConsumer()
    error = FakeMessage(None, -1, -1, KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART))
    assert mirror._copy(consumer, FakeProducer(), [error], {}) is False
    assert consumer.commits == []


def test_mirror_refused_commit_is_retried_with_the_next_batch(mirror):
    consumer, producer, uncommitted = FakeConsumer(refuse_commits=1), FakeProducer(), {}
    assert mirror._copy(consumer, producer, [FakeMessage("pv", 0, o) for o in range(3)], uncommitted) is False
    assert uncommitted == {("pv", 0): 3} and consumer.commits == []
    assert mirror.counters.commit_failures == 1 and mirror.counters.records == 3  # the copy itself succeeded
    assert mirror._copy(consumer, producer, [FakeMessage("pv", 0, 3)], uncommitted) is True
    assert consumer.commits == [{("pv", 0): 4}] and uncommitted == {}


def test_mirror_drops_revoked_partitions_from_a_retried_commit(mirror):
    consumer = FakeConsumer(refuse_commits=1, assigned=[("pv", 0)])
    uncommitted = {("pv", 1): 10}  # copied before a rebalance took partition 1 away
    mirror._copy(consumer, FakeProducer(), [FakeMessage("pv", 0, 0)], uncommitted)
    assert uncommitted == {("pv", 0): 1}
    assert mirror._commit(consumer, uncommitted) is True
    assert consumer.commits == [{("pv", 0): 1}]


def test_mirror_stream_restarts_after_a_refused_record_and_copies_again(mirror):
    """A record the target refuses fails the batch; the stream restarts with new clients from the committed
    offsets instead of ending (which used to make the whole mirror exit 0)."""
    batch = [FakeMessage("pv", 0, o) for o in range(5)]
    consumers = [FakeConsumer([list(batch)]), FakeConsumer([list(batch)])]
    producers = [FakeProducer(refuse=True), FakeProducer()]
    made = {"consumers": [], "producers": []}

    def new_consumer():
        c = consumers.pop(0) if consumers else FakeConsumer()
        made["consumers"].append(c)
        return c

    def new_producer():
        p = producers.pop(0) if producers else FakeProducer()
        made["producers"].append(p)
        return p

    mirror.new_consumer, mirror.new_producer = new_consumer, new_producer
    thread = threading.Thread(target=mirror._stream, args=(0,), daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and not (len(made["consumers"]) >= 2 and made["consumers"][1].commits):
        time.sleep(0.05)
    mirror.stop()
    thread.join(10)
    assert not thread.is_alive()
    assert mirror.counters.restarts == 1 and mirror.counters.errors == 1
    assert made["consumers"][0].commits == [] and made["consumers"][0].closed  # nothing committed past the refusal
    assert made["consumers"][1].commits == [{("pv", 0): 5}]
    assert mirror.counters.records == 5


class FlakyAuditProducer:
    def __init__(self, unacknowledged=0):
        self.unacknowledged = unacknowledged
        self.sent = []

    def produce(self, topic, value, on_delivery=None):
        self.sent.append(value)

    def flush(self, _t=-1):
        if self.unacknowledged:
            self.unacknowledged -= 1
            return 1
        return 0


def _counter() -> TierCounter:
    counter = TierCounter("live", {"bootstrap.servers": NOWHERE}, "pv", "http://127.0.0.1:9", emit_interval_ms=10)
    counter.serializer = lambda event, _ctx: event
    return counter


def test_counter_keeps_its_counts_dirty_when_the_audit_cluster_does_not_take_them():
    """Snapshots that were not acknowledged used to be dropped from the next round (the counts went stale)."""
    counter = _counter()
    counter.producer = FlakyAuditProducer(unacknowledged=1)
    counter.counts[("pv", 0, "p1")] = {"count": 2, "seqs": _ranges(0, 1), "end": 60000, "host": "h"}
    counter.positions[("pv", 0)] = 2
    counter.dirty.add(("pv", 0, "p1"))
    with pytest.raises(RuntimeError, match="not acknowledged"):
        counter.emit()
    assert counter.dirty == {("pv", 0, "p1")}
    assert [e["producer_id"] for e in counter.producer.sent] == ["p1"]  # no round marker for an unfinished round
    assert counter.emit() is True
    assert [e["producer_id"] for e in counter.producer.sent] == ["p1", "p1", "__round__"]
    assert counter.dirty == set()


def test_counter_starts_again_from_the_last_round_after_a_failure():
    counter = _counter()
    calls = []

    def recover():
        calls.append("recover")
        if len(calls) == 1:
            raise KafkaException(KafkaError(KafkaError._UNKNOWN_PARTITION))  # _audit being created

    def count_until(stop, backoff):
        calls.append("count")

    counter.recover, counter._count_until = recover, count_until
    counter.producer = FlakyAuditProducer()
    counter.producer.purge = lambda **kw: None
    counter._new_producer = lambda: counter.producer
    started = time.monotonic()
    counter.run(stop=lambda: time.monotonic() - started > 15)
    assert calls == ["recover", "recover", "count"] and counter.restarts == 1


def _ranges(first, last):
    from audit.ranges import RangeSet

    r = RangeSet()
    for s in range(first, last + 1):
        r.add(s)
    return r


def test_audited_producer_counts_nothing_when_the_window_event_cannot_be_serialized():
    """A registry outage at a window roll-over used to send the record but leave it out of every count."""
    from audit.producer import AuditedProducer

    producer = AuditedProducer({"bootstrap.servers": NOWHERE, "schema.registry.url": "http://127.0.0.1:9",
                                "audit.window.ms": 1000})
    sent = []
    producer._producer = type("P", (), {"produce": lambda self, topic, *args, **kw: sent.append(topic)})()
    outage = [1]

    def serializer(event, _ctx):
        if outage:
            outage.pop()
            raise ConnectionError("registry away")
        return repr(event).encode()

    producer._serializer = serializer
    producer.produce("pv", b"a", timestamp=500)
    with pytest.raises(ConnectionError):
        producer.produce("pv", b"b", timestamp=1500)  # rolls window 0 over: its event cannot be serialized
    assert sent == ["pv"] and producer._windows["pv"].count == 1
    producer.produce("pv", b"b", timestamp=1500)  # tried again: the old window's event, then the record
    assert sent == ["pv", "_audit", "pv"]
    assert producer._windows["pv"].start == 1000 and producer._windows["pv"].count == 1
    assert producer._windows["pv"].first_seq == 1


def test_audited_producer_headers_partition_and_windows():
    """What each record carries (the caller's headers first, then host, producer, sequence and time) and when a
    window's event goes out: when a record of another window comes, earlier ones included."""
    from audit.events import HOST_HEADER, PRODUCER_HEADER, SEQUENCE_HEADER, TIME_HEADER
    from audit.producer import AuditedProducer

    producer = AuditedProducer({"bootstrap.servers": NOWHERE, "schema.registry.url": "http://127.0.0.1:9",
                                "audit.window.ms": 1000, "audit.host": "h1"})
    sent = []
    producer._producer = type("P", (), {"produce": lambda self, topic, *args, **kw: sent.append((topic, args, kw))})()
    producer._serializer = lambda event, _ctx: json.dumps(event).encode()
    audit = [(HOST_HEADER, b"h1"), (PRODUCER_HEADER, producer.producer_id.encode())]
    producer.produce("pv", b"a", timestamp=1200, headers={"x": b"1"}, partition=2)
    producer.produce("pv", b"bb", key=b"k", timestamp=1999, headers=[("y", b"2")], on_delivery=print)
    producer.produce("pv", b"c", timestamp=900)  # an earlier window: window 1000's event first
    assert [t for t, _, _ in sent] == ["pv", "pv", "_audit", "pv"]
    first, second, event, third = (kw for _, _, kw in sent)
    assert first == {"value": b"a", "key": None, "timestamp": 1200, "partition": 2,
                     "headers": [("x", b"1"), *audit, (SEQUENCE_HEADER, b"0"), (TIME_HEADER, b"1200")]}
    assert second == {"value": b"bb", "key": b"k", "timestamp": 1999, "on_delivery": print,
                      "headers": [("y", b"2"), *audit, (SEQUENCE_HEADER, b"1"), (TIME_HEADER, b"1999")]}
    assert "partition" not in second and third["headers"][-2:] == [(SEQUENCE_HEADER, b"2"), (TIME_HEADER, b"900")]
    published = json.loads(sent[2][1][0])  # the serialized event of window [1000, 2000)
    assert (published["window_start"], published["count"], published["bytes"], published["first_seq"],
            published["last_seq"]) == (1000, 2, 3, 0, 1)
    w = producer._windows["pv"]
    assert (w.start, w.end, w.count, w.first_seq, w.last_seq, w.bytes) == (0, 1000, 1, 2, 2, 1)


class AuditLog:
    """A fake audit cluster: produce appends to a partition and reports the offset, as librdkafka's delivery
    report does; ``visible`` bounds what a reader sees per partition (a restarted broker's high watermark)."""

    def __init__(self, partitions=3):
        self.partitions = [[] for _ in range(partitions)]
        self.visible: dict[int, int] = {}
        self.turn = 0

    def produce(self, topic, value, on_delivery=None):
        p = self.turn % len(self.partitions)  # spread like keyless produce
        self.turn += 1
        self.partitions[p].append(value)
        if on_delivery:
            on_delivery(None, FakeMessage(topic, p, len(self.partitions[p]) - 1))

    def flush(self, _t=-1):
        return 0

    def read_to_end(self, *_a, **_k):
        for p, records in enumerate(self.partitions):
            for offset, value in enumerate(records[: self.visible.get(p, len(records))]):
                m = FakeMessage("_audit", p, offset)
                m.value = lambda v=value: v
                yield m


def test_counter_recovery_waits_for_the_snapshots_its_last_round_relies_on(monkeypatch):
    """After both brokers of a cluster restart, a partition whose new leader was a follower shows less (its
    high-watermark checkpoint) than one whose leader stayed: the last round marker can be visible while a snapshot
    it relies on is not. Counting on from there would lose that snapshot's counts for good: recovery refuses
    until it reads far enough."""
    import audit.counter as counter_module

    cluster = AuditLog()
    monkeypatch.setattr(counter_module, "read_to_end", cluster.read_to_end)
    counter = _counter()
    counter.decoder.decode = lambda value: value
    counter.producer = cluster
    for seq in range(3):  # three rounds, one snapshot each, then its marker
        counter.counts[("pv", 0, "p1")] = {"count": seq + 1, "seqs": _ranges(0, seq), "end": 60000, "host": "h"}
        counter.positions[("pv", 0)] = seq + 1
        counter.dirty.add(("pv", 0, "p1"))
        assert counter.emit()
        time.sleep(0.002)  # rounds are emitted_at apart (the emit interval)
    marker = cluster.partitions[2][-1]  # rounds go snapshot, marker, snapshot, marker, ...: the last marker
    assert marker["producer_id"] == "__round__" and marker["sequences"] == [[0, 1], [1, 1], [2, 0]]
    assert cluster.partitions[1][1]["count"] == 3  # the third snapshot (turn 4): partition 1, offset 1

    cluster.visible = {1: 1}  # partition 1 shows only its first record: the third round's snapshot is hidden
    fresh = _counter()
    fresh.decoder.decode = lambda value: value
    with pytest.raises(counter_module.IncompleteRound, match=r"_audit\[1\] readable to offset 0"):
        fresh.recover()
    cluster.visible = {}
    fresh._reset()
    fresh.recover()
    assert fresh.counts[("pv", 0, "p1")]["count"] == 3 and fresh.positions == {("pv", 0): 3}
    assert fresh.stored == {0: 0, 1: 1, 2: 0}  # the snapshots relied on

    # a cluster that lost what it acknowledged (an unclean election): after recovery_wait_s, count on anyway
    cluster.visible = {1: 1}
    fresh._reset()
    fresh.recovery_wait_s = 0.2
    with pytest.raises(counter_module.IncompleteRound):
        fresh.recover()
    time.sleep(0.3)
    fresh._reset()
    fresh.recover()
    assert fresh.counts[("pv", 0, "p1")]["count"] == 2  # the second round's snapshot: the third is gone


def test_counter_fetches_wait_for_bytes_within_what_the_config_lets_a_fetch_carry():
    """A counter is not latency-bound: its fetches wait for 1 MiB or 500 ms, never for more than one fetch of the
    configured sizes can bring (it would wait the whole 500 ms every time), and a config's own settings win."""
    base = {"bootstrap.servers": NOWHERE}
    default = TierCounter("live", base, "pv", "http://127.0.0.1:9").consumer_config
    assert (default["fetch.min.bytes"], default["fetch.wait.max.ms"], default["client.id"]) == \
        (1 << 20, 500, "logbus-audit-live")
    small = TierCounter("live", {**base, "max.partition.fetch.bytes": "262144"}, "pv", "http://127.0.0.1:9")
    assert small.consumer_config["fetch.min.bytes"] == 262144
    own = TierCounter("offline", {**base, "fetch.min.bytes": 1, "client.id": "mine"}, "pv", "http://127.0.0.1:9")
    assert (own.consumer_config["fetch.min.bytes"], own.consumer_config["client.id"]) == (1, "mine")


def test_a_counter_that_could_not_reach_its_cluster_starts_again_once_it_answers():
    """After an outage its backoff has grown (up to 30 s): it is cut short when the cluster answers again. A failure
    of the counting itself keeps the whole pause."""
    from types import SimpleNamespace

    counter = _counter()
    answers = iter([False, True])
    counter.producer = SimpleNamespace(list_topics=lambda timeout: SimpleNamespace(
        brokers={1: "b"} if next(answers, True) else {}))
    started = time.monotonic()
    counter._wait(30.0, stop=lambda: False, probe=True)
    assert 2.5 < time.monotonic() - started < 6  # asked at 1 s (no brokers yet), then at 3 s (answers)
    started = time.monotonic()
    counter._wait(1.5, stop=lambda: False, probe=False)
    assert time.monotonic() - started >= 1.5
    from audit.counter import _unreachable

    assert _unreachable(KafkaException(KafkaError(KafkaError._TRANSPORT)))
    assert not _unreachable(KafkaException(KafkaError(KafkaError._UNKNOWN_PARTITION)))
    assert not _unreachable(RuntimeError("a bug"))
