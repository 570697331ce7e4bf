"""Kafka records (``DefaultRecord``, see :mod:`broker.protocol.record_reader`) parsed in bulk into numpy columns.

A :class:`Records` holds the records sections of consecutive batches concatenated into one buffer, and per
record the positions and lengths of its key, value and headers in it, its offset and timestamp. Only the
record boundaries are found in a Python loop (a record's length decides where the next one starts, one
varint per record); every field after that is decoded for all records at once with numpy, and the structure
is checked as strictly as ``record_reader.iter_records`` does (every field inside its record, the records
filling their batch exactly), raising ``InvalidRecord`` otherwise.

:func:`binary_array` / :func:`string_array` build Arrow arrays straight from (position, length) pairs; from
them :func:`raw_batch` gives the source's raw columns (``key``, ``value``, ``headers``, ...).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

PAD = 16  # zero bytes after the buffer: a varint read past the end of a malformed record stays in bounds
I64 = np.int64


@dataclass
class Records:
    buf: np.ndarray  # uint8, the records sections + PAD zero bytes
    offset: np.ndarray
    timestamp: np.ndarray  # ms
    log_append: np.ndarray  # bool: the timestamp is the broker's (LogAppendTime)
    key_pos: np.ndarray
    key_len: np.ndarray  # -1: null
    value_pos: np.ndarray
    value_len: np.ndarray
    header_count: np.ndarray
    # per header index h: (record indices with more than h headers, key pos, key len, value pos, value len)
    headers: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.offset)


def varint(buf: np.ndarray, pos: np.ndarray, limit: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Zigzag varints at ``pos`` (at most ``limit`` bytes): (values, positions after them, too-long mask)."""
    from broker.protocol.records import InvalidRecord

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


def _record_starts(data: bytes, counts: list[int], sizes: list[int]) -> list[int]:
    """The byte position of each record (its length field) — the one per-record Python loop."""
    from broker.protocol.records import InvalidRecord

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


def parse(batches: list[tuple[object, bytes]]) -> Records:
    """All records of ``batches`` ((BatchHeader, records section) in offset order)."""
    from broker.protocol.records import InvalidRecord

    data = b"".join(body for _, body in batches)
    counts = [h.record_count for h, _ in batches]
    starts = np.array(_record_starts(data, counts, [len(body) for _, body in batches]), dtype=I64)
    buf = np.frombuffer(data + bytes(PAD), dtype=np.uint8)
    length, p = varint(buf, starts, 5)
    end = p + length
    bad = length < 6
    p = p + 1  # attributes
    ts_delta, p = varint(buf, p, 10)
    offset_delta, p = varint(buf, p, 5)
    key_len, p = varint(buf, p, 5)
    key_pos = p
    p = p + np.maximum(key_len, 0)
    value_len, p = varint(buf, p, 5)
    value_pos = p
    p = p + np.maximum(value_len, 0)
    bad |= p >= end
    header_count, p = varint(buf, p, 5)
    bad |= (header_count < 0) | (header_count * 2 > end - p)
    if bad.any():
        raise InvalidRecord("a record's fields do not fit its declared length")
    headers = []
    for h in range(int(header_count.max()) if len(header_count) else 0):
        idx = np.flatnonzero(header_count > h)
        hk_len, q = varint(buf, p[idx], 5)
        hk_pos = q
        q = q + np.maximum(hk_len, 0)
        hv_len, q = varint(buf, q, 5)
        hv_pos = q
        p[idx] = q + np.maximum(hv_len, 0)
        if (hk_len < 0).any() or (p[idx] > end[idx]).any():
            raise InvalidRecord("a header runs past its record")
        headers.append((idx, hk_pos, hk_len, hv_pos, hv_len))
    if (p != end).any():
        raise InvalidRecord("a record's fields do not fill its declared length")
    per_batch = np.array(counts, dtype=I64)
    base_offset = np.repeat(np.array([h.base_offset for h, _ in batches], dtype=I64), per_batch)
    log_append = np.repeat(np.array([bool(h.attributes & 0x08) for h, _ in batches]), per_batch)
    base_ts = np.repeat(np.array([h.base_timestamp for h, _ in batches], dtype=I64), per_batch)
    max_ts = np.repeat(np.array([h.max_timestamp for h, _ in batches], dtype=I64), per_batch)
    return Records(buf, base_offset + offset_delta, np.where(log_append, max_ts, base_ts + ts_delta), log_append,
                   key_pos, key_len, value_pos, value_len, header_count, headers)


def select(r: Records, keep: np.ndarray) -> Records:
    """The records at the (sorted) indices ``keep``."""
    remap = np.full(len(r), -1, dtype=I64)
    remap[keep] = np.arange(len(keep))
    headers = []
    for idx, *cols in r.headers:
        mine = remap[idx] >= 0
        if mine.any():
            headers.append((remap[idx[mine]], *(c[mine] for c in cols)))
    return Records(r.buf, r.offset[keep], r.timestamp[keep], r.log_append[keep], r.key_pos[keep], r.key_len[keep],
                   r.value_pos[keep], r.value_len[keep], r.header_count[keep], headers)


