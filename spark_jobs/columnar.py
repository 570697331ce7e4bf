"""The loads' Arrow columns from Kafka records parsed in bulk.

:class:`~broker.protocol.record_columns.Records` (re-exported here with :func:`parse`, :func:`select` and
:func:`in_range`) holds the records sections of consecutive batches concatenated into one buffer, and per record
the positions and lengths of its key, value and headers in it, its offset and timestamp.

:func:`binary_array` / :func:`string_array` build Arrow arrays straight from (position, length) pairs; from
them :func:`raw_batch` gives the source's raw columns (``key``, ``value``, ``headers``, ...).
"""

from __future__ import annotations

import numpy as np
from broker.protocol import kernels
from broker.protocol.columnar import I64
from broker.protocol.record_columns import Records, in_range, parse, select  # noqa: F401 - this module's API


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
