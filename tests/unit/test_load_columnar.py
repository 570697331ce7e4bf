"""The load's raw fetch path without brokers: bulk record parsing (spark_jobs.columnar), bulk Avro decoding
(spark_jobs.avro_bulk) and Decoder.record_batches, each checked against the record-by-record code on real
encoded batches and Avro bodies."""

import io
import random
import struct

import fastavro
import pytest
from fuzzing import build_batch

from broker.protocol import kernels, record_reader
from broker.protocol.records import InvalidRecord, read_header
from spark_jobs import avro_bulk, columnar

pytestmark = [pytest.mark.unit, pytest.mark.timeout(60)]
COMPILED = [True, False] if kernels.ENABLED else [False]


@pytest.fixture(params=COMPILED, ids=lambda on: "compiled" if on else "numpy")
def jit(request, monkeypatch):
    """Each test once with the compiled parse (broker.protocol.kernels) and once with numpy only."""
    monkeypatch.setattr(kernels, "ENABLED", request.param)
    return request.param

SCHEMA = {"type": "record", "name": "PageView", "namespace": "t", "fields": [
    {"name": "member", "type": "long"}, {"name": "page", "type": "string"},
    {"name": "referrer", "type": ["null", "string"], "default": None}, {"name": "n", "type": "int"},
    {"name": "ok", "type": "boolean"}, {"name": "score", "type": "double"}, {"name": "f", "type": "float"},
    {"name": "blob", "type": "bytes"}, {"name": "late", "type": ["long", "null"]}]}


def _batches(rng, n_batches=5, codec=0, log_append=False):
    out, base = [], 100
    for _ in range(n_batches):
        recs = []
        for _ in range(rng.randint(1, 300)):
            key = None if rng.random() < 0.2 else rng.randbytes(rng.choice([0, 3, 200]))
            value = None if rng.random() < 0.1 else rng.randbytes(rng.choice([0, 5, 70, 9000]))
            headers = [(rng.choice([b"a", b"logbus.audit.seq", b"k" * 70]), None if rng.random() < 0.2 else
                        rng.randbytes(rng.randint(0, 90))) for _ in range(rng.choice([0, 0, 1, 4]))]
            recs.append((key, value, headers))
        attributes = codec | (0x08 if log_append else 0)
        batch = build_batch(recs, codec, base_offset=base, attributes=attributes, base_timestamp=1_700_000_000_000)
        out.append(batch)
        base += len(recs)
    return out


def _sections(batches):
    out = []
    for b in batches:
        h = read_header(b)
        out.append((h, record_reader.records_body(b, h, 1 << 26)))
    return out


def _expected(sections):
    rows = []
    for h, body in sections:
        for start, end, ts_delta, offset_delta, key_start, key_length, value_length in record_reader.iter_records(
                body, h.record_count):
            key, value, headers = _fields(body[start:end])
            ts = h.max_timestamp if h.attributes & 0x08 else h.base_timestamp + ts_delta
            rows.append((h.base_offset + offset_delta, ts, key, value, headers))
    return rows


def _varint(buf, pos):
    raw, shift = 0, 0
    while True:
        b = buf[pos]
        pos += 1
        raw |= (b & 0x7F) << shift
        if b < 0x80:
            return (raw >> 1) ^ -(raw & 1), pos
        shift += 7


def _fields(rec):
    """key, value, headers of one encoded record, decoded plainly."""
    _, pos = _varint(rec, 0)
    pos += 1
    _, pos = _varint(rec, pos)
    _, pos = _varint(rec, pos)
    out = []
    for _ in range(2):
        n, pos = _varint(rec, pos)
        out.append(None if n < 0 else rec[pos:pos + max(n, 0)])
        pos += max(n, 0)
    count, pos = _varint(rec, pos)
    headers = []
    for _ in range(count):
        n, pos = _varint(rec, pos)
        k = rec[pos:pos + n]
        pos += n
        n, pos = _varint(rec, pos)
        headers.append((k, None if n < 0 else rec[pos:pos + n]))
        pos += max(n, 0)
    return out[0], out[1], headers


