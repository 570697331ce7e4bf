"""The audit counter's batch counting (``TierCounter._count``) against the per-message rule it replaced, and the
linear merge of ``RangeSet.update`` against one ``add`` per value."""

from __future__ import annotations

import random

import pytest
from audit.counter import TierCounter
from audit.events import HOST_HEADER, PRODUCER_HEADER, SEQUENCE_HEADER, TIME_HEADER
from audit.ranges import RangeSet, runs
from fake_messages import FakeMessage as Message

pytestmark = [pytest.mark.unit, pytest.mark.timeout(60)]


def reference(messages, window_ms):
    """One message at a time: the last header of a name wins, all three audit headers as integers (within
    int64, the time with its window's ends) or not audited, the host of a count's first message."""
    counts, positions = {}, {}
    for m in messages:
        positions[(m.topic(), m.partition())] = m.offset() + 1
        h = dict(m.headers() or [])
        try:
            producer, seq, generated = h[PRODUCER_HEADER].decode(), int(h[SEQUENCE_HEADER]), int(h[TIME_HEADER])
        except (KeyError, ValueError, TypeError, AttributeError):
            continue
        if not (-2**63 <= seq < 2**63 and -2**63 + window_ms <= generated < 2**63 - window_ms):
            continue  # beyond the snapshots' Avro longs (the window's start and end too)
        start = generated - generated % window_ms
        e = counts.setdefault((m.topic(), start, producer), {"count": 0, "seqs": RangeSet(), "end": start + window_ms,
                                                             "host": (h.get(HOST_HEADER) or b"").decode(errors="replace")})
        e["count"] += 1
        e["seqs"].add(seq)
    return {k: (v["count"], v["seqs"].as_list(), v["end"], v["host"]) for k, v in counts.items()}, positions


def counter(window_ms):
    c = TierCounter.__new__(TierCounter)  # the counting state only: no clients
    c.counts, c.positions, c.dirty, c.counted, c.window_ms = {}, {}, set(), {}, window_ms
    return c


def audit_headers(rng, producers, seqs, window, hosts):
    """The four audit headers in a random order, now and then one missing, repeated (the last one wins) or all
    of them absent (None)."""
    headers = [(PRODUCER_HEADER, rng.choice(producers)), (SEQUENCE_HEADER, rng.choice(seqs)),
               (TIME_HEADER, str(rng.randrange(-3 * window, 4 * window)).encode()), (HOST_HEADER, rng.choice(hosts))]
    rng.shuffle(headers)
    kind = rng.random()
    if kind < 0.05:
        headers.pop()
    elif kind < 0.08:
        headers.append((SEQUENCE_HEADER, b"x"))  # the last one wins: not an integer
    elif kind < 0.1:
        headers.append((PRODUCER_HEADER, None))
    elif kind < 0.12:
        headers = None
    elif kind < 0.15:
        headers.append((TIME_HEADER, b"12"))
    return headers


@pytest.mark.parametrize("seed", range(30))
def test_batches_count_what_one_message_at_a_time_counted(seed):
    rng = random.Random(seed)
    window = rng.choice([1000, 5000, 60000])
    messages, offsets = [], {}
    for i in range(rng.randrange(1, 3000)):
        topic, partition = rng.choice(["a", "b"]), rng.randrange(3)
        offsets[(topic, partition)] = offsets.get((topic, partition), -1) + 1
        headers = audit_headers(rng, [b"p1", b"p2", b"\xffp"], [str(v).encode() for v in (i, i, i, rng.randrange(3000), -i)],
                                window, [b"h1", b"h2", None])
        messages.append(Message(topic, partition, offsets[(topic, partition)], headers=headers))
    c = counter(window)
    at = 0
    while at < len(messages):
        size = rng.randrange(1, 1000)
        c._count(messages[at:at + size])
        at += size
    got = {k: (v["count"], v["seqs"].as_list(), v["end"], v["host"]) for k, v in c.counts.items()}
    want, positions = reference(messages, window)
    assert want and sum(v[0] for v in want.values()) > len(messages) // 2  # most messages are audited
    assert got == want
    assert c.positions == positions
    assert c.dirty == set(want)
    assert sum(c.counted.values()) == sum(v[0] for v in want.values())


@pytest.mark.parametrize("seed", range(20))
def test_update_merges_like_adding_each_value(seed):
    rng = random.Random(seed)
    merged, added = RangeSet(), RangeSet()
    for _ in range(rng.randrange(1, 30)):
        values = [rng.randrange(-50, 400) for _ in range(rng.randrange(0, 60))]
        merged.update(runs(values))
        for v in values:
            added.add(v)
        assert merged.as_list() == added.as_list()


def test_runs_of_unsorted_values_with_duplicates():
    assert runs([5, 3, 4, 4, 9, 1, 10, -1, 0]) == [(-1, 1), (3, 5), (9, 10)]
    assert runs([]) == []
