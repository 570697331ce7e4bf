"""Records sections (Kafka's ``DefaultRecord``, see :mod:`record_reader`) parsed in bulk into numpy columns. No I/O.

The records sections of one or more batches, concatenated into one buffer, are parsed into per-record columns:
where each record starts and ends, its timestamp and offset deltas, the position and length of its key and
value, its header count and where its headers start. Only the record boundaries are found in a Python loop (a
record's length decides where the next one starts: one varint per record); every field after that is decoded
for all records at once with numpy. The structure is checked as strictly as :func:`record_reader.iter_records`
checks it (every field inside its record, the records filling each batch exactly), raising ``InvalidRecord``
otherwise; the messages may differ, the verdict does not (``tests/unit/test_columnar_records.py`` compares them).

A call costs about a hundred microseconds whatever its size (some fifteen varint columns of a few numpy
operations each), then about half a microsecond a record, most of it the boundary loop: worth it from a few
hundred records on (``COLUMNAR_MIN_RECORDS``). The loads' source parses whole fetches with it; the broker's
produce validation uses it only with numba off (``LOGBUS_JIT=0``): the compiled check of
:mod:`broker.protocol.kernels` is ten times cheaper. The mirror's rewrite does not: assembling ~300-byte target
records from numpy masks cost as much as its record loop (measured, issue 20); it has a compiled kernel too.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from broker.protocol.records import InvalidRecord

PAD = 16  # zero bytes after the buffer: a varint read past the end of a malformed record stays in bounds
I64 = np.int64
COLUMNAR_MIN_RECORDS = 256  # from this many records in a batch on, the numpy parse is cheaper than the walk


@dataclass
class Fields:
    """Per record of a parsed buffer (positions index ``buf``)."""

    buf: np.ndarray  # uint8: the records sections + PAD zero bytes
    start: np.ndarray  # the record's length field
    end: np.ndarray  # one past its last byte
    ts_delta: np.ndarray
    offset_delta: np.ndarray
    key_pos: np.ndarray
    key_len: np.ndarray  # < 0: null
    value_pos: np.ndarray
    value_len: np.ndarray
    header_count: np.ndarray
    # per header index h: (record indices with more than h headers, key pos, key len, value pos, value len)
    headers: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.start)


def varint(buf: np.ndarray, pos: np.ndarray, limit: int) -> tuple[np.ndarray, np.ndarray]:
    """Zigzag varints at ``pos`` (at most ``limit`` bytes): (values, positions after them)."""
    pos = np.minimum(pos, len(buf) - PAD)
    b = buf[pos]
    raw = (b & 0x7F).astype(np.uint64)
    size = np.ones(len(pos), dtype=I64)
    idx = np.flatnonzero(b >= 0x80)
    shift = 7
    while idx.size:
        if shift >= 7 * limit:
            raise InvalidRecord("varint longer than its type allows")
        b = buf[pos[idx] + size[idx]]
        raw[idx] |= (b & 0x7F).astype(np.uint64) << np.uint64(shift)
        size[idx] += 1
        idx = idx[b >= 0x80]
        shift += 7
    value = (raw >> np.uint64(1)).astype(I64) ^ -(raw & np.uint64(1)).astype(I64)
    return value, pos + size


def record_starts(data, counts: list[int], sizes: list[int]) -> list[int]:
    """The byte position of each record (its length field) — the one per-record Python loop. ``counts`` and
    ``sizes``: each batch's declared record count and the bytes of its records section."""
    starts: list[int] = []
    append = starts.append
    pos = 0
    end = 0
    try:
        for count, size in zip(counts, sizes):
            end += size
            for _ in range(count):
                append(pos)
                b = data[pos]
                if b < 0x80:
                    pos += 1 + ((b >> 1) ^ -(b & 1))
                    continue
                c = data[pos + 1]
                if c < 0x80:
                    b = (b & 0x7F) | c << 7
                    pos += 2 + ((b >> 1) ^ -(b & 1))
                    continue
                raw, shift, p = 0, 0, pos
                while True:
                    b = data[p]
                    raw |= (b & 0x7F) << shift
                    p += 1
                    if b < 0x80 or p - pos >= 5:
                        break
                    shift += 7
                if b >= 0x80:
                    raise InvalidRecord("varint longer than its type allows")
                pos = p + ((raw >> 1) ^ -(raw & 1))
            if pos != end:
                raise InvalidRecord("the records do not fill their batch exactly")
    except IndexError:
        raise InvalidRecord("fewer records than the batch declares (premature end)") from None
    return starts


def parse(data, counts: list[int], sizes: list[int], headers: bool = True) -> Fields:
    """Every record of the concatenated records sections ``data`` (``counts`` / ``sizes`` per batch, in order).
    ``headers``: also locate each header's key and value (``Fields.headers``); the structure is checked either
    way."""
    starts = np.array(record_starts(data, counts, sizes), dtype=I64)
    buf = np.zeros(len(data) + PAD, dtype=np.uint8)  # one copy of the records, padded
    buf[:len(data)] = np.frombuffer(data, dtype=np.uint8)
    length, p = varint(buf, starts, 5)
    end = p + length
    bad = length < 6
    ts_delta, p = varint(buf, p + 1, 10)  # after the attributes byte
    offset_delta, p = varint(buf, p, 5)
    key_len, p = varint(buf, p, 5)
    key_pos = p
    p = p + np.maximum(key_len, 0)
    bad |= p >= end
    value_len, p = varint(buf, p, 5)
    value_pos = p
    p = p + np.maximum(value_len, 0)
    bad |= p >= end
    header_count, p = varint(buf, p, 5)
    bad |= (header_count < 0) | (header_count * 2 > end - p)
    if bad.any():
        raise InvalidRecord(f"record {int(np.argmax(bad))}: its fields do not fit its declared length")
    located = []
    if len(header_count) and int(header_count.max()):
        p = p.copy()
        for h in range(int(header_count.max())):
            idx = np.flatnonzero(header_count > h)
            hk_len, q = varint(buf, p[idx], 5)
            hk_pos = q
            q = q + np.maximum(hk_len, 0)
            hv_len, q = varint(buf, q, 5)
            hv_pos = q
            p[idx] = q + np.maximum(hv_len, 0)
            if (hk_len < 0).any() or (p[idx] > end[idx]).any():
                raise InvalidRecord("a header runs past its record")
            if headers:
                located.append((idx, hk_pos, hk_len, hv_pos, hv_len))
    if (p != end).any():
        raise InvalidRecord(f"record {int(np.argmax(p != end))}: its fields do not fill its declared length")
    return Fields(buf, starts, end, ts_delta, offset_delta, key_pos, key_len, value_pos, value_len, header_count,
                  located)
