"""The column-wise record parse (:mod:`broker.protocol.columnar`) against the record walk
(:func:`record_reader.iter_records`): the same verdict for valid and broken records sections, the same fields for
valid ones; produce validation's column-wise path gives exactly the walk's errors."""

from __future__ import annotations

import random
from types import SimpleNamespace

import pytest

from broker.protocol import columnar, kernels, record_reader, validation
from broker.protocol.batch_builder import build_batch, encode_record
from broker.protocol.records import InvalidBatch, InvalidRecord

pytestmark = [pytest.mark.unit, pytest.mark.timeout(120)]
BASE_TS = 1_700_000_000_000
CAP = 1048588


def _records(rng: random.Random, n: int) -> list[bytes]:
    out = []
    for i in range(n):
        key = None if rng.random() < 0.1 else rng.randbytes(rng.choice([0, 3, 70, 200]))
        value = None if rng.random() < 0.05 else rng.randbytes(rng.choice([0, 10, 63, 64, 200, 9000]))
        headers = tuple((f"h{j}", None if rng.random() < 0.2 else rng.randbytes(rng.choice([0, 5, 130])))
                        for j in range(rng.choice([0, 0, 1, 3])))
        out.append(encode_record(i, key, value, rng.choice([0, 1, -5, 300, 1 << 40]), headers))
    return out


def _walk(body: bytes, count: int):
    try:
        return list(record_reader.iter_records(body, count)), None
    except InvalidRecord:
        return None, InvalidRecord


def _columns(body: bytes, count: int):
    try:
        return columnar.parse(body, [count], [len(body)]), None
    except InvalidRecord:
        return None, InvalidRecord


def test_valid_sections_parse_to_the_walks_fields():
    rng = random.Random(1)
    for _ in range(60):
        n = rng.randrange(1, 120)
        body = b"".join(_records(rng, n))
        walked, _ = _walk(body, n)
        f = columnar.parse(body, [n], [len(body)])
        assert [w[0] for w in walked] == f.start.tolist()
        assert [w[1] for w in walked] == f.end.tolist()
        assert [w[2] for w in walked] == f.ts_delta.tolist()
        assert [w[3] for w in walked] == f.offset_delta.tolist()
        assert [w[4] for w in walked] == f.key_pos.tolist()
        assert [w[5] for w in walked] == f.key_len.tolist()
        assert [w[6] for w in walked] == f.value_len.tolist()


def test_broken_sections_get_the_walks_verdict():
    """Byte flips, truncations, wrong counts and trailing bytes: whenever the walk refuses, so do the columns
    (and the other way round)."""
    rng = random.Random(2)
    refused = 0
    for case in range(3000):
        n = rng.randrange(1, 60)
        body = bytearray(b"".join(_records(rng, n)))
        count = n
        kind = case % 4
        if kind == 0:
            for _ in range(rng.randrange(1, 4)):
                body[rng.randrange(len(body))] = rng.randrange(256)
        elif kind == 1:
            del body[rng.randrange(len(body)):]
        elif kind == 2:
            count = max(1, n + rng.choice([-1, 1, 5]))
        else:
            body += rng.randbytes(rng.randrange(1, 8))
        walked, walk_error = _walk(bytes(body), count)
        parsed, column_error = _columns(bytes(body), count)
        assert walk_error == column_error, (case, kind)
        if walk_error:
            refused += 1
        else:
            assert [w[3] for w in walked] == parsed.offset_delta.tolist()
    assert refused > 1500  # the cases do break things


def _verdict(batch: bytes, compacted: bool, bounds):
    try:
        validation.check_records(batch, CAP, compacted, bounds=bounds)
        return None
    except InvalidBatch as exc:
        return type(exc), str(exc)


@pytest.mark.parametrize("fast_path", ["columns", "kernel"])
def test_produce_validation_column_wise_equals_the_walk(monkeypatch, fast_path):
    """Batches checked column-wise, or by the compiled kernel (broker.protocol.kernels), get every verdict and
    message of the record walk."""
    if fast_path == "kernel" and not kernels.ENABLED:
        pytest.skip("numba off (LOGBUS_JIT=0)")
    rng = random.Random(3)
    now = BASE_TS
    seen = set()
    for case in range(400):
        n = rng.randrange(1, 200)
        recs = _records(rng, n)
        kind = case % 5
        if kind == 1:  # a wrong offset delta somewhere
            i = rng.randrange(n)
            recs[i] = encode_record(i + rng.choice([1, -1, 7]), b"k", b"v")
        elif kind == 2:  # a keyless record (compacted topics refuse it)
            recs[rng.randrange(n)] = encode_record(0, None, b"v")
        elif kind == 3:  # a timestamp out of bounds
            i = rng.randrange(n)
            recs[i] = encode_record(i, b"k", b"v", rng.choice([-(10 ** 9), 10 ** 9, -BASE_TS - 1]))
        body = bytearray(b"".join(recs))
        if kind == 4:
            body[rng.randrange(len(body))] = rng.randrange(256)
        batch = bytearray(build_batch([bytes(body)], timestamp_ms=now))
        batch[57:61] = n.to_bytes(4, "big")  # build_batch counted one "record": the real count
        batch[23:27] = (n - 1).to_bytes(4, "big")
        import crc32c
        batch[17:21] = crc32c.crc32c(bytes(batch[21:])).to_bytes(4, "big")
        compacted = rng.random() < 0.5
        bounds = (now - 3600_000, now + 3600_000) if rng.random() < 0.6 else None
        with monkeypatch.context() as m:
            m.setattr(columnar, "COLUMNAR_MIN_RECORDS", 1)
            m.setattr(validation, "KERNEL_MIN_RECORDS", 1)
            m.setattr(validation, "_kernels", kernels if fast_path == "kernel" else SimpleNamespace(ENABLED=False))
            fast = _verdict(bytes(batch), compacted, bounds)
        with monkeypatch.context() as m:
            m.setattr(columnar, "COLUMNAR_MIN_RECORDS", 10 ** 9)
            m.setattr(validation, "KERNEL_MIN_RECORDS", 10 ** 9)
            slow = _verdict(bytes(batch), compacted, bounds)
        assert fast == slow, case
        seen.add(None if fast is None else fast[0])
    assert {None, InvalidRecord, validation.InvalidTimestamp} <= seen
