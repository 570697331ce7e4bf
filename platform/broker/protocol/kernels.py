"""Per-record loops compiled with numba (issue 20): the record walks that Python cannot make cheap, as native
code that keeps no Python object per record. No I/O.

- :func:`records_pass`: the broker's produce validation of a decompressed records section (Kafka's record
  structure, offset deltas 0..n-1, keys on compacted topics, CreateTime bounds) in one pass. True means the
  records pass every rule; False means "ask the record walk" (:mod:`broker.protocol.validation` then raises the
  exact error of the first bad record), so the kernel decides nothing on its own.
- :func:`rewrite_mirrored`: the mirror's whole-batch rewrite (:mod:`mirror.batches`): each record copied with
  its three provenance headers appended, byte for byte what the Python rewrite writes. ``BAD`` makes the caller
  rewrite that source batch in Python (the exact error, or the exact output for the rare inputs the kernel
  declines: negative offsets and header counts, timestamps near the 64-bit limits); ``FULL``: the target batch
  reached its size cap before the next record. Its progress is kept in a small int64 ``state`` array (slots
  ``POS`` .. ``MAX_TS_DELTA`` below) that the caller reads after each call, and resets in part (``WRITTEN``,
  ``COUNT``, ``MAX_TS_DELTA``) when it starts the next target batch after ``FULL``. ``MAX_TS_DELTA`` is the
  largest timestamp delta written into the current target batch (``MIN_INT64`` before any): the caller adds the
  target batch's first timestamp to it for the batch's maxTimestamp.
- :func:`parse_section`, :func:`locate_headers`, :func:`gather`, :func:`decimals`: the loads' bulk parse
  (:mod:`spark_jobs.columnar`, :mod:`spark_jobs.avro_bulk`): a records section into per-record columns with the
  checks of :func:`broker.protocol.columnar.parse` (False: the numpy parse gives the exact error), every header
  located and the named ones (the audit headers) found, byte strings gathered into Arrow buffers, ASCII
  decimals parsed.

Both are conservative on purpose: the Python code stays the reference, and tests compare them
(``tests/unit/test_kernels.py``, ``tests/unit/test_mirror_rewrite_kernel.py``). Signed 64-bit arithmetic only
(numba turns mixed signed and unsigned integers into floats); varints longer than 64 bits are declined.

Compiled on first use and cached on disk (numba's ``cache=True``: ``__pycache__`` beside this file, else
``NUMBA_CACHE_DIR``, which is set to a temporary directory when this directory is not writable); ``python -m
broker.protocol.kernels`` compiles everything ahead (``scripts/setup`` does). Every kernel lives in this one file
on purpose: numba's cache is invalidated by a change of the file that defines a function, not of the functions it
calls. ``LOGBUS_JIT=0`` (or a missing numba) turns the kernels off: ``ENABLED`` is False and callers use Python.
"""

from __future__ import annotations

import os
import tempfile
import time

import numpy as np

ENABLED = os.environ.get("LOGBUS_JIT", "1") != "0"
if ENABLED:
    if not os.access(os.path.dirname(os.path.abspath(__file__)), os.W_OK) and "NUMBA_CACHE_DIR" not in os.environ:
        os.environ["NUMBA_CACHE_DIR"] = os.path.join(tempfile.gettempdir(), "logbus-numba-cache")
    try:
        from numba import njit
        from numba.core import cgutils, types
        from numba.extending import intrinsic
    except ImportError:  # pragma: no cover - numba is a pinned dependency
        ENABLED = False

OK, FULL, BAD = 0, 1, 2
# rewrite_mirrored's state slots, read and written by the kernel: where it is, and what it has done so far.
# MAX_TS_DELTA: the largest timestamp delta written into the current target batch (the caller sets MIN_INT64
# for none yet)
POS, REMAINING, WRITTEN, COUNT, COPIED, SKIPPED, VALUE_BYTES, LAST_OFFSET, MAX_TS_DELTA = range(9)
STATE_SIZE = 9
# per record, the most a mirrored record can grow over its source, besides the provenance headers' names and
# constant values: the offset's length byte and up to 20 digits, and varints that may widen (timestamp 9, offset
# delta 4, header count 4, length 4)
GROWTH = 21 + 21
MAX_INT64, LOW_57 = (1 << 63) - 1, (1 << 57) - 1
LIMIT = 1 << 61  # timestamps and shifts beyond this are left to Python (no 64-bit overflow in a sum)
MIN_INT64 = -(1 << 63)

