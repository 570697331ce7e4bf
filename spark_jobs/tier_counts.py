"""The warehouse tier's audit counts, taken in the pass that writes the data.

Per (producer, window of the generation time) the warehouse tier reports how many rows it loaded and which
sequence numbers, as ranges of consecutive numbers (see :mod:`audit`). Rows count when they are written to the
data (decoded, ``_error`` null) and carry all three audit columns (``_producer``, ``_seq``, ``_generated``);
the window is ``_generated - _generated % window_ms`` with Java's remainder (what the SQL expression gave).

The source's ``read()`` (:mod:`spark_jobs.source`) feeds every Arrow batch it yields to a :class:`RangeCounts`
and, once its range is read to the end, adds the result to a Spark accumulator keyed by that range:
``{(topic, partition, start, until): {(producer, window): (count, sequences)}}``, the sequences as runs or as
a bitmap, whichever is smaller (a producer's sequences spread over partitions are one run per row in one
partition's range; a bitmap takes a few bits a row, so the driver's memory follows the sequences' span). A task that Spark runs
again (a retry, a speculative copy, the rare re-read for the quarantine) adds the same value under the same
key, so nothing is counted twice; a task that fails adds nothing. The driver checks that the keys cover the
planned ranges exactly and merges them (:func:`events`). No second pass over the data and no shuffle: the
counts cost a sort of each range's audited rows in the task that read them.
"""

from __future__ import annotations

import numpy as np

from pyspark.accumulators import AccumulatorParam

Partial = dict  # {(producer, window_start): (count, Seqs)}
# Seqs, whichever is smaller: ("runs", firsts ndarray, lasts ndarray) or ("bits", lowest, span, packed bitmap)
MAX_SPAN = 1 << 26  # the driver unions a group's sequences in a bitmap up to this span (8 MiB of bits as bytes)


class ByRange(AccumulatorParam):
    """Accumulates {range key: partial}; adding a key again replaces its (identical) value."""

    def zero(self, value):
        return {}

    def addInPlace(self, value1, value2):
        value1.update(value2)
        return value1


