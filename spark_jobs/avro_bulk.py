"""Avro bodies (Confluent wire format) of many records decoded at once into Arrow columns, with numpy.

For a flat record schema — fields of type boolean, int, long, float, double, string, bytes, or a union of null
with one of those — every field is decoded for all records of a :class:`~spark_jobs.columnar.Records` together,
field after field: the positions of all records advance in step (an Avro record is its fields in order, without
framing). This serves the common case only: all records in Confluent's wire format, of one writer schema that
is the reader schema, each body decodable. Anything else — another schema id, a schema of other types, a body
that ends early or holds invalid UTF-8 — makes :func:`decode` return None and the caller decodes the records
one by one with fastavro (:class:`spark_jobs.decode.Decoder`), which quarantines what it must. Bytes after
the last field are ignored, as fastavro's ``schemaless_reader`` ignores them.

:func:`audit_columns` reads the audit headers (``logbus.audit.producer`` / ``seq`` / ``host`` / ``time``) the
same way: the last header of a name wins, text is decoded with replacement, numbers that are not plain ASCII
decimals are parsed by ``int()`` one by one.
"""

from __future__ import annotations

import numpy as np

from broker.protocol.columnar import varint
from broker.protocol.record_columns import Records, decimals, named_headers
from spark_jobs.columnar import binary_array, string_array

SIMPLE = {"boolean", "int", "long", "float", "double", "string", "bytes"}
AUDIT = {"_producer": "logbus.audit.producer", "_seq": "logbus.audit.seq", "_host": "logbus.audit.host",
         "_generated": "logbus.audit.time"}


def plan(schema) -> list[tuple[str, str, int]] | None:
    """[(field, type, index of the non-null branch or -1)] of a schema this module decodes, else None."""
    if not isinstance(schema, dict) or schema.get("type") != "record":
        return None
    out = []
    for f in schema["fields"]:
        t = f["type"]
        branch = -1
        if isinstance(t, list):
            if len(t) != 2 or "null" not in t:
                return None
            branch = 1 - t.index("null")
            t = t[branch]
        if isinstance(t, dict) and set(t) == {"type"}:
            t = t["type"]
        if not isinstance(t, str) or t not in SIMPLE:
            return None
        out.append((f["name"], t, branch))
    return out


def schema_ids(r: Records) -> np.ndarray | None:
    """Every record's schema id, or None if any value is not in Confluent's wire format."""
    if not len(r):
        return np.empty(0, dtype=np.int64)
    if (r.value_len < 5).any():
        return None
    b = r.buf
    p = r.value_pos
    if (b[p] != 0).any():
        return None
    return ((b[p + 1].astype(np.int64) << 24) | (b[p + 2].astype(np.int64) << 16) | (b[p + 3].astype(np.int64) << 8)
            | b[p + 4].astype(np.int64))


def _fixed(buf, pos, width: int, dtype: str) -> np.ndarray:
    raw = buf[pos[:, None] + np.arange(width)]
    return np.ascontiguousarray(raw).view(dtype).ravel()


def decode(r: Records, fields: list[tuple[str, str, int]], arrow_fields) -> dict | None:
    """{field name: Arrow array} of every record's body (after the 5-byte prefix), or None (see the module)."""
    import pyarrow as pa

    n = len(r)
    buf = r.buf
    pos = r.value_pos + 5
    end = r.value_pos + r.value_len
    types = {f.name: f.type for f in arrow_fields}
    out = {}
    for name, kind, branch in fields:
        if branch >= 0:
            index, pos = varint(buf, pos, 10)
            if ((index != 0) & (index != 1)).any():
                return None
            idx = np.flatnonzero(index == branch)
        else:
            idx = None
        p = pos if idx is None else pos[idx]
        if kind in ("int", "long"):
            values, p = varint(buf, p, 5 if kind == "int" else 10)
            if kind == "int" and ((values < -2**31) | (values >= 2**31)).any():
                return None
            column = values
        elif kind == "boolean":
            column = buf[np.minimum(p, len(buf) - 1)] != 0
            p = p + 1
        elif kind in ("float", "double"):
            width = 4 if kind == "float" else 8
            if (p + width > end if idx is None else p + width > end[idx]).any():
                return None
            column = _fixed(buf, p, width, "<f4" if kind == "float" else "<f8")
            p = p + width
        else:  # string, bytes
            length, p = varint(buf, p, 10)
            if (length < 0).any() or (length > (end if idx is None else end[idx]) - p).any():  # no p + length:
                # a length near 2**63 would wrap
                return None
            try:
                column = (string_array(buf, p, length) if kind == "string" else binary_array(buf, p, length))
            except ValueError:
                return None  # invalid UTF-8: fastavro refuses it, the record is quarantined
            p = p + length
        if idx is None:
            pos = p
        else:
            pos = pos.copy()
            pos[idx] = p
        if (pos > end).any():
            return None
        target = types.get(name)
        if target is None:
            continue
        if isinstance(column, np.ndarray):
            column = pa.array(column)
        if idx is not None:  # spread the present values over all rows, null elsewhere
            valid = np.zeros(n, dtype=bool)
            valid[idx] = True
            column = column.take(pa.array(np.cumsum(valid) - 1, mask=~valid))
        out[name] = column.cast(target) if column.type != target else column
    return out


def audit_columns(r: Records) -> dict:
    """{_producer, _seq, _host, _generated}: Arrow arrays of the audit headers (null where absent)."""
    import pyarrow as pa

    found = named_headers(r, tuple(AUDIT.values()))
    out = {}
    for column, key in AUDIT.items():
        vpos, vlen = found[key]
        if column in ("_producer", "_host"):
            out[column] = string_array(r.buf, vpos, vlen, errors="replace")
        else:
            values, ok = decimals(r.buf, vpos, vlen)
            out[column] = pa.array(values, mask=~ok, type=pa.int64())
    return out