if ENABLED:
    @intrinsic
    def _memcpy(typingctx, dst, dst_at, src, src_at, n):
        """``dst[dst_at:dst_at + n] = src[src_at:src_at + n]`` as one ``memcpy`` (numba's slice assignment checks
        for overlap and copies through a temporary: it cost most of the rewrite's time)."""
        def codegen(context, builder, signature, args):
            target = context.make_array(signature.args[0])(context, builder, args[0])
            source = context.make_array(signature.args[2])(context, builder, args[2])
            cgutils.raw_memcpy(builder, builder.gep(target.data, [args[1]]), builder.gep(source.data, [args[3]]),
                               args[4], 1)
            return context.get_dummy_value()
        return types.void(dst, dst_at, src, src_at, n), codegen


def _records_pass(body, count, compacted, check_timestamps, base_timestamp, low, high):
    """The record rules of :func:`broker.protocol.validation.check_records` over a whole records section."""
    total = len(body)
    pos = 0
    for i in range(count):
        length, pos, ok = _read(body, pos, total, 5)
        if not ok:
            return False
        end = pos + length
        if length < 6 or end > total:
            return False
        pos += 1  # attributes
        ts_delta, pos, ok = _read(body, pos, total, 10)
        if not ok:
            return False
        offset_delta, pos, ok = _read(body, pos, total, 5)
        if not ok or offset_delta != i:
            return False
        key_length, pos, ok = _read(body, pos, total, 5)
        if not ok or (compacted and key_length < 0):
            return False
        if key_length > 0:
            pos += key_length
        if pos >= end:
            return False
        value_length, pos, ok = _read(body, pos, total, 5)
        if not ok:
            return False
        if value_length > 0:
            pos += value_length
        if pos >= end:
            return False
        header_count, pos, ok = _read(body, pos, total, 5)
        if not ok or header_count < 0 or header_count * 2 > end - pos:
            return False
        for _ in range(header_count):
            key_length, pos, ok = _read(body, pos, total, 5)
            if not ok or key_length < 0:
                return False
            pos += key_length
            value_length, pos, ok = _read(body, pos, total, 5)
            if not ok:
                return False
            if value_length > 0:
                pos += value_length
            if pos > end:
                return False
        if pos != end:
            return False
        if check_timestamps:
            if ts_delta > LIMIT or ts_delta < -LIMIT:
                return False
            timestamp = base_timestamp + ts_delta
            if timestamp != -1 and (timestamp < low or timestamp > high):
                return False
    return pos == total


def _read(body, pos, end, limit):
    """A zigzag varint of at most ``limit`` bytes: (value, position after it, ok). Signed 64-bit arithmetic only
    (numba turns mixed signed and unsigned integers into floats)."""
    raw = 0
    shift = 0
    for i in range(limit):
        if pos >= end:
            return 0, pos, False
        b = np.int64(body[pos])
        pos += 1
        if i == 9 and b > 1:  # a tenth byte with more than bit 63: does not fit 64 bits
            return 0, pos, False
        raw |= (b & 0x7F) << shift
        if b < 0x80:
            return ((raw >> 1) & MAX_INT64) ^ -(raw & 1), pos, True
        shift += 7
    return 0, pos, False


def _size(value):
    """Bytes of ``value``'s zigzag varint."""
    raw = (value << 1) ^ (value >> 63)
    n = 1
    while raw >= 0x80 or raw < 0:
        raw = (raw >> 7) & LOW_57
        n += 1
    return n


def _write(out, at, value):
    """Write ``value``'s zigzag varint at ``at``; the position after it."""
    raw = (value << 1) ^ (value >> 63)
    while raw >= 0x80 or raw < 0:
        out[at] = (raw & 0x7F) | 0x80
        raw = (raw >> 7) & LOW_57
        at += 1
    out[at] = raw
    return at + 1


def _copy(out, at, src, start, stop):
    """Copy ``src[start:stop]`` to ``out`` at ``at``; the position after it."""
    n = stop - start
    if n > 0:
        _memcpy(out, at, src, start, n)
    return at + n


def _has_source_header(body, pos, end, count, end_of_body, source_key):
    """(found, ok): whether a header is named ``source_key``; not ok when the headers do not parse."""
    klen = len(source_key)
    for _ in range(count):
        key_length, pos, ok = _read(body, pos, end_of_body, 5)
        if not ok or key_length < 0 or pos + key_length > end:
            return False, False
        if key_length == klen:
            same = True
            for j in range(klen):
                if body[pos + j] != source_key[j]:
                    same = False
                    break
            if same:
                return True, True
        pos += key_length
        value_length, pos, ok = _read(body, pos, end_of_body, 5)
        if not ok:
            return False, False
        if value_length > 0:
            pos += value_length
    return False, True


