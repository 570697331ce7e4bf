"""The warehouse tier's counts taken in the source's pass (:mod:`spark_jobs.tier_counts`) against a plain Python
reference: rows per (producer, window) and the maximal runs of their distinct sequence numbers, whatever the
split into ranges and batches, with duplicates, gaps, rows without audit columns, undecodable rows and negative
generation times (Java's remainder, as the SQL expression had it)."""

from __future__ import annotations

import math
import random

import pyarrow as pa
import pytest
from audit.ranges import runs
from spark_jobs import tier_counts

pytestmark = [pytest.mark.unit, pytest.mark.timeout(60)]
WINDOW = 1000


def reference(rows: list[dict], topic: str) -> list[dict]:
    groups: dict[tuple[str, int], list] = {}
    for r in rows:
        if r["_error"] is not None or None in (r["_producer"], r["_seq"], r["_generated"]):
            continue
        g = r["_generated"]
        window = g - int(math.fmod(g, WINDOW))
        entry = groups.setdefault((r["_producer"], window), [0, set()])
        entry[0] += 1
        entry[1].add(r["_seq"])
    out = []
    for (pid, start), (n, seqs) in sorted(groups.items()):
        out.append({"topic": topic, "producer_id": pid, "window_start": start, "window_end": start + WINDOW,
                    "count": n, "sequences": [list(r) for r in runs(seqs)]})
    return out


def rows_of(rng: random.Random, n: int) -> list[dict]:
    producers = ["p-a", "p-b", "ünï", "p-d"]
    out = []
    for i in range(n):
        kind = rng.random()
        out.append({
            "_producer": None if kind < 0.03 else rng.choice(producers),
            "_seq": None if 0.03 <= kind < 0.05 else rng.choice([i, i, i, rng.randrange(n), i + 5]),
            "_generated": None if 0.05 <= kind < 0.07 else rng.randrange(-3 * WINDOW, 5 * WINDOW),
            "_error": "undecodable" if 0.07 <= kind < 0.09 else None,
        })
    return out


def batch(rows: list[dict]) -> pa.RecordBatch:
    return pa.RecordBatch.from_pydict(
        {"_producer": [r["_producer"] for r in rows], "_seq": [r["_seq"] for r in rows],
         "_generated": [r["_generated"] for r in rows], "_error": [r["_error"] for r in rows]},
        schema=pa.schema([("_producer", pa.string()), ("_seq", pa.int64()), ("_generated", pa.int64()),
                          ("_error", pa.string())]))


@pytest.mark.parametrize("max_span", [tier_counts.MAX_SPAN, 40])
@pytest.mark.parametrize("seed", range(25))
def test_counts_of_any_split_equal_the_reference(seed, max_span, monkeypatch):
    monkeypatch.setattr(tier_counts, "MAX_SPAN", max_span)  # 40: the driver's union falls back to merging runs
    rng = random.Random(seed)
    partitions = {p: rows_of(rng, rng.randrange(0, 400)) for p in range(rng.randrange(1, 4))}
    acc = tier_counts.ByRange()
    value = acc.zero({})
    planned = {}
    for p, rows in partitions.items():
        planned[str(p)] = [100, 100 + len(rows)]
        cuts = sorted({0, len(rows), *(rng.randrange(len(rows) + 1) for _ in range(rng.randrange(3)))})
        for a, b in zip(cuts[:-1], cuts[1:]):  # one source range each, read in random batches
            counts = tier_counts.RangeCounts(WINDOW)
            at = a
            while at < b:
                size = rng.randrange(1, 60)
                counts.add(batch(partitions[p][at:min(b, at + size)]))
                at += size
            part = {("t", p, 100 + a, 100 + b): counts.result()}
            value = acc.addInPlace(value, part)
            if rng.random() < 0.3:  # a task Spark ran again adds the same value under the same key
                value = acc.addInPlace(value, part)
        if not rows:
            value = acc.addInPlace(value, {("t", p, 100, 100): {}})
            planned.pop(str(p))
    got = tier_counts.events(value, "t", planned, WINDOW)
    assert got == reference([r for rows in partitions.values() for r in rows], "t")


def test_a_range_missing_or_extra_fails_the_load():
    counts = tier_counts.RangeCounts(WINDOW)
    counts.add(batch([{"_producer": "p", "_seq": 1, "_generated": 5, "_error": None}]))
    value = {("t", 0, 0, 10): counts.result(), ("t", 0, 10, 20): {}}
    assert tier_counts.events(value, "t", {"0": [0, 20]}, WINDOW)[0]["count"] == 1
    with pytest.raises(RuntimeError, match=r"t\[0\]: counted up to 20, expected 30"):
        tier_counts.events(value, "t", {"0": [0, 30]}, WINDOW)
    with pytest.raises(RuntimeError, match=r"counted from 10, expected 5"):
        tier_counts.events({("t", 0, 0, 5): {}, ("t", 0, 10, 20): {}}, "t", {"0": [0, 20]}, WINDOW)
    with pytest.raises(RuntimeError, match="unplanned partitions"):
        tier_counts.events({**value, ("t", 3, 0, 1): {}}, "t", {"0": [0, 20]}, WINDOW)
    assert tier_counts.events({**value, ("other", 3, 0, 1): {}}, "t", {"0": [0, 20]}, WINDOW)


def test_merged_runs_join_adjacent_and_overlapping_ranges():
    import numpy as np

    parts = [(np.array([1, 10]), np.array([3, 12])), (np.array([4, 11, 20]), np.array([5, 15, 20]))]
    assert tier_counts.merged(parts) == [[1, 5], [10, 15], [20, 20]]


def test_same_compares_every_partial():
    import numpy as np

    def one_run(n, first, last):
        return n, ("runs", np.array([first]), np.array([last]))

    a = {("t", 0, 0, 5): {("p", 0): one_run(2, 1, 2)}}
    assert tier_counts.same(a, {("t", 0, 0, 5): {("p", 0): one_run(2, 1, 2)}})
    for other in ({("t", 0, 0, 5): {("p", 0): one_run(1, 1, 2)}}, {("t", 0, 0, 5): {("p", 0): one_run(2, 1, 3)}},
                  {("t", 0, 0, 5): {("q", 0): one_run(2, 1, 2)}}, {},
                  {("t", 0, 0, 5): {("p", 0): (2, ("bits", 1, 2, np.packbits([True, True])))}}):
        assert not tier_counts.same(a, other)


def test_a_partition_share_of_sequences_travels_as_a_bitmap():
    """Every third sequence number (one partition of three): runs would be one per row, the bitmap a few bits a
    row; the union of the three partitions' bitmaps is one run."""
    import numpy as np

    parts = [tier_counts.encoded(np.arange(p, 30000, 3, dtype=np.int64)) for p in range(3)]
    assert all(s[0] == "bits" and s[3].nbytes == 3750 for s in parts)  # runs: 10,000 x 16 bytes each
    assert tier_counts.union(parts) == [[0, 29999]]
    assert tier_counts.encoded(np.array([5, 6, 7, 1000], dtype=np.int64))[0] == "runs"
    mixed = [parts[0], tier_counts.encoded(np.array([1, 2, 40000], dtype=np.int64))]
    assert tier_counts.union(mixed) == [[0, 3]] + [[k, k] for k in range(6, 30000, 3)] + [[40000, 40000]]
