"""The whole-batch mirror stream's cycle with fakes for the group and the target: offsets are committed after
every produce round, and a round whose commit the group refuses ends the cycle (a member dropped during a WAN cut
used to copy the rest of a large fetch that its partitions' next owner then copied again). A partition assigned
before its leader is known (a source topic created a moment ago) gets its position once the leader is there,
without failing the stream."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace

import pytest
from confluent_kafka import OFFSET_INVALID, KafkaError, KafkaException, TopicPartition

from broker.protocol.batch_builder import build_batch, encode_record
from mirror.batch_stream import BatchStream
from mirror.batches import Provenance
from mirror.mirror import Counters, stoppable

pytestmark = [pytest.mark.unit, pytest.mark.timeout(30)]
KEY = ("pv", 0)
RECORDS = 200


class FakeMirror:
    """What a stream uses of :class:`mirror.mirror.Mirror`: counters, checkpoints and the group commit, which
    refuses the commits whose numbers are in ``refuse`` (1-based) and keeps their offsets, as the real one does."""

    def __init__(self, refuse: set[int]):
        self.consumer_config = {"max.partition.fetch.bytes": 4096}
        self.source_name = "live"
        self.counters = Counters()
        self.stop_event = threading.Event()
        self.checkpoints = SimpleNamespace(recorded=[], record=lambda *a: self.checkpoints.recorded.append(a),
                                           maybe_flush=lambda: None)
        self.refuse = refuse
        self.commits: list[dict] = []

    def _commit(self, consumer, uncommitted: dict) -> bool:
        self.commits.append(dict(uncommitted))
        if len(self.commits) in self.refuse:
            return False
        uncommitted.clear()
        return True


def stream_with_one_large_fetch(refuse: set[int]) -> tuple[BatchStream, list]:
    """A stream owning pv-0 at offset 0 whose fetch brings one source batch of 200 records (about 8 KB, twice the
    partition's fetch size: a fetch returns a first batch whole however large)."""
    m = FakeMirror(refuse)
    stream = BatchStream(m, 0, backoff=SimpleNamespace(next=lambda: 0.0, reset=lambda: None))
    stream.consumer = object()
    stream.positions = {KEY: 0}
    stream.provenance = {KEY: Provenance("live", 0)}
    stream.target_of = {KEY: 0}
    batch = build_batch([encode_record(i, f"k{i}".encode(), f"value {i:06d}".encode()) for i in range(RECORDS)],
                        timestamp_ms=1_700_000_000_000, base_offset=0)
    fetched = SimpleNamespace(records=batch, aborted_transactions=(), last_stable_offset=-1,
                              high_watermark=RECORDS)
    stream._fetch = lambda: {KEY: fetched}
    stream._send_fetches = lambda positions: []  # no prefetch
    produced: list = []
    stream.produced_by = {}  # partition -> its batches, in order

    def produce_round(todo, encoded, targets):
        for key, batch in todo.items():
            targets[key] = sum(b.count for b in produced) + batch.count - 1
            produced.append(batch)
            stream.produced_by.setdefault(key, []).append(batch)
        return {}

    stream._produce_round = produce_round
    return stream, produced


def test_a_cycle_commits_after_every_round_and_ends_at_the_fetch_end():
    stream, produced = stream_with_one_large_fetch(refuse=set())
    assert stream._cycle()
    stream._commit()
    assert len(produced) >= 2  # the fetch is split into target batches no larger than a partition's fetch share
    assert sum(b.count for b in produced) == RECORDS
    assert stream.positions[KEY] == RECORDS and not stream.held
    committed = [c[KEY] for c in stream.m.commits]
    assert committed == [b.last_source_offset + 1 for b in produced]  # after each round, the last one by run()
    assert stream.m.counters.records == RECORDS


def test_a_refused_commit_ends_the_cycle_at_the_round_it_followed():
    stream, produced = stream_with_one_large_fetch(refuse={2, 3})
    assert stream._cycle()
    assert len(produced) == 2, "rounds were produced after the group refused a commit"
    assert stream.held
    assert stream.positions[KEY] == stream.uncommitted[KEY] == produced[1].last_source_offset + 1
    assert stream.m.counters.records == produced[0].count + produced[1].count
    assert stream.m.checkpoints.recorded[-1][2:] == (produced[1].last_source_offset, produced[0].count
                                                      + produced[1].count - 1)
    stream._commit()  # refused again (the third): still held, the positions kept for the next try
    assert stream.held and stream.uncommitted[KEY] == produced[1].last_source_offset + 1
    stream._commit()
    assert not stream.held and not stream.uncommitted
    assert stream._cycle()  # the copy goes on from the acknowledged position: no gap, nothing copied twice
    stream._commit()
    sources = [b.last_source_offset for b in produced]
    assert sources == sorted(set(sources)) and sources[-1] == RECORDS - 1
    assert sum(b.count for b in produced) == RECORDS


def test_a_cycle_stopped_early_keeps_each_partition_at_what_the_target_acknowledged():
    """Two partitions, one fetch each: pv-1 fits one round, pv-0 takes several. The group refuses the commit after
    the second round: pv-1 (done in the first round) moves to its fetch's end, pv-0 to its second round's end;
    the next cycle's fetch, sent ahead with the cycle's end positions, is dropped for pv-0 (it would leave a gap)
    and used for pv-1."""
    stream, produced = stream_with_one_large_fetch(refuse={2})
    small = ("pv", 1)
    stream.positions[small] = 0
    stream.provenance[small] = Provenance("live", 1)
    stream.target_of[small] = 1
    big_fetch = stream._fetch()[KEY]
    small_batch = build_batch([encode_record(i, b"k", b"v") for i in range(3)], timestamp_ms=1_700_000_000_000,
                              base_offset=0)
    fetched = {KEY: big_fetch, small: SimpleNamespace(records=small_batch, aborted_transactions=(),
                                                       last_stable_offset=-1, high_watermark=3)}
    stream._fetch = lambda: fetched
    ahead: list[dict] = []

    def send_fetches(positions):
        ahead.append(dict(positions))
        return [(0, dict(positions))]

    stream._send_fetches = send_fetches
    assert stream._cycle()
    pv0 = stream.produced_by[KEY]
    assert len(pv0) == 2 and len(stream.produced_by[small]) == 1
    assert stream.held
    assert stream.positions[small] == 3  # all of it acknowledged in the first round
    assert stream.positions[KEY] == pv0[1].last_source_offset + 1 < RECORDS
    assert ahead == [{KEY: RECORDS, small: 3}]  # the fetch sent ahead assumed the whole cycle
    response = SimpleNamespace(responses=[SimpleNamespace(topic="pv", partitions=[
        SimpleNamespace(partition_index=p, error_code=0, records=b"", aborted_transactions=(),
                        last_stable_offset=-1, high_watermark=RECORDS) for p in (0, 1)])])
    stream.source.connections[0] = SimpleNamespace(pending=True, receive=lambda: response)
    received = stream._receive_fetches(stream.prefetched)
    assert set(received) == {small}, "a fetch from past pv-0's acknowledged position would leave a gap"


def test_the_fetch_waits_as_the_consumer_config_says():
    """fetch.min.bytes and fetch.wait.max.ms (librdkafka's names, as the topology writes them) become the Fetch's
    min_bytes and max_wait: a fetch waits for that many bytes or that long, so quiet traffic is copied in fewer,
    larger cycles. Unset: 1 byte (librdkafka's default) and 100 ms (this path's own; librdkafka's is 500). The
    minimum is capped at what one partition's answer can hold, else a leader of one partition never reaches it."""
    m = FakeMirror(set())
    m.consumer_config = {"fetch.min.bytes": "262144", "fetch.wait.max.ms": "100"}
    stream = BatchStream(m, 0, backoff=SimpleNamespace(next=lambda: 0.0, reset=lambda: None))
    sent = []
    stream.source = SimpleNamespace(get=lambda leader: SimpleNamespace(
        send=lambda api, version, request: sent.append((leader, request))))
    stream.source_leader = {KEY: 2}
    assert stream._send_fetches({KEY: 5}) == [(2, {KEY: 5})]
    (leader, request), = sent
    assert (leader, request.min_bytes, request.max_wait.total_seconds()) == (2, 262144, 0.1)
    assert request.topics[0].partitions[0].fetch_offset == 5
    default = BatchStream(FakeMirror(set()), 0, backoff=None)
    assert (default.fetch_min_bytes, default.fetch_wait_ms) == (1, 100)
    capped = FakeMirror(set())
    capped.consumer_config = {"fetch.min.bytes": 262144, "max.partition.fetch.bytes": 65536}
    assert BatchStream(capped, 0, backoff=None).fetch_min_bytes == 65536


def unknown_partition() -> KafkaException:
    """What librdkafka's get_watermark_offsets raises at once while its metadata shows the partition without a
    leader (seen with the mirror on a partition whose leader is away: the stream failed on it, again and again)."""
    return KafkaException(KafkaError(KafkaError._UNKNOWN_PARTITION,
                                     "Failed to get watermark offsets: Local: Unknown partition"))


def stream_of_a_new_topic() -> tuple[BatchStream, SimpleNamespace]:
    """A stream whose mirror wants every topic, sees 2 partitions on both sides and no metadata yet."""
    m = FakeMirror(set())
    m.wanted = lambda topic: True
    m._source_partitions = lambda consumer, topic: 2
    m.ensure_target = lambda topic, count: 2
    no_metadata = SimpleNamespace(brokers={}, topics={})
    m.target_admin = SimpleNamespace(list_topics=lambda timeout: no_metadata)
    return BatchStream(m, 0, backoff=SimpleNamespace(next=lambda: 0.0, reset=lambda: None)), no_metadata


def test_a_new_partition_whose_leader_is_not_known_yet_gets_its_position_without_failing_the_stream():
    """CI: a topic created on the live cluster while the mirror ran; the group assigned its partitions while the
    source's metadata still showed them without a leader, the ListOffsets of their starting position raised
    _UNKNOWN_PARTITION, and the stream failed (an error, a restart) instead of asking again."""
    stream, no_metadata = stream_of_a_new_topic()
    asked: list = []

    def watermarks(tp, timeout):
        asked.append(tp.partition)
        if len(asked) <= 2:
            raise unknown_partition()
        return 7, 9

    stream.consumer = SimpleNamespace(
        committed=lambda tps, timeout: [TopicPartition(tp.topic, tp.partition, OFFSET_INVALID) for tp in tps],
        get_watermark_offsets=watermarks, list_topics=lambda timeout: no_metadata)
    stream.assigned = [TopicPartition("clicks", 0), TopicPartition("clicks", 1)]
    stream._start_assigned()
    assert stream.positions == {("clicks", 0): 7, ("clicks", 1): 7}  # earliest: the low watermark
    assert asked == [0, 0, 0, 1]
    assert stream.target_of == {("clicks", 0): 0, ("clicks", 1): 1}


def test_a_partition_whose_committed_offset_came_back_with_an_error_is_asked_again_or_fails_the_stream():
    """librdkafka puts a partition's error in ``tp.error`` instead of raising: read as "nothing committed", the
    partition would start at auto.offset.reset (with latest: records skipped). A transient error is asked again;
    any other fails the stream."""
    stream, no_metadata = stream_of_a_new_topic()
    errors = [KafkaError(KafkaError.COORDINATOR_LOAD_IN_PROGRESS), None]

    def committed(tps, timeout):
        error = errors.pop(0) if errors else None
        return [SimpleNamespace(topic=tp.topic, partition=tp.partition, offset=3,  # tp.error: read-only
                                error=error if tp.partition else None) for tp in tps]

    stream.consumer = SimpleNamespace(committed=committed, list_topics=lambda timeout: no_metadata)
    stream.assigned = [TopicPartition("clicks", 0), TopicPartition("clicks", 1)]
    stream._start_assigned()
    assert stream.positions == {("clicks", 0): 3, ("clicks", 1): 3} and errors == []

    errors[:] = [KafkaError(KafkaError.GROUP_AUTHORIZATION_FAILED)]
    stream.positions.clear()
    stream.assigned = [TopicPartition("clicks", 0), TopicPartition("clicks", 1)]
    with pytest.raises(KafkaException):
        stream._start_assigned()
    assert stream.positions == {}


def test_stoppable_asks_again_after_transient_errors_only_and_until_its_deadline_or_a_stop():
    stop = threading.Event()
    answers = iter([unknown_partition(), KafkaException(KafkaError(KafkaError._WAIT_COORD)), "answer"])

    def call(timeout):
        answer = next(answers)
        if isinstance(answer, Exception):
            raise answer
        return answer

    assert stoppable(call, stop, 10, pause_s=0.01) == "answer"
    refused = KafkaException(KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED))
    calls: list = []

    def refuse(timeout):
        calls.append(timeout)
        raise refused

    with pytest.raises(KafkaException) as raised:
        stoppable(refuse, stop, 10, pause_s=0.01)
    assert raised.value is refused and len(calls) == 1  # not transient: raised at once

    def leaderless(timeout):
        calls.append(timeout)
        raise unknown_partition()

    calls.clear()
    started = time.monotonic()
    with pytest.raises(KafkaException):
        stoppable(leaderless, stop, 0.3, pause_s=0.05)  # still there at the deadline: raised
    assert 0.3 <= time.monotonic() - started < 2 and len(calls) >= 3
    calls.clear()
    stop.set()
    with pytest.raises(KafkaException):
        stoppable(leaderless, stop, 10, pause_s=0.05)  # stopping: not asked again
    assert len(calls) == 1