def _rewrite_mirrored(body, base_offset, position, log_append, shift, appended_ts, constant, offset_key,
                      source_key, out, room, state):
    """Rewrite records of ``body`` from ``state[POS]`` (``state[REMAINING]`` of them left) into ``out`` from
    ``state[WRITTEN]``: OK (all done), FULL (``room`` bytes written before the next record) or BAD. Each written
    record's timestamp delta (``shift`` for LogAppendTime, else its own delta plus ``shift``) raises
    ``state[MAX_TS_DELTA]``."""
    end_of_body = len(body)
    pos = state[POS]
    written = state[WRITTEN]
    count = state[COUNT]
    max_ts_delta = state[MAX_TS_DELTA]
    digits = np.empty(20, np.uint8)
    while state[REMAINING] > 0:
        length, pos, ok = _read(body, pos, end_of_body, 5)
        if not ok:
            return BAD
        end = pos + length
        if end > end_of_body or length < 6:
            return BAD
        attributes_at = pos
        pos += 1
        ts_delta, pos, ok = _read(body, pos, end_of_body, 10)
        if not ok:
            return BAD
        ts_end = pos
        if shift != 0 and not log_append and (ts_delta > LIMIT or ts_delta < -LIMIT):
            return BAD  # the sum might not fit 64 bits
        offset_delta, pos, ok = _read(body, pos, end_of_body, 5)
        if not ok:
            return BAD
        key_at = pos
        key_length, pos, ok = _read(body, pos, end_of_body, 5)
        if not ok:
            return BAD
        if key_length > 0:
            pos += key_length
        value_length, pos, ok = _read(body, pos, end_of_body, 5)
        if not ok:
            return BAD
        if value_length > 0:
            pos += value_length
        headers_at = pos
        header_count, own_headers, ok = _read(body, pos, end_of_body, 5)
        if not ok or header_count < 0 or pos >= end or own_headers > end:
            return BAD
        offset = base_offset + offset_delta
        if offset < 0:
            return BAD
        if offset < position:
            pos = end
            state[POS] = pos
            state[REMAINING] -= 1
            continue
        if header_count:
            found, ok = _has_source_header(body, own_headers, end, header_count, end_of_body, source_key)
            if not ok:
                return BAD
            if found:
                state[SKIPPED] += 1
                pos = end
                state[POS] = pos
                state[REMAINING] -= 1
                continue
        if written >= room:
            state[WRITTEN] = written
            state[COUNT] = count
            return FULL
        # the decimal digits of the offset, backwards
        n_digits = 0
        rest = offset
        while True:
            quotient = rest // 10
            digits[n_digits] = 48 + rest - quotient * 10
            n_digits += 1
            rest = quotient
            if rest == 0:
                break
        if log_append:
            ts_size = len(appended_ts)
            timestamp = shift
        elif shift != 0:
            timestamp = ts_delta + shift
            ts_size = _size(timestamp)
        else:
            timestamp = ts_delta
            ts_size = ts_end - attributes_at - 1
        if timestamp > max_ts_delta:
            max_ts_delta = timestamp
        inner = (1 + ts_size + _size(count) + headers_at - key_at + _size(header_count + 3) + end - own_headers
                 + len(constant) + len(offset_key) + 1 + n_digits)
        written = _write(out, written, inner)
        out[written] = body[attributes_at]
        written += 1
        if log_append:
            written = _copy(out, written, appended_ts, 0, len(appended_ts))
        elif shift != 0:
            written = _write(out, written, timestamp)
        else:
            written = _copy(out, written, body, attributes_at + 1, ts_end)
        written = _write(out, written, count)
        written = _copy(out, written, body, key_at, headers_at)
        written = _write(out, written, header_count + 3)
        written = _copy(out, written, body, own_headers, end)
        written = _copy(out, written, constant, 0, len(constant))
        written = _copy(out, written, offset_key, 0, len(offset_key))
        out[written] = 2 * n_digits
        written += 1
        for j in range(n_digits):
            out[written] = digits[n_digits - 1 - j]
            written += 1
        count += 1
        state[COPIED] += 1
        state[VALUE_BYTES] += max(key_length, 0) + max(value_length, 0)
        state[LAST_OFFSET] = offset
        pos = end
        state[POS] = pos
        state[REMAINING] -= 1
        state[WRITTEN] = written
        state[COUNT] = count
        state[MAX_TS_DELTA] = max_ts_delta
    return OK



