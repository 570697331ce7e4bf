"""Kafka records (``DefaultRecord``, see :mod:`broker.protocol.record_reader`) parsed in bulk into numpy columns.

A :class:`Records` holds the records sections of consecutive batches concatenated into one buffer, and per
record the positions and lengths of its key, value and headers in it, its offset and timestamp: the broker's
bulk parse (:mod:`broker.protocol.columnar`, checked as strictly as ``record_reader.iter_records``) plus each
batch's base offset and timestamps.

:func:`binary_array` / :func:`string_array` build Arrow arrays straight from (position, length) pairs; from
them :func:`raw_batch` gives the source's raw columns (``key``, ``value``, ``headers``, ...).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from broker.protocol import columnar, kernels
from broker.protocol.columnar import I64


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
    # the compiled parse's (value pos, value len) of the last header of each name asked for (len -1: absent)
    named: dict[str, tuple[np.ndarray, np.ndarray]] | None = None

    def __len__(self) -> int:
        return len(self.offset)


def parse(batches: list[tuple[object, bytes]], names: tuple[str, ...] = ()) -> Records:
    """All records of ``batches`` ((BatchHeader, records section) in offset order); with the compiled kernels,
    also where the last header of each of ``names`` is in each record (``Records.named``)."""
    data = b"".join(body for _, body in batches)
    counts, sizes = [h.record_count for h, _ in batches], [len(body) for _, body in batches]
    f, named = _compiled(data, counts, sizes, names) if kernels.ENABLED else (None, None)
    if f is None:
        f = columnar.parse(data, counts, sizes)
    per_batch = np.array([h.record_count for h, _ in batches], dtype=I64)
    base_offset = np.repeat(np.array([h.base_offset for h, _ in batches], dtype=I64), per_batch)
    log_append = np.repeat(np.array([bool(h.attributes & 0x08) for h, _ in batches]), per_batch)
    base_ts = np.repeat(np.array([h.base_timestamp for h, _ in batches], dtype=I64), per_batch)
    max_ts = np.repeat(np.array([h.max_timestamp for h, _ in batches], dtype=I64), per_batch)
    return Records(f.buf, base_offset + f.offset_delta, np.where(log_append, max_ts, base_ts + f.ts_delta),
                   log_append, f.key_pos, f.key_len, f.value_pos, f.value_len, f.header_count, f.headers, named)


def _compiled(data: bytes, counts: list[int], sizes: list[int], names: tuple[str, ...]):
    """(Fields, named) by the kernels of :mod:`broker.protocol.kernels`, or (None, None) when they decline the
    bytes (the numpy parse then raises its exact error)."""
    n = sum(counts)
    if n > len(data) // 7 + 1 or min(counts, default=0) < 0:  # a record takes at least 7 bytes
        return None, None
    source = np.frombuffer(data, np.uint8)
    cols = np.empty((kernels.COLUMNS, n), dtype=I64)
    if not kernels.parse_section(source, np.array(counts, dtype=I64), np.array(sizes, dtype=I64), cols):
        return None, None
    header_count = cols[kernels.HEADER_COUNT]
    starts = np.zeros(n + 1, dtype=I64)
    np.cumsum(header_count, out=starts[1:])
    located = np.empty((4, int(starts[-1])), dtype=I64)
    keys = [name.encode() for name in names]
    found = np.empty((2 * len(keys), n), dtype=I64)
    found[0::2], found[1::2] = 0, -1
    kernels.locate_headers(source, cols[kernels.HEADERS_AT], header_count, starts, located,
                           np.frombuffer(b"".join(keys) or b"\0", np.uint8),
                           np.cumsum([len(k) for k in keys], dtype=I64), found)
    headers = []
    if len(located[0]):
        record = np.repeat(np.arange(n, dtype=I64), header_count)
        index = np.arange(len(record), dtype=I64) - np.repeat(starts[:-1], header_count)
        for h in range(int(header_count.max())):
            at = np.flatnonzero(index == h)
            headers.append((record[at], *located[:, at]))
    buf = np.zeros(len(data) + columnar.PAD, dtype=np.uint8)  # one copy of the records, padded
    buf[:len(data)] = source
    fields = columnar.Fields(buf, cols[kernels.START], cols[kernels.END], cols[kernels.TS_DELTA],
                             cols[kernels.OFFSET_DELTA], cols[kernels.KEY_POS], cols[kernels.KEY_LEN],
                             cols[kernels.VALUE_POS], cols[kernels.VALUE_LEN], header_count, headers)
    return fields, {name: (found[2 * k], found[2 * k + 1]) for k, name in enumerate(names)}


def select(r: Records, keep: np.ndarray) -> Records:
    """The records at the (sorted) indices ``keep``."""
    remap = np.full(len(r), -1, dtype=I64)
    remap[keep] = np.arange(len(keep))
    headers = []
    for idx, *cols in r.headers:
        mine = remap[idx] >= 0
        if mine.any():
            headers.append((remap[idx[mine]], *(c[mine] for c in cols)))
    named = None if r.named is None else {k: (p[keep], n[keep]) for k, (p, n) in r.named.items()}
    return Records(r.buf, r.offset[keep], r.timestamp[keep], r.log_append[keep], r.key_pos[keep], r.key_len[keep],
                   r.value_pos[keep], r.value_len[keep], r.header_count[keep], headers, named)


def in_range(r: Records, start: int, until: int) -> Records:
    keep = np.flatnonzero((r.offset >= start) & (r.offset < until))
    return r if len(keep) == len(r) else select(r, keep)


def _gather(buf: np.ndarray, pos: np.ndarray, length: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(int32 offsets, bytes) of the byte strings at pos/length (length < 0: empty, null by the caller)."""
    lens = np.maximum(length, 0)
    if len(pos) and ((pos < 0) | (lens > len(buf) - pos)).any():  # no pos + length: it could wrap
        raise ValueError("a byte string lies outside the buffer")
    if kernels.ENABLED and len(pos):
        total = int(lens.sum())
        if total >= 2**31:
            raise ValueError("more than 2 GiB of bytes in one column chunk")
        offsets, data = np.empty(len(pos) + 1, dtype=I64), np.empty(total, dtype=np.uint8)
        if not kernels.gather(buf, pos.astype(I64, copy=False), length.astype(I64, copy=False), offsets, data):
            raise ValueError("a byte string lies outside the buffer")
        return offsets.astype(np.int32), data
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