def in_range(r: Records, start: int, until: int) -> Records:
    keep = np.flatnonzero((r.offset >= start) & (r.offset < until))
    return r if len(keep) == len(r) else select(r, keep)


def _gather(buf: np.ndarray, pos: np.ndarray, length: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(int32 offsets, bytes) of the byte strings at pos/length (length < 0: empty, null by the caller)."""
    lens = np.maximum(length, 0)
    offsets = np.zeros(len(lens) + 1, dtype=I64)
    np.cumsum(lens, out=offsets[1:])
    total = int(offsets[-1])
    if total >= 2**31:
        raise ValueError("more than 2 GiB of bytes in one column chunk")
    data = buf[np.repeat(pos - offsets[:-1], lens) + np.arange(total, dtype=I64)] if total else np.empty(0, np.uint8)
    return offsets.astype(np.int32), data


def binary_array(buf, pos, length, type_=None):
    """An Arrow binary (or string: ``type_=pa.string()``, unchecked) array; length < 0 is null."""
    import pyarrow as pa

    offsets, data = _gather(buf, pos, length)
    valid = length >= 0
    nulls = int(len(valid) - valid.sum())
    bitmap = pa.py_buffer(np.packbits(valid, bitorder="little")) if nulls else None
    return pa.Array.from_buffers(type_ or pa.binary(), len(length), [bitmap, pa.py_buffer(offsets),
                                                                    pa.py_buffer(data)], null_count=nulls)


def string_array(buf, pos, length, errors: str = "strict"):
    """An Arrow string array; invalid UTF-8 raises ``ValueError`` (``errors="replace"``: replaced, like
    ``bytes.decode(errors="replace")``)."""
    import pyarrow as pa

    arr = binary_array(buf, pos, length, pa.string())
    try:
        arr.validate(full=True)
        return arr
    except pa.ArrowInvalid:
        if errors == "strict":
            raise ValueError("invalid UTF-8") from None
    raw = binary_array(buf, pos, length).to_pylist()
    return pa.array([None if b is None else b.decode(errors="replace") for b in raw], type=pa.string())


def raw_schema():
    """The Arrow schema of the source's raw columns (``source.SCHEMA``)."""
    import pyarrow as pa

    return pa.schema([
        ("key", pa.binary()), ("value", pa.binary()), pa.field("topic", pa.string(), False),
        pa.field("partition", pa.int32(), False), pa.field("offset", pa.int64(), False),
        ("timestamp", pa.timestamp("us", tz="UTC")), ("timestampType", pa.int32()),
        ("headers", pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))),
    ])


def raw_batch(r: Records, topic: str, partition: int, arrow_schema, headers: bool = True):
    """The source's raw columns (``source.SCHEMA``) as one Arrow record batch."""
    import pyarrow as pa

    n = len(r)
    ts_type = np.where(r.log_append, 1, 0).astype(np.int32)
    columns = {
        "key": binary_array(r.buf, r.key_pos, r.key_len), "value": binary_array(r.buf, r.value_pos, r.value_len),
        "topic": pa.repeat(pa.scalar(topic, pa.string()), n),
        "partition": pa.array(np.full(n, partition, dtype=np.int32)), "offset": pa.array(r.offset),
        "timestamp": pa.array(r.timestamp * 1000, type=pa.timestamp("us", tz="UTC")),
        "timestampType": pa.array(ts_type), "headers": header_lists(r) if headers else pa.nulls(n),
    }
    arrays = [columns[f.name] for f in arrow_schema]
    arrays = [a.cast(f.type) if a.type != f.type else a for a, f in zip(arrays, arrow_schema)]
    return pa.RecordBatch.from_arrays(arrays, schema=arrow_schema)


def header_lists(r: Records):
    """list<struct<key: string, value: binary>> of every record's headers, in their order."""
    import pyarrow as pa

    n = len(r)
    list_offsets = np.zeros(n + 1, dtype=I64)
    np.cumsum(r.header_count, out=list_offsets[1:])
    total = int(list_offsets[-1])
    kpos, klen, vpos, vlen = (np.zeros(total, dtype=I64) for _ in range(4))
    for h, (idx, hk_pos, hk_len, hv_pos, hv_len) in enumerate(r.headers):
        at = list_offsets[idx] + h
        kpos[at], klen[at], vpos[at], vlen[at] = hk_pos, hk_len, hv_pos, hv_len
    entries = pa.StructArray.from_arrays([string_array(r.buf, kpos, klen, errors="replace"),
                                          binary_array(r.buf, vpos, vlen)], names=["key", "value"])
    return pa.ListArray.from_arrays(pa.array(list_offsets.astype(np.int32)), entries)
