"""The compiled record rewrite (broker.protocol.kernels.rewrite_mirrored) against the Python one it replaces: the same target batches,
byte for byte, over random source batches (keys, nulls, headers, mirrored copies, compacted gaps, LogAppendTime,
positions inside batches, target batches split at the size cap), and the same errors for corrupt bytes."""

from __future__ import annotations

import random

import pytest

from broker.protocol import records
from broker.protocol.batch_builder import encode_record
from broker.protocol.control import TIMESTAMP_TYPE
from broker.protocol import kernels
from mirror import batches
from mirror.batches import SOURCE_HEADER, Provenance, copy_fetched

from test_mirror_batches import decode, source_batch

pytestmark = [pytest.mark.unit, pytest.mark.timeout(300)]
needs_kernel = pytest.mark.skipif(not kernels.ENABLED, reason="numba off (LOGBUS_JIT=0)")


def both(monkeypatch, data, position, cap) -> tuple:
    """copy_fetched with the kernel, then with the Python rewrite only: (target batch bytes, counters) each."""
    results = []
    for compiled in (True, False):
        if not compiled:
            monkeypatch.setattr(batches, "_rewrite_compiled", lambda *args: None)
        copied = copy_fetched(data, position, [], Provenance("live-east", 7), max_batch_bytes=cap)
        results.append(([b.encode() for b in copied.batches], copied.next_offset, copied.records,
                         copied.skipped_loops, copied.value_bytes, [b.last_source_offset for b in copied.batches]))
    return results


def random_values(rng: random.Random, n: int) -> list[tuple]:
    out = []
    for i in range(n):
        key = None if rng.random() < 0.2 else rng.randbytes(rng.choice((0, 3, 70, 200)))
        value = None if rng.random() < 0.05 else rng.randbytes(rng.choice((0, 1, 63, 64, 200, 9000)))
        headers = []
        for _ in range(rng.choice((0, 0, 1, 3))):
            name = rng.choice(("h", "trace-id", SOURCE_HEADER if rng.random() < 0.1 else "x" * 70))
            headers.append((name, None if rng.random() < 0.2 else rng.randbytes(rng.choice((0, 5, 130)))))
        out.append((key, value, headers))
    return out


