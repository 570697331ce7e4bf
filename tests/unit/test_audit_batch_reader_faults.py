"""The audit counter's batch reader (audit.batch_reader) against answers a real broker rarely gives on demand, with
a fake connection pool: out-of-range answers without watermarks (as Kafka sends them), many partitions failing
at once, codes the codec does not know, a refused partition among good ones, and the Fetch sent ahead."""

from __future__ import annotations

from types import SimpleNamespace as NS

import pytest
from audit import batch_reader
from audit.batch_reader import BatchReader
from broker.protocol.batch_builder import build_batch, encode_record
from broker.protocol.messages import ErrorCode
from fake_pool import FakePool

pytestmark = [pytest.mark.unit, pytest.mark.timeout(30)]


def partition(p, error=ErrorCode.none, records=b"", low=0, high=0):
    return NS(partition_index=p.partition, error_code=int(error) if isinstance(error, ErrorCode) else error,
              high_watermark=high, log_start_offset=low, last_stable_offset=high, aborted_transactions=None,
              records=records)


def reader(answer, conf=None, watermarks=None, leaders=None):
    r = BatchReader(conf or {}, "test", watermarks)
    r.pool = FakePool(answer)
    r.leaders = leaders or {("t", 0): 1}
    r.stale = False
    return r


@pytest.fixture
def sleeps(monkeypatch):
    calls = []
    monkeypatch.setattr(batch_reader.time, "sleep", calls.append)
    return calls


def test_an_out_of_range_answer_without_watermarks_asks_list_offsets(sleeps):
    asked = []

    def watermarks(topic, p):
        asked.append((topic, p))
        return 40, 90

    r = reader(lambda t, p: partition(p, ErrorCode.offset_out_of_range, low=-1, high=-1), watermarks=watermarks)
    assert r.read({("t", 0): 5}) == [("t", 0, [], 40)]  # deleted by retention: the log's start
    assert r.read({("t", 0): 120}) == [("t", 0, [], 90)]  # past the end (a truncated log): the end
    assert asked == [("t", 0), ("t", 0)] and not sleeps
    latest = reader(lambda t, p: partition(p, ErrorCode.offset_out_of_range, low=40, high=90),
                    conf={"auto.offset.reset": "latest"})
    assert latest.read({("t", 0): 5}) == [("t", 0, [], 90)]  # the setting, when given, decides
    blind = reader(lambda t, p: partition(p, ErrorCode.offset_out_of_range, low=-1, high=-1))
    assert blind.read({("t", 0): 5}) == [] and blind.stale and sleeps == [batch_reader.TROUBLE_PAUSE_S]


def test_a_hundred_failing_partitions_cost_one_pause_and_no_fetch_ahead(sleeps):
    leaders = {("t", i): 1 + i % 3 for i in range(100)}
    r = reader(lambda t, p: partition(p, ErrorCode.not_leader_or_follower), leaders=leaders)
    assert r.read({k: 0 for k in leaders}) == []
    assert sleeps == [batch_reader.TROUBLE_PAUSE_S] and r.stale
    assert r.inflight is None and all(len(c.sent) == 1 for c in r.pool.connections.values())


def test_a_refused_or_unknown_code_stops_only_its_partition(sleeps, caplog):
    batch = build_batch([encode_record(0, None, b"v")], timestamp_ms=0, base_offset=7)

    def answer(t, p):
        return {0: partition(p, ErrorCode.topic_authorization_failed), 1: partition(p, 9999),
                2: partition(p, records=batch, high=8)}[p.partition]

    leaders = {("t", 0): 1, ("t", 1): 1, ("t", 2): 2}
    r = reader(answer, leaders=leaders)
    for _ in range(2):
        got = r.read({("t", 0): 3, ("t", 1): 3, ("t", 2): 7})
        assert [(t, p, len(b), after) for t, p, b, after in got] == [("t", 2, 1, 8)]
    assert sleeps == [batch_reader.TROUBLE_PAUSE_S] * 2 and not r.stale  # a pause, not a metadata storm
    warnings = [m for m in caplog.messages if "the other partitions are counted on" in m]
    assert len(warnings) == 2  # once per partition in a minute


def test_the_fetch_sent_ahead_is_used_when_the_positions_match_and_dropped_otherwise(sleeps):
    batches = {7: build_batch([encode_record(0, None, b"a"), encode_record(1, None, b"b")], timestamp_ms=0,
                              base_offset=7)}
    r = reader(lambda t, p: partition(p, records=batches.get(p.fetch_offset, b""), high=9),
               leaders={("t", 0): 1, ("t", 1): 2})
    got = r.read({("t", 0): 7})
    assert [(t, p, after) for t, p, _, after in got] == [("t", 0, 9)]
    conn = r.pool.connections[1]
    assert [req.topics[0].partitions[0].fetch_offset for req in conn.sent] == [7, 9]  # the next one already out
    assert r.read({("t", 0): 9}) == [] and len(conn.sent) == 3  # the answer sent ahead, and the next ahead again
    assert r.read({("t", 0): 9, ("t", 1): 0}) == []  # other partitions: the one sent ahead is dropped
    assert r.pool.dropped == [1] and not sleeps


def test_a_batch_larger_than_the_partition_share_is_reported(sleeps, caplog):
    big = build_batch([encode_record(0, None, b"x" * 2000)], timestamp_ms=0, base_offset=0)
    r = reader(lambda t, p: partition(p, records=big[:1024], high=1), conf={"max.partition.fetch.bytes": 1024})
    assert r.read({("t", 0): 0}) == []
    assert any("no whole batch" in m for m in caplog.messages) and sleeps == [batch_reader.TROUBLE_PAUSE_S]