def islands(seqs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(firsts, lasts) of the runs of consecutive numbers in ``seqs`` (sorted, duplicates allowed)."""
    if not len(seqs):
        return seqs[:0], seqs[:0]
    start = np.ones(len(seqs), dtype=bool)
    start[1:] = seqs[1:] - seqs[:-1] > 1
    firsts = np.flatnonzero(start)
    lasts = np.append(firsts[1:], len(seqs)) - 1
    return seqs[firsts], seqs[lasts]


class RangeCounts:
    """The partial counts of one source range, fed the source's Arrow batches in any number."""

    def __init__(self, window_ms: int):
        self.window_ms = window_ms
        self.names: dict[str, int] = {}
        self.codes: list[np.ndarray] = []
        self.windows: list[np.ndarray] = []
        self.seqs: list[np.ndarray] = []

    def add(self, batch) -> None:
        import pyarrow as pa
        import pyarrow.compute as pc

        producer, seq, generated = (batch.column(c) for c in ("_producer", "_seq", "_generated"))
        counted = pc.and_(pc.and_(producer.is_valid(), seq.is_valid()),
                          pc.and_(generated.is_valid(), batch.column("_error").is_null()))
        if not pc.any(counted).as_py():
            return
        producer = pc.filter(producer, counted).dictionary_encode()
        if isinstance(producer, pa.ChunkedArray):
            producer = producer.combine_chunks()
        remap = np.array([self.names.setdefault(name, len(self.names)) for name in producer.dictionary.to_pylist()],
                         dtype=np.int64)
        self.codes.append(remap[producer.indices.to_numpy(zero_copy_only=False)])
        gen = pc.filter(generated, counted).to_numpy(zero_copy_only=False).astype(np.int64)
        self.windows.append(gen - np.fmod(gen, self.window_ms))  # Java's %: the sign of the dividend
        self.seqs.append(pc.filter(seq, counted).to_numpy(zero_copy_only=False).astype(np.int64))

    def result(self) -> Partial:
        if not self.codes:
            return {}
        codes, windows, seqs = (np.concatenate(x) for x in (self.codes, self.windows, self.seqs))
        order = np.lexsort((seqs, windows, codes))
        codes, windows, seqs = codes[order], windows[order], seqs[order]
        new = np.ones(len(codes), dtype=bool)
        new[1:] = (codes[1:] != codes[:-1]) | (windows[1:] != windows[:-1])
        bounds = np.append(np.flatnonzero(new), len(codes))
        names = list(self.names)
        out: Partial = {}
        for a, b in zip(bounds[:-1], bounds[1:]):
            out[(names[int(codes[a])], int(windows[a]))] = (int(b - a), encoded(seqs[a:b]))
        return out


def encoded(seqs: np.ndarray) -> tuple:
    """A group's sorted sequence numbers as runs or as a bitmap, whichever is smaller: a producer's sequences
    spread over partitions leave every other one missing in one partition's range, one run per row (16 bytes a
    row to the driver), where a bitmap takes a few bits a row."""
    firsts, lasts = islands(seqs)
    span = int(seqs[-1]) - int(seqs[0]) + 1
    if span // 8 + 16 < 16 * len(firsts) and span <= MAX_SPAN:
        bits = np.zeros(span, dtype=bool)
        bits[seqs - seqs[0]] = True
        return ("bits", int(seqs[0]), span, np.packbits(bits))
    return ("runs", firsts, lasts)


def _as_runs(seqs: tuple) -> tuple[np.ndarray, np.ndarray]:
    if seqs[0] == "runs":
        return seqs[1], seqs[2]
    _, lowest, span, packed = seqs
    return islands(np.flatnonzero(np.unpackbits(packed, count=span)).astype(np.int64) + lowest)


def union(parts: list[tuple]) -> list[list[int]]:
    """The union of several groups' Seqs as maximal ranges [[first, last], ...], sorted: in one bitmap over their
    span when it is at most ``MAX_SPAN``, else by merging runs."""
    ends = [(s[1], s[1] + s[2] - 1) if s[0] == "bits" else (int(s[1][0]), int(s[2].max())) for s in parts]
    lowest, highest = min(a for a, _ in ends), max(b for _, b in ends)
    if highest - lowest + 1 > MAX_SPAN:
        return merged([_as_runs(s) for s in parts])
    span = highest - lowest + 1
    have = np.zeros(span, dtype=bool)
    edges = np.zeros(span + 1, dtype=np.int64)
    for s in parts:
        if s[0] == "bits":
            at = s[1] - lowest
            have[at:at + s[2]] |= np.unpackbits(s[3], count=s[2]).astype(bool)
        else:
            np.add.at(edges, s[1] - lowest, 1)
            np.add.at(edges, s[2] - lowest + 1, -1)
    have |= np.cumsum(edges[:-1]) > 0
    firsts, lasts = islands(np.flatnonzero(have).astype(np.int64) + lowest)
    return [[int(a), int(b)] for a, b in zip(firsts, lasts)]


def same(a: dict, b: dict) -> bool:
    """Whether two accumulator values hold the same partial counts for the same ranges."""
    if a.keys() != b.keys():
        return False
    for key, partial in a.items():
        other = b[key]
        if partial.keys() != other.keys():
            return False
        for group, (n, seqs) in partial.items():
            m, theirs = other[group]
            if n != m or seqs[0] != theirs[0] or len(seqs) != len(theirs):
                return False
            if not all(np.array_equal(x, y) for x, y in zip(seqs[1:], theirs[1:])):
                return False
    return True


def merged(parts: list[tuple[np.ndarray, np.ndarray]]) -> list[list[int]]:
    """The union of several sets of (firsts, lasts) ranges as maximal ranges [[first, last], ...], sorted."""
    firsts = np.concatenate([f for f, _ in parts])
    lasts = np.concatenate([la for _, la in parts])
    order = np.argsort(firsts, kind="stable")
    firsts, lasts = firsts[order], lasts[order]
    reach = np.maximum.accumulate(lasts)
    start = np.ones(len(firsts), dtype=bool)
    start[1:] = firsts[1:] > reach[:-1] + 1
    heads = np.flatnonzero(start)
    ends = np.append(heads[1:], len(firsts)) - 1
    return [[int(a), int(b)] for a, b in zip(firsts[heads], reach[ends])]


def covers(keys, topic: str, ranges: dict[str, list[int]]) -> str | None:
    """None if the range keys of ``topic`` tile every planned [from, until) exactly, else what is wrong."""
    mine: dict[int, list[tuple[int, int]]] = {}
    for t, p, start, until in keys:
        if t == topic:
            mine.setdefault(p, []).append((start, until))
    for p, (start, until) in ranges.items():
        at = start
        for a, b in sorted(mine.pop(int(p), [])):
            if a != at:
                return f"{topic}[{p}]: counted from {a}, expected {at}"
            at = b
        if at != until:
            return f"{topic}[{p}]: counted up to {at}, expected {until}"
    if mine:
        return f"{topic}: counts of unplanned partitions {sorted(mine)}"
    return None


def events(value: dict, topic: str, ranges: dict[str, list[int]], window_ms: int) -> list[dict]:
    """The warehouse tier's count events of ``topic`` from the accumulator's value; raises RuntimeError when
    the counted ranges are not exactly the planned ones (a count would be missing or extra)."""
    problem = covers(value, topic, ranges)
    if problem:
        raise RuntimeError(f"warehouse tier counts do not match the load: {problem}")
    groups: dict[tuple[str, int], list] = {}
    for key, partial in value.items():
        if key[0] != topic:
            continue
        for group, (n, seqs) in partial.items():
            g = groups.setdefault(group, [0, []])
            g[0] += n
            g[1].append(seqs)
    return [{"topic": topic, "producer_id": pid, "window_start": start, "window_end": start + window_ms,
             "count": n, "sequences": union(parts)}
            for (pid, start), (n, parts) in sorted(groups.items())]