@needs_kernel
@pytest.mark.parametrize("seed", range(40))
def test_same_bytes_as_the_python_rewrite(monkeypatch, seed):
    rng = random.Random(seed)
    data = b""
    base = rng.choice((0, 5, 1000, 2 ** 40))
    ts = 1_700_000_000_000
    for _ in range(rng.randint(1, 5)):
        n = rng.randint(1, 300)
        values = random_values(rng, n)
        deltas = sorted(rng.sample(range(n * 3), n)) if rng.random() < 0.3 else None
        attributes = TIMESTAMP_TYPE if rng.random() < 0.3 else 0
        data += source_batch(base, values, ts=ts, attributes=attributes, deltas=deltas,
                             codec=rng.choice((0, 0, 1, 3)))
        base += (deltas[-1] if deltas else n - 1) + 1
        ts += rng.choice((-50_000, 0, 3, 90_000_000))
    position = rng.choice((0, base // 2, base - 1))
    cap = rng.choice((batches.MAX_BATCH_BYTES, 5000, 300))
    compiled, python = both(monkeypatch, data, position, cap)
    assert compiled == python
    assert compiled[2] > 0 or position >= base - 1


@needs_kernel
def test_large_record_counts_and_wide_varints(monkeypatch):
    """Offset deltas and header counts over one varint byte, offsets of many digits."""
    values = [(b"k", b"v" * 10, [("h", b"1")] * 70) for _ in range(20)] + [(None, b"x", [])] * 20000
    data = source_batch(10 ** 15, values)
    compiled, python = both(monkeypatch, data, 0, batches.MAX_BATCH_BYTES)
    assert compiled == python and compiled[2] == 20020


@needs_kernel
@pytest.mark.parametrize("cut", [0.3, 0.7, 0.99])
def test_corrupt_records_raise_the_same_error(monkeypatch, cut):
    """A record whose fields run past the batch: the kernel declines, the Python rewrite raises as before."""
    recs = [encode_record(i, b"k", b"value-%d" % i) for i in range(50)]
    body = b"".join(recs)
    broken = bytearray(body)
    at = int(len(broken) * cut)
    broken[at] = 0x7E  # a length / varint byte that does not fit
    data = source_batch(0, [(b"k", b"value-%d" % i, []) for i in range(50)])
    header = records.read_header(data)
    errors = []
    for compiled in (True, False):
        if not compiled:
            monkeypatch.setattr(batches, "_rewrite_compiled", lambda *args: None)
        out = batches.Copied([], 0)
        try:
            batches._rewrite(memoryview(bytes(broken)), header, 0, False, Provenance("live", 0), out,
                             batches.TargetBatch(), batches.MAX_BATCH_BYTES)
            errors.append(None)
        except records.InvalidRecord as exc:
            errors.append(str(exc))
    assert errors[0] == errors[1]


@needs_kernel
def test_kernel_declines_what_it_does_not_handle():
    """A negative header count: BAD, so the Python rewrite decides."""
    import numpy as np

    rec = bytearray(encode_record(0, b"k", b"v"))
    rec[-1] = 1  # header count -1
    state = np.zeros(kernels.STATE_SIZE, np.int64)
    state[kernels.REMAINING] = 1
    out = np.empty(1000, np.uint8)
    p = Provenance("live", 0)
    status = kernels.rewrite_mirrored(np.frombuffer(bytes(rec), np.uint8), 0, 0, False, 0, np.zeros(1, np.uint8),
                                    p.constant_array, p.offset_key_array, batches._SOURCE_ARRAY, out, 10 ** 6, state)
    assert status == kernels.BAD


@needs_kernel
def test_a_header_count_past_the_record_is_an_error_in_both():
    """A two-byte zero header count whose second byte lies past the record: the kernel declines, Python raises
    (it used to write a malformed record)."""
    import numpy as np

    body = bytes([0x0C, 0, 0, 0, 1, 1, 0x80, 0])
    state = np.zeros(kernels.STATE_SIZE, np.int64)
    state[kernels.REMAINING] = 1
    p = Provenance("live", 0)
    status = kernels.rewrite_mirrored(np.frombuffer(body, np.uint8), 0, 0, False, 0, np.zeros(1, np.uint8),
                                      p.constant_array, p.offset_key_array, batches._SOURCE_ARRAY,
                                      np.empty(1000, np.uint8), 10 ** 6, state)
    assert status == kernels.BAD


@needs_kernel
@pytest.mark.parametrize("seed", range(12))
def test_same_bytes_and_exact_max_timestamps_with_unordered_timestamps(monkeypatch, seed):
    """Timestamps out of order (negative deltas too, headers right or wrong), source batches split at a small cap:
    the same bytes both ways, and every target batch's maxTimestamp is the largest timestamp it holds."""
    rng = random.Random(1000 + seed)
    data = b""
    base = rng.choice((0, 77))
    ts = 1_700_000_000_000
    for _ in range(rng.randint(1, 4)):
        n = rng.randint(1, 120)
        values = random_values(rng, n)
        ts_deltas = [rng.randrange(-100_000, 100_000) for _ in range(n)]
        attributes = TIMESTAMP_TYPE if rng.random() < 0.3 else 0
        max_ts = rng.choice((ts + max(ts_deltas), ts, ts + 10 ** 6))
        data += source_batch(base, values, ts=ts, attributes=attributes, ts_deltas=ts_deltas, max_ts=max_ts,
                             codec=rng.choice((0, 0, 3)))
        base += n
        ts += rng.choice((-50_000, 0, 3, 90_000_000))
    position = rng.choice((0, base // 2))
    cap = rng.choice((2000, 700, 300))
    compiled, python = both(monkeypatch, data, position, cap)
    assert compiled == python
    for encoded in compiled[0]:
        assert records.read_header(encoded).max_timestamp == max(r["ts"] for r in decode(encoded))


@needs_kernel
@pytest.mark.parametrize("log_append, shift, expected", [(False, 0, 40), (False, 100, 140), (True, 7, 7)])
def test_the_kernel_keeps_the_largest_written_timestamp_delta(log_append, shift, expected):
    import numpy as np

    from broker.protocol.batch_builder import varint

    body = b"".join(encode_record(i, b"k", b"v", timestamp_delta=d) for i, d in enumerate((5, -3, 40, 2)))
    state = np.zeros(kernels.STATE_SIZE, np.int64)
    state[kernels.REMAINING] = 4
    state[kernels.MAX_TS_DELTA] = kernels.MIN_INT64
    p = Provenance("live", 0)
    status = kernels.rewrite_mirrored(np.frombuffer(body, np.uint8), 0, 0, log_append, shift,
                                      np.frombuffer(varint(shift), np.uint8), p.constant_array, p.offset_key_array,
                                      batches._SOURCE_ARRAY, np.empty(1000, np.uint8), 10 ** 6, state)
    assert status == kernels.OK and state[kernels.COUNT] == 4 and state[kernels.MAX_TS_DELTA] == expected


@needs_kernel
def test_timestamps_past_64_bits_give_the_int64_maximum(monkeypatch):
    """A corrupt source whose base timestamp plus a delta runs past 64 bits: maxTimestamp stops at the int64
    maximum (it still encodes), the same both ways."""
    top = kernels.MAX_INT64
    data = source_batch(0, [(b"k", b"v", [])] * 3, ts=top - 10, ts_deltas=[0, 100, 3], max_ts=top)
    compiled, python = both(monkeypatch, data, 0, batches.MAX_BATCH_BYTES)
    assert compiled == python
    assert records.read_header(compiled[0][0]).max_timestamp == top