@pytest.mark.parametrize("codec,log_append", [(0, False), (1, False), (3, True), (4, False)])
def test_parse_matches_the_record_reader(codec, log_append, jit):
    rng = random.Random(codec)
    sections = _sections(_batches(rng, codec=codec, log_append=log_append))
    expected = _expected(sections)
    r = columnar.parse(sections, tuple(avro_bulk.AUDIT.values()))
    assert r.offset.tolist() == [e[0] for e in expected]
    assert r.timestamp.tolist() == [e[1] for e in expected]
    batch = columnar.raw_batch(r, "t", 3, columnar.raw_schema())
    assert batch.column("key").to_pylist() == [e[2] for e in expected]
    assert batch.column("value").to_pylist() == [e[3] for e in expected]
    assert batch.column("headers").to_pylist() == [[{"key": k.decode(errors="replace"), "value": v}
                                                    for k, v in e[4]] for e in expected]
    assert set(batch.column("partition").to_pylist()) == {3}
    assert set(batch.column("timestampType").to_pylist()) == {1 if log_append else 0}
    lo, hi = expected[7][0], expected[-3][0]
    cut = columnar.in_range(r, lo, hi)
    assert cut.offset.tolist() == [e[0] for e in expected if lo <= e[0] < hi]
    assert columnar.raw_batch(cut, "t", 3, columnar.raw_schema()).column("headers").to_pylist() == [
        [{"key": k.decode(errors="replace"), "value": v} for k, v in e[4]] for e in expected if lo <= e[0] < hi]


def test_parse_refuses_broken_records(jit):
    sections = _sections(_batches(random.Random(1), n_batches=1))
    h, body = sections[0]
    with pytest.raises(InvalidRecord):
        columnar.parse([(h, body[:-1])])
    with pytest.raises(InvalidRecord):
        columnar.parse([(h, body + b"\x00")])
    bad = bytearray(body)
    bad[0] = 0x7E  # the first record claims 63 bytes: its fields no longer fill it
    with pytest.raises(InvalidRecord):
        columnar.parse([(h, bytes(bad))])


def _avro(rng):
    return {"member": rng.randint(-2**62, 2**62), "page": "".join(rng.choice("aé/漢x") for _ in range(rng.randint(0, 40))),
            "referrer": None if rng.random() < 0.4 else "r" * rng.randint(0, 200), "n": rng.randint(-2**31, 2**31 - 1),
            "ok": rng.random() < 0.5, "score": rng.random() * 1e6, "f": 1.5, "blob": rng.randbytes(rng.randint(0, 9)),
            "late": None if rng.random() < 0.5 else rng.randint(-5, 5)}


def _wire(record, schema_id=7):
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, fastavro.parse_schema(SCHEMA), record)
    return b"\x00" + struct.pack(">I", schema_id) + buf.getvalue()


def _records_of_values(values, headers=None):
    recs = [(b"k%d" % i, v, (headers or {}).get(i, [])) for i, v in enumerate(values)]
    return columnar.parse(_sections([build_batch(recs, 0, base_offset=0)]), tuple(avro_bulk.AUDIT.values()))


def _arrow_fields():
    from pyspark.sql.pandas.types import to_arrow_schema

    from spark_jobs.decode import table_schema

    return [f for f in to_arrow_schema(table_schema(SCHEMA), timezone="UTC") if not f.name.startswith("_")]


def test_bulk_avro_matches_fastavro():
    rng = random.Random(5)
    values = [_avro(rng) for _ in range(500)]
    r = _records_of_values([_wire(v) for v in values])
    assert avro_bulk.schema_ids(r).tolist() == [7] * 500
    cols = avro_bulk.decode(r, avro_bulk.plan(SCHEMA), _arrow_fields())
    parsed = fastavro.parse_schema(SCHEMA)
    for name in ("member", "page", "referrer", "n", "ok", "score", "blob", "late"):
        want = [fastavro.schemaless_reader(io.BytesIO(_wire(v)[5:]), parsed)[name] for v in values]
        assert cols[name].to_pylist() == want, name


def test_bulk_avro_declines_what_fastavro_would_quarantine():
    rng = random.Random(6)
    good = [_wire(_avro(rng)) for _ in range(10)]
    plan = avro_bulk.plan(SCHEMA)
    assert avro_bulk.decode(_records_of_values(good[:-1] + [good[-1][:-3]]), plan, _arrow_fields()) is None
    v = _avro(rng)
    v["page"] = "xx"
    bad_utf8 = _wire(v).replace(b"xx", b"\xff\xfe")
    assert avro_bulk.decode(_records_of_values(good + [bad_utf8]), plan, _arrow_fields()) is None
    assert avro_bulk.schema_ids(_records_of_values(good + [b"\x01" + good[0][1:]])) is None
    assert avro_bulk.schema_ids(_records_of_values(good + [None])) is None
    assert avro_bulk.plan({"type": "record", "name": "x", "fields": [{"name": "a", "type": {"type": "array",
                                                                                             "items": "long"}}]}) is None


