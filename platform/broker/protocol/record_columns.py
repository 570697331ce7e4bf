"""Records of whole batches as per-record numpy columns: offsets, timestamps, keys, values, headers, and where
the last header of each of some names is. No I/O.

:func:`parse` takes ``(BatchHeader, records section)`` pairs (decompressed, in offset order, as a read_committed
fetch delivers them) and returns :class:`Records`: the bulk parse of :mod:`broker.protocol.columnar` (or the
compiled kernels of :mod:`broker.protocol.kernels`, which also find the named headers) plus each batch's base
offset and timestamps. :func:`named_headers` finds the named headers without the kernels, :func:`decimals`
reads ASCII decimal header values as ``int()`` would. The loads' source (:mod:`spark_jobs.columnar`, Arrow
columns) and the audit counter (:mod:`audit.bulk`) read batches this way.
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


def named_headers(r: Records, names: tuple[str, ...]) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """{name: (value pos, value len)} of the last header of each name in every record (len -1: absent or
    null): ``r.named`` when the compiled parse found them, else a pass over the headers in their order."""
    if r.named is not None and all(name in r.named for name in names):
        return {name: r.named[name] for name in names}
    n = len(r)
    found = {name: (np.zeros(n, dtype=I64), np.full(n, -1, dtype=I64)) for name in names}
    targets = {name: np.frombuffer(name.encode(), dtype=np.uint8) for name in names}
    lengths = np.array(sorted({len(t) for t in targets.values()}))
    width = int(lengths.max()) if len(lengths) else 0
    for idx, hk_pos, hk_len, hv_pos, hv_len in r.headers if targets else ():  # in order: the last of a name wins
        candidates = np.flatnonzero(np.isin(hk_len, lengths))
        if not candidates.size:
            continue
        keys = r.buf[np.minimum(hk_pos[candidates][:, None] + np.arange(width), len(r.buf) - 1)]
        for name, target in targets.items():
            hit = candidates[(hk_len[candidates] == len(target)) & (keys[:, :len(target)] == target).all(axis=1)]
            vpos, vlen = found[name]
            vpos[idx[hit]], vlen[idx[hit]] = hv_pos[hit], hv_len[hit]
    return found


def decimals(buf: np.ndarray, pos: np.ndarray, length: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(values, ok): ``int(value)`` of the byte strings at ``pos``/``length`` as Python parses them (signs,
    spaces, underscores), ok False for a null (length < 0), an unparsable value or one outside int64. Plain
    ASCII digits are read in bulk, anything else by ``int()`` one by one."""
    n = len(pos)
    plain = (length >= 1) & (length <= 18)
    values = np.zeros(n, dtype=I64)
    width = int(length[plain].max()) if plain.any() else 0
    if kernels.ENABLED:
        kernels.decimals(buf, pos, length, values, plain)
    elif width:
        cols = np.arange(width)
        digits = buf[np.minimum(pos[:, None] + cols, len(buf) - 1)].astype(I64) - 48
        inside = cols[None, :] < length[:, None]
        plain &= ((digits >= 0) & (digits <= 9) | ~inside).all(axis=1)
        weights = np.where(inside, digits, 0)
        for k in range(width):
            values = np.where(k < length, values * 10 + weights[:, k], values)
    ok = plain.copy()
    for i in np.flatnonzero(~plain & (length >= 0)):
        try:
            value = int(bytes(buf[pos[i]: pos[i] + length[i]]))
        except ValueError:
            continue
        if -2**63 <= value < 2**63:
            values[i], ok[i] = value, True
    return values, ok