def records_pass(body, count: int, compacted: bool, base_timestamp: int, bounds: tuple[int, int] | None) -> bool:
    """Whether the ``count`` records of the decompressed records section ``body`` pass every record rule
    (:mod:`broker.protocol.validation`); False also when the kernel cannot tell (the record walk decides)."""
    if bounds is None:
        check, low, high = False, 0, 0
    else:
        if not -LIMIT <= base_timestamp <= LIMIT:
            return False
        check, low, high = True, max(bounds[0], MIN_INT64), min(bounds[1], MAX_INT64)
    return bool(_records_pass_compiled(np.frombuffer(body, np.uint8), count, compacted, check, base_timestamp, low,
                                       high))


if ENABLED:
    _read = njit(cache=True, nogil=True)(_read)
    _size = njit(cache=True, nogil=True)(_size)
    _write = njit(cache=True, nogil=True)(_write)
    _copy = njit(cache=True, nogil=True)(_copy)
    _has_source_header = njit(cache=True, nogil=True)(_has_source_header)
    _records_pass_compiled = njit(cache=True, nogil=True)(_records_pass)
    rewrite_mirrored = njit(cache=True, nogil=True)(_rewrite_mirrored)
else:
    _records_pass_compiled = rewrite_mirrored = None


def warm_records_pass() -> None:
    """Compile (or load from the cache) :func:`records_pass` for read-only and writable records sections."""
    if ENABLED:
        from broker.protocol.batch_builder import encode_record

        record = encode_record(0, b"k", b"v", headers=[("h", b"1")])
        for body in (np.frombuffer(record, np.uint8), np.frombuffer(bytearray(record), np.uint8)):
            _records_pass_compiled(body, 1, False, False, 0, 0, 0)


def warm() -> float:
    """Compile (or load from the cache) every kernel for the argument types it is called with (read-only views
    of received bytes, the provenance constants, writable scratch and state); seconds taken."""
    started = time.perf_counter()
    if not ENABLED:
        return 0.0
    from broker.protocol.batch_builder import encode_record

    warm_records_pass()
    record = encode_record(0, b"k", b"v", headers=[("h", b"1")])
    readonly = np.frombuffer(b"x", np.uint8)
    for body in (np.frombuffer(record, np.uint8), np.frombuffer(bytearray(record), np.uint8)):
        state = np.zeros(STATE_SIZE, np.int64)
        state[REMAINING] = 1
        rewrite_mirrored(body, 0, 0, False, 0, readonly, readonly, readonly, readonly, np.empty(256, np.uint8),
                         1 << 20, state)
    section = np.frombuffer(record, np.uint8)
    cols = np.empty((COLUMNS, 1), np.int64)
    ones = np.ones(1, np.int64)
    parse_section(section, ones, np.array([len(record)], np.int64), cols)
    found = np.empty((2, 1), np.int64)
    locate_headers(section, cols[HEADERS_AT], cols[HEADER_COUNT], np.array([0, 1], np.int64),
                   np.empty((4, 1), np.int64), np.frombuffer(b"h", np.uint8), ones, found)
    padded = np.zeros(len(record) + 16, np.uint8)
    gather(padded, cols[KEY_POS], cols[KEY_LEN], np.empty(2, np.int64), np.empty(1, np.uint8))
    decimals(padded, found[0], found[1], np.zeros(1, np.int64), np.ones(1, bool))
    return time.perf_counter() - started


# ---- the loads' bulk parse (spark_jobs.columnar) ---------------------------------------------------------------
# parse_section's columns, one row each in its ``cols`` output
START, END, TS_DELTA, OFFSET_DELTA, KEY_POS, KEY_LEN, VALUE_POS, VALUE_LEN, HEADER_COUNT, HEADERS_AT = range(10)
COLUMNS = 10