def test_audit_headers_match_the_dict_lookup(jit):
    values = [b"v"] * 6
    headers = {0: [(b"logbus.audit.seq", b"12"), (b"logbus.audit.producer", b"p-1"), (b"logbus.audit.host", b"h")],
               1: [(b"logbus.audit.seq", b"1"), (b"logbus.audit.seq", b"99")],  # the last one wins
               2: [(b"logbus.audit.seq", b" 7 "), (b"logbus.audit.time", b"-3"), (b"logbus.audit.host", b"\xff")],
               3: [(b"logbus.audit.seq", b"x1"), (b"logbus.audit.time", None)],
               4: [(b"logbus.audit.seq", b"+5"), (b"logbus.audit.time", b"1700000000000")]}
    cols = avro_bulk.audit_columns(_records_of_values(values, headers))
    assert cols["_seq"].to_pylist() == [12, 99, 7, None, 5, None]
    assert cols["_producer"].to_pylist() == ["p-1", None, None, None, None, None]
    assert cols["_host"].to_pylist() == ["h", None, "\ufffd", None, None, None]
    assert cols["_generated"].to_pylist() == [None, None, -3, None, 1700000000000, None]


def _outcome(sections, compiled: bool, monkeypatch):
    monkeypatch.setattr(kernels, "ENABLED", compiled)
    try:
        r = columnar.parse(sections, tuple(avro_bulk.AUDIT.values()))
    except InvalidRecord:
        return "invalid"
    audit = {k: v.to_pylist() for k, v in avro_bulk.audit_columns(r).items()}
    return ([a.tolist() for a in (r.offset, r.timestamp, r.key_pos, r.key_len, r.value_pos, r.value_len,
                                  r.header_count)], [[a.tolist() for a in h] for h in r.headers], audit,
            bytes(r.buf))


@pytest.mark.skipif(not kernels.ENABLED, reason="numba off")
@pytest.mark.parametrize("seed", range(40))
def test_compiled_parse_equals_numpy_on_damaged_sections(seed, monkeypatch):
    """Random batches with audit headers, then random bytes changed, cut or added: the compiled parse and the
    numpy parse give the same columns, headers and audit values, or both refuse."""
    rng = random.Random(seed)
    recs = []
    for i in range(rng.randint(1, 60)):
        headers = [(rng.choice([b"logbus.audit.seq", b"logbus.audit.producer", b"logbus.audit.time", b"x"]),
                    rng.choice([b"%d" % rng.randint(0, 10**12), b"p-1", None, b"-4", b"9" * 19]))
                   for _ in range(rng.choice([0, 1, 3, 5]))]
        recs.append((None if rng.random() < 0.2 else b"k%d" % i, rng.randbytes(rng.randint(0, 40)), headers))
    sections = _sections([build_batch(recs, 0, base_offset=10)])
    h, body = sections[0]
    body = bytearray(body)
    for _ in range(rng.choice([0, 1, 1, 2, 4])):
        what = rng.random()
        if what < 0.6 and body:
            body[rng.randrange(len(body))] = rng.choice([0, 1, 2, 0x7F, 0x80, 0xFF, rng.randrange(256)])
        elif what < 0.8 and body:
            del body[rng.randrange(len(body)):]
        else:
            body += rng.randbytes(rng.randint(1, 3))
    damaged = [(h, bytes(body))]
    assert _outcome(damaged, True, monkeypatch) == _outcome(damaged, False, monkeypatch)


def _zigzag(n: int) -> bytes:
    from fuzzing import uvarint

    return uvarint((n << 1) ^ (n >> 63))


def test_string_lengths_near_2_63_are_declined_not_copied(jit):
    """A body claiming a string of ~2**62 bytes (two of them wrap a sum of lengths to a small number): the
    column-wise decode declines the chunk (fastavro then quarantines the records), nothing reads past the
    buffer; and a gather outside the buffer is a ValueError, never a copy."""
    import numpy as np

    rng = random.Random(9)
    good = [_wire(_avro(rng)) for _ in range(3)]
    huge = b"\x00" + struct.pack(">I", 7) + _zigzag(5) + _zigzag(2**62) + b"abc"
    r = _records_of_values(good + [huge, huge] + good)
    assert avro_bulk.decode(r, avro_bulk.plan(SCHEMA), _arrow_fields()) is None
    buf = np.zeros(32, dtype=np.uint8)
    for pos, length in (([0, 4], [2**62, 2**62]), ([30], [5]), ([-1], [2])):
        with pytest.raises(ValueError, match="outside the buffer"):
            columnar.binary_array(buf, np.array(pos, dtype=np.int64), np.array(length, dtype=np.int64))
