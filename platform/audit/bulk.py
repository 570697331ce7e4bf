"""The audit counter's counting of whole record batches, without a Python object per record. Pure (numpy).

:func:`audit_groups` takes the committed data batches of one partition (``(BatchHeader, records section)``,
decompressed, as :func:`broker.protocol.control.committed_batches` and ``record_reader.records_body`` give them)
and returns, per (event-time window, producer) they hold, what :meth:`audit.counter.TierCounter._count` would
add for the same records one message at a time: the host of the group's first record, the number of records and
the runs of their sequence numbers.

The rule is the record path's: the last header of a name wins; a record is audited when it has the producer,
sequence and time headers, the producer id is UTF-8 and sequence and time are integers as ``int()`` reads them
(within int64, as the snapshots' Avro longs must be, and the time so far inside it that its window's start and end
are too). The records are parsed by
:func:`broker.protocol.record_columns.parse` (the compiled kernels find the four headers); distinct producer ids
and windows are grouped with ``np.unique``, and each group's sequence numbers become runs at once.
"""

from __future__ import annotations

import numpy as np

from audit.events import HOST_HEADER, PRODUCER_HEADER, SEQUENCE_HEADER, TIME_HEADER
from broker.protocol.record_columns import decimals, named_headers, parse

NAMES = (PRODUCER_HEADER, SEQUENCE_HEADER, TIME_HEADER, HOST_HEADER)
LONG_MIN, LONG_MAX = -2**63, 2**63 - 1
_WIDE = 256  # producer ids longer than this are told apart one by one, not in a padded matrix


def audit_groups(batches: list, window_ms: int, position: int = 0) -> list[tuple[int, str, str, int, list]]:
    """``[(window start, producer id, host, records, runs of sequence numbers)]`` of the audited records of
    ``batches`` at offsets from ``position`` on (a fetch starts at the batch that holds the position, which a
    round of the record path may have left inside a batch), in the order of each group's first record."""
    if not batches:
        return []
    r = parse(batches, NAMES)
    found = named_headers(r, NAMES)
    (ppos, plen), (spos, slen), (tpos, tlen), (hpos, hlen) = (found[name] for name in NAMES)
    seq, seq_ok = decimals(r.buf, spos, slen)
    generated, time_ok = decimals(r.buf, tpos, tlen)
    time_ok &= (generated >= LONG_MIN + window_ms) & (generated <= LONG_MAX - window_ms)  # the window's ends too
    audited = np.flatnonzero(seq_ok & time_ok & (plen >= 0) & (r.offset >= position))
    if not audited.size:
        return []
    codes, producers = _distinct(r.buf, ppos[audited], plen[audited])
    names: list[str | None] = []
    for raw in producers:
        try:
            names.append(raw.decode())
        except UnicodeDecodeError:  # a producer id that is not UTF-8: not audited
            names.append(None)
    valid = np.array([name is not None for name in names], dtype=bool)
    keep = valid[codes]
    audited, codes = audited[keep], codes[keep]
    if not audited.size:
        return []
    start = generated[audited] - generated[audited] % window_ms  # floor, as Python's % (numpy's for int64 too)
    keys, first, inverse = np.unique(np.stack([start, codes], axis=1), axis=0, return_index=True,
                                     return_inverse=True)
    inverse = inverse.reshape(-1)
    order = np.argsort(inverse, kind="stable")
    bounds = np.cumsum(np.bincount(inverse, minlength=len(keys)))
    seqs = seq[audited][order]
    out = []
    for g in np.argsort(first, kind="stable"):  # the groups in the order of their first record
        lo = bounds[g - 1] if g else 0
        group = seqs[lo: bounds[g]]
        at = audited[first[g]]
        host = bytes(r.buf[hpos[at]: hpos[at] + hlen[at]]).decode(errors="replace") if hlen[at] > 0 else ""
        out.append((int(keys[g][0]), names[int(keys[g][1])], host, len(group), runs(group)))
    return out


def runs(values: np.ndarray) -> list[tuple[int, int]]:
    """The maximal runs of consecutive integers in ``values`` (any order, duplicates allowed), sorted: what
    :func:`audit.ranges.runs` gives, in bulk."""
    s = np.unique(values)
    if not s.size:
        return []
    breaks = np.flatnonzero(np.diff(s) > 1)
    firsts = s[np.concatenate(([0], breaks + 1))].tolist()
    lasts = s[np.concatenate((breaks, [len(s) - 1]))].tolist()
    return list(zip(firsts, lasts))


def _distinct(buf: np.ndarray, pos: np.ndarray, length: np.ndarray) -> tuple[np.ndarray, list[bytes]]:
    """(a code per byte string, the distinct byte strings by code) of the strings at ``pos``/``length``."""
    width = int(length.max()) if length.size else 0
    if width > _WIDE:
        seen: dict[bytes, int] = {}
        codes = np.array([seen.setdefault(bytes(buf[p: p + n]), len(seen)) for p, n in zip(pos.tolist(),
                                                                                             length.tolist())],
                         dtype=np.int64)
        return codes, list(seen)
    cols = np.arange(max(width, 1))
    inside = cols[None, :] < length[:, None]
    matrix = np.zeros((len(pos), 8 + len(cols)), dtype=np.uint8)
    matrix[:, :8] = length.astype("<i8").view(np.uint8).reshape(-1, 8)  # "ab" and "ab\0" differ
    matrix[:, 8:] = np.where(inside, buf[np.minimum(pos[:, None] + cols, len(buf) - 1)], 0)
    rows = np.ascontiguousarray(matrix).view(np.dtype((np.void, matrix.shape[1]))).reshape(-1)
    _, first, codes = np.unique(rows, return_index=True, return_inverse=True)
    return codes.reshape(-1).astype(np.int64), [bytes(buf[pos[i]: pos[i] + length[i]]) for i in first.tolist()]