def _parse_section(data, counts, sizes, cols):
    """Every record of the concatenated records sections ``data`` into ``cols`` (COLUMNS x records), with the
    structure checks of :func:`broker.protocol.columnar.parse`; False (the numpy parse then gives the error)
    for anything it would reject, and for varints over 64 bits."""
    total = len(data)
    pos = 0
    at = 0
    batch_end = 0
    n = cols.shape[1]
    for b in range(len(counts)):
        batch_end += sizes[b]
        if batch_end > total:
            return False
        for _ in range(counts[b]):
            if at >= n:
                return False
            cols[START, at] = pos
            length, pos, ok = _read(data, pos, batch_end, 5)
            if not ok:
                return False
            end = pos + length
            if length < 6 or end > batch_end:
                return False
            pos += 1  # attributes
            ts_delta, pos, ok = _read(data, pos, end, 10)
            if not ok:
                return False
            offset_delta, pos, ok = _read(data, pos, end, 5)
            if not ok:
                return False
            key_length, pos, ok = _read(data, pos, end, 5)
            if not ok:
                return False
            cols[KEY_POS, at] = pos
            if key_length > 0:
                pos += key_length
            if pos >= end:
                return False
            value_length, pos, ok = _read(data, pos, end, 5)
            if not ok:
                return False
            cols[VALUE_POS, at] = pos
            if value_length > 0:
                pos += value_length
            if pos >= end:
                return False
            header_count, pos, ok = _read(data, pos, end, 5)
            if not ok or header_count < 0 or header_count * 2 > end - pos:
                return False
            cols[HEADERS_AT, at] = pos
            for _ in range(header_count):
                hk, pos, ok = _read(data, pos, end, 5)
                if not ok or hk < 0:
                    return False
                pos += hk
                hv, pos, ok = _read(data, pos, end, 5)
                if not ok:
                    return False
                if hv > 0:
                    pos += hv
                if pos > end:
                    return False
            if pos != end:
                return False
            cols[END, at] = end
            cols[TS_DELTA, at] = ts_delta
            cols[OFFSET_DELTA, at] = offset_delta
            cols[KEY_LEN, at] = key_length
            cols[VALUE_LEN, at] = value_length
            cols[HEADER_COUNT, at] = header_count
            at += 1
        if pos != batch_end:
            return False
    return at == n and pos == total


def _locate_headers(data, headers_at, header_count, offsets, located, names, name_ends, found):
    """Every header of already parsed records: ``located`` (4 x headers: key pos, key len, value pos, value len,
    record by record from ``offsets``), and in ``found`` (2 x len(names) x records: value pos, value len, -1
    where absent) the last header of each name in ``names`` (concatenated, ending at ``name_ends``)."""
    for i in range(len(headers_at)):
        pos = headers_at[i]
        slot = offsets[i]
        for _ in range(header_count[i]):
            hk, pos, ok = _read(data, pos, len(data), 5)
            key_pos = pos
            pos += hk
            hv, pos, ok = _read(data, pos, len(data), 5)
            located[0, slot] = key_pos
            located[1, slot] = hk
            located[2, slot] = pos
            located[3, slot] = hv
            slot += 1
            begin = 0
            for k in range(len(name_ends)):
                stop = name_ends[k]
                if stop - begin == hk:
                    same = True
                    for j in range(hk):
                        if data[key_pos + j] != names[begin + j]:
                            same = False
                            break
                    if same:
                        found[2 * k, i] = pos
                        found[2 * k + 1, i] = hv
                begin = stop
            if hv > 0:
                pos += hv


def _gather(buf, pos, length, offsets, out):
    """The byte strings at ``pos``/``length`` (< 0: empty) one after the other into ``out``; ``offsets`` gets
    their starts (and the total at the end). False, with nothing copied past either buffer, when a string lies
    outside ``buf`` or does not fit ``out``."""
    at = 0
    size, room = len(buf), len(out)
    for i in range(len(pos)):
        offsets[i] = at
        n = length[i]
        if n > 0:
            start = pos[i]
            if start < 0 or n > size - start or n > room - at:
                return False
            _memcpy(out, at, buf, start, n)
            at += n
    offsets[len(pos)] = at
    return True


def _decimals(buf, pos, length, values, plain):
    """``int()`` of the ASCII decimals at ``pos``/``length`` where they are 1 to 18 plain digits (``plain``
    True), else ``plain`` False."""
    for i in range(len(pos)):
        n = length[i]
        if n < 1 or n > 18:
            plain[i] = False
            continue
        v = 0
        ok = True
        for j in range(n):
            d = np.int64(buf[pos[i] + j]) - 48
            if d < 0 or d > 9:
                ok = False
                break
            v = v * 10 + d
        values[i] = v
        plain[i] = ok


if ENABLED:
    parse_section = njit(cache=True, nogil=True)(_parse_section)
    locate_headers = njit(cache=True, nogil=True)(_locate_headers)
    gather = njit(cache=True, nogil=True)(_gather)
    decimals = njit(cache=True, nogil=True)(_decimals)
else:
    parse_section = locate_headers = gather = decimals = None


if __name__ == "__main__":
    print(f"kernels: {'compiled or loaded' if ENABLED else 'off (LOGBUS_JIT=0 or no numba)'} in {warm():.1f} s")
