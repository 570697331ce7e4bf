"""The compiled record check (broker.protocol.kernels.records_pass) against the record walk
(record_reader.iter_records and validation's rules): it passes every valid records section, and never passes one
the walk refuses (byte flips, truncations, wrong counts, trailing bytes, offset deltas, keyless records on
compacted topics, timestamps out of bounds)."""

from __future__ import annotations

import random

import pytest

from broker.protocol import kernels, record_reader
from broker.protocol.batch_builder import encode_record
from broker.protocol.records import InvalidRecord

from test_columnar_records import BASE_TS, _records

pytestmark = [pytest.mark.unit, pytest.mark.timeout(300),
              pytest.mark.skipif(not kernels.ENABLED, reason="numba off (LOGBUS_JIT=0)")]


def _walk_passes(body: bytes, count: int, compacted: bool, bounds) -> bool:
    try:
        for i, (_s, _e, ts_delta, offset_delta, _k, key_length, _v) in enumerate(
                record_reader.iter_records(body, count)):
            if offset_delta != i or (compacted and key_length < 0):
                return False
            if bounds is not None and BASE_TS + ts_delta != -1 and not bounds[0] <= BASE_TS + ts_delta <= bounds[1]:
                return False
        return True
    except InvalidRecord:
        return False


def test_valid_sections_pass_in_place_and_as_copies():
    rng = random.Random(1)
    for _ in range(200):
        n = rng.randrange(1, 300)
        body = b"".join(_records(rng, n))
        assert kernels.records_pass(body, n, False, BASE_TS, None)
        assert kernels.records_pass(memoryview(bytearray(body)), n, False, BASE_TS, None)
        assert kernels.records_pass(body, n, False, BASE_TS, (-(2 ** 63), 2 ** 63 - 1 + 10 ** 6))


def test_never_passes_what_the_walk_refuses():
    rng = random.Random(2)
    refused = 0
    for case in range(4000):
        n = rng.randrange(1, 60)
        recs = _records(rng, n)
        kind = case % 7
        if kind == 4:
            i = rng.randrange(n)
            recs[i] = encode_record(i + rng.choice([1, -1, 7]), b"k", b"v")
        elif kind == 5:
            recs[rng.randrange(n)] = encode_record(0, None, b"v")
        elif kind == 6:
            i = rng.randrange(n)
            recs[i] = encode_record(i, b"k", b"v", rng.choice([-(10 ** 9), 10 ** 9, -BASE_TS - 1]))
        body = bytearray(b"".join(recs))
        count = n
        if kind == 0:
            for _ in range(rng.randrange(1, 4)):
                body[rng.randrange(len(body))] = rng.randrange(256)
        elif kind == 1:
            del body[rng.randrange(len(body)):]
        elif kind == 2:
            count = max(1, n + rng.choice([-1, 1, 5]))
        elif kind == 3:
            body += rng.randbytes(rng.randrange(1, 8))
        compacted = rng.random() < 0.5
        bounds = (BASE_TS - 3600_000, BASE_TS + 3600_000) if rng.random() < 0.6 else None
        walk = _walk_passes(bytes(body), count, compacted, bounds)
        compiled = kernels.records_pass(bytes(body), count, compacted, BASE_TS, bounds)
        assert compiled == walk, (case, kind)
        refused += not walk
    assert refused > 2000  # the cases do break things


def test_timestamps_near_the_64_bit_limits_are_left_to_the_walk():
    rec = encode_record(0, b"k", b"v", 2 ** 62)
    assert not kernels.records_pass(rec, 1, False, BASE_TS, (0, 2 ** 63 - 1))  # declined, not judged
    assert kernels.records_pass(rec, 1, False, BASE_TS, None)  # no bounds: the timestamp is not looked at
