"""The mirror's whole-batch rewrite (mirror.batches): records keep key, value, timestamp and headers, gain the
provenance headers, lose nothing but markers, aborted records and mirrored copies."""

from __future__ import annotations

import random

import pytest

from broker.protocol import compression, kernels, records
from broker.protocol.batch_builder import build_batch, encode_record, varint
from broker.protocol.control import TIMESTAMP_TYPE, TRANSACTIONAL, marker_batch
from broker.protocol.record_reader import _varint, iter_records, records_body
from broker.protocol.records import InvalidRecord, read_header
from mirror import batches
from mirror.batches import OFFSET_HEADER, PARTITION_HEADER, SOURCE_HEADER, Provenance, copy_fetched

pytestmark = [pytest.mark.unit, pytest.mark.timeout(60)]


def decode(batch: bytes) -> list[dict]:
    """Every record of one target batch, fully decoded (independently of mirror.batches)."""
    assert records.crc_ok(batch, 0, len(batch))
    header = read_header(batch)
    body = records_body(batch, header, 1 << 26)
    out = []
    for start, end, ts_delta, offset_delta, key_start, key_length, value_length in iter_records(
            body, header.record_count):
        key = None if key_length < 0 else bytes(body[key_start:key_start + key_length])
        pos = key_start + max(key_length, 0)
        _, pos = _varint(body, pos, 5)
        value = None if value_length < 0 else bytes(body[pos:pos + value_length])
        pos += max(value_length, 0)
        count, pos = _varint(body, pos, 5)
        headers = []
        for _ in range(count):
            n, pos = _varint(body, pos, 5)
            name = bytes(body[pos:pos + n]).decode()
            pos += n
            n, pos = _varint(body, pos, 5)
            headers.append((name, None if n < 0 else bytes(body[pos:pos + n])))
            pos += max(n, 0)
        assert pos == end
        out.append({"delta": offset_delta, "ts": header.base_timestamp + ts_delta, "key": key, "value": value,
                    "headers": headers})
    assert header.last_offset_delta == len(out) - 1
    return out


def source_batch(base: int, values: list[tuple], ts: int = 1_700_000_000_000, codec: int = 0, attributes: int = 0,
                 producer_id: int = -1, deltas: list[int] | None = None, ts_deltas: list[int] | None = None,
                 max_ts: int | None = None) -> bytes:
    """``ts_deltas``: the records' timestamp deltas (default 0, 7, 14, ..); ``max_ts``: the header's maxTimestamp
    (default the base timestamp, as build_batch writes it)."""
    recs = [encode_record(deltas[i] if deltas else i, k, v, timestamp_delta=ts_deltas[i] if ts_deltas else i * 7,
                          headers=h)
            for i, (k, v, h) in enumerate(values)]
    batch = build_batch(recs, timestamp_ms=ts, base_offset=base, producer_id=producer_id,
                        attributes=attributes)
    if deltas:  # lastOffsetDelta of a compacted batch keeps its original value
        batch = batch[:23] + (deltas[-1]).to_bytes(4, "big") + batch[27:]
    if max_ts is not None:
        batch = batch[:35] + max_ts.to_bytes(8, "big", signed=True) + batch[43:]
    if codec:
        header = read_header(batch)
        body = compression.compress(codec, batch[records.HEADER_SIZE:])
        from broker.protocol.batch_builder import _AFTER_CRC, _BEFORE_CRC  # noqa: F401
        import crc32c
        import struct
        after = struct.pack(">hiqqqhii", codec | attributes, header.last_offset_delta, header.base_timestamp,
                            header.max_timestamp, producer_id, -1, -1, header.record_count) + body
        batch = struct.pack(">qiibI", base, 4 + 1 + 4 + len(after), -1, 2, crc32c.crc32c(after)) + after
    if attributes or deltas or max_ts is not None:  # recompute the CRC over the patched header
        import crc32c
        import struct
        batch = batch[:17] + struct.pack(">I", crc32c.crc32c(batch[21:])) + batch[21:]
    return batch


def provenance(rec: dict) -> dict:
    return {k: v for k, v in rec["headers"] if k.startswith("logbus.mirror.")}


def test_records_keep_fields_and_gain_provenance():
    values = [(b"k%d" % i, b"v" * i, (("trace", b"t%d" % i),) if i % 2 else ()) for i in range(50)]
    values.append((None, None, ()))
    copied = copy_fetched(source_batch(1000, values), 1000, [], Provenance("live", 3))
    assert copied.records == 51 and copied.next_offset == 1051 and len(copied.batches) == 1
    out = decode(copied.batches[0].encode())
    assert len(out) == 51
    for i, rec in enumerate(out):
        key, value, headers = values[i]
        assert (rec["key"], rec["value"], rec["delta"]) == (key, value, i)
        assert rec["ts"] == 1_700_000_000_000 + i * 7
        assert rec["headers"][:len(headers)] == list(headers)
        assert provenance(rec) == {SOURCE_HEADER: b"live", PARTITION_HEADER: b"3", OFFSET_HEADER: b"%d" % (1000 + i)}
    assert copied.value_bytes == sum(len(k or b"") + len(v or b"") for k, v, _ in values)


def test_position_inside_a_batch_and_batches_merged_with_their_timestamps():
    data = source_batch(0, [(b"a", b"1", ())] * 5, ts=5000) + source_batch(5, [(b"b", b"2", ())] * 5, ts=9000)
    copied = copy_fetched(data, 3, [], Provenance("live", 0))
    out = decode(copied.batches[0].encode())
    assert [provenance(r)[OFFSET_HEADER] for r in out] == [b"3", b"4", b"5", b"6", b"7", b"8", b"9"]
    assert [r["ts"] for r in out] == [5021, 5028, 9000, 9007, 9014, 9021, 9028]
    assert [r["delta"] for r in out] == list(range(7))
    assert copied.next_offset == 10


def test_compacted_gaps_renumbered_and_compression_kept():
    for codec in (1, 2, 3, 4):
        data = source_batch(100, [(b"k", b"x" * 30, ())] * 4, codec=codec, deltas=[0, 3, 4, 9])
        copied = copy_fetched(data, 100, [], Provenance("live", 0))
        batch = copied.batches[0].encode()
        assert read_header(batch).compression == codec
        out = decode(batch)
        assert [provenance(r)[OFFSET_HEADER] for r in out] == [b"100", b"103", b"104", b"109"]
        assert copied.next_offset == 110


def test_mirrored_copies_skipped_markers_and_aborted_transactions_dropped():
    looped = (b"k", b"v", ((SOURCE_HEADER, b"other"),))
    data = source_batch(0, [(b"k", b"v", ()), looped, (b"k", b"v", (("x", None),))])
    aborted = source_batch(3, [(b"a", b"aborted", ())] * 2, attributes=TRANSACTIONAL, producer_id=7)
    marker = marker_batch(7, 0, False, 0, 1)
    marker = marker[:8] + marker[8:]  # base offset 0 in the builder: place it at 5
    import struct
    marker = struct.pack(">q", 5) + marker[8:]
    committed = source_batch(6, [(b"c", b"committed", ())] * 2, attributes=TRANSACTIONAL, producer_id=7)
    copied = copy_fetched(data + aborted + marker + committed, 0, [(7, 3)], Provenance("live", 0))
    out = decode(copied.batches[0].encode())
    assert [r["value"] for r in out] == [b"v", b"v", b"committed", b"committed"]
    assert out[1]["headers"][0] == ("x", None)
    assert copied.skipped_loops == 1 and copied.next_offset == 8


def test_log_append_time_becomes_the_create_time():
    batch = source_batch(0, [(b"k", b"v", ())] * 3, ts=1000, attributes=TIMESTAMP_TYPE)
    batch = batch[:35] + (77_000).to_bytes(8, "big") + batch[43:]  # maxTimestamp = the append time
    import crc32c
    import struct
    batch = batch[:17] + struct.pack(">I", crc32c.crc32c(batch[21:])) + batch[21:]
    out = decode(copy_fetched(batch, 0, [], Provenance("live", 0)).batches[0].encode())
    assert [r["ts"] for r in out] == [77_000] * 3


def test_large_input_split_into_batches_under_the_cap_and_partial_tail_ignored():
    values = [(None, b"z" * 1000, ())] * 300
    data = source_batch(0, values) + source_batch(300, values)
    copied = copy_fetched(data + data[:500], 0, [], Provenance("live", 0), max_batch_bytes=100_000)
    assert len(copied.batches) > 5 and copied.records == 600 and copied.next_offset == 600
    offsets = [int(provenance(r)[OFFSET_HEADER]) for b in copied.batches for r in decode(b.encode())]
    assert offsets == list(range(600))


def test_corrupt_records_raise():
    batch = bytearray(source_batch(0, [(b"k", b"v", ())] * 3))
    batch[records.HEADER_SIZE] = 0x7E  # first record's length: far past the batch
    with pytest.raises(InvalidRecord):
        copy_fetched(bytes(batch), 0, [], Provenance("live", 0))
    assert varint(0) == b"\x00"


def split_sources(kind: str, rng: random.Random) -> tuple[bytes, int, list[int]]:
    """Source batches whose records (about 130 bytes each) do not fit one target batch of 700 bytes, with timestamps
    out of order: (bytes, position, the timestamps of the records a copy holds, in order)."""
    data, expected, base = b"", [], 0
    position = 3 if kind == "create" else 0
    ts = 1_700_000_000_000
    plan = {"create": ["create", "create"], "log_append": ["log_append", "log_append"],
            "mixed": ["create", "log_append", "create"]}[kind]
    for i, source_kind in enumerate(plan):
        n = 30
        ts_deltas = [rng.randrange(-5_000, 60_000) for _ in range(n)]
        looped = {rng.randrange(n)}
        values = [(b"k%d" % j, rng.randbytes(120), ((SOURCE_HEADER, b"x"),) if j in looped else ())
                  for j in range(n)]
        if source_kind == "create":
            max_ts = ts + max(ts_deltas)  # a correct header
            stamps = [ts + d for d in ts_deltas]
            data += source_batch(base, values, ts=ts, ts_deltas=ts_deltas, max_ts=max_ts, codec=i % 2 * 3)
        else:
            append_time = ts + 30_000 + i
            stamps = [append_time] * n
            data += source_batch(base, values, ts=ts, ts_deltas=ts_deltas, max_ts=append_time,
                                 attributes=TIMESTAMP_TYPE)
        expected += [stamp for j, stamp in enumerate(stamps) if base + j >= position and j not in looped]
        base += n
        ts += rng.choice((-40_000, 0, 25_000))
    return data, position, expected


@pytest.mark.parametrize("kind", ["create", "log_append", "mixed"])
@pytest.mark.parametrize("path", ["compiled", "python"])
def test_a_source_batch_split_across_target_batches_gives_each_its_max_timestamp(monkeypatch, path, kind):
    """Every target batch's maxTimestamp is the largest timestamp of the records it holds, also the batches closed
    early at the size cap in the middle of a source batch (they used to keep -1)."""
    if path == "compiled":
        if not kernels.ENABLED:
            pytest.skip("numba off (LOGBUS_JIT=0)")

        def python_rewrite(*args):
            raise AssertionError("the kernel declined the batch")
        monkeypatch.setattr(batches, "_rewrite_python", python_rewrite)
    else:
        monkeypatch.setattr(batches, "_rewrite_compiled", lambda *args: None)
    data, position, expected = split_sources(kind, random.Random(kind))
    copied = copy_fetched(data, position, [], Provenance("live", 0), max_batch_bytes=700)
    assert len(copied.batches) >= 8
    timestamps = []
    for batch in copied.batches:
        encoded = batch.encode()
        out = decode(encoded)
        stamps = [r["ts"] for r in out]
        assert read_header(encoded).max_timestamp == batch.max_timestamp == max(stamps)
        timestamps += stamps
    assert timestamps == expected


@pytest.mark.parametrize("path", ["compiled", "python"])
def test_max_timestamp_counts_only_the_records_copied(monkeypatch, path):
    """Records before the position and mirrored copies are not in the target batch, nor is their timestamp; nor is
    a source header's maxTimestamp (this one overstates its records')."""
    if path == "compiled" and not kernels.ENABLED:
        pytest.skip("numba off (LOGBUS_JIT=0)")
    if path == "python":
        monkeypatch.setattr(batches, "_rewrite_compiled", lambda *args: None)
    looped = (b"k", b"v", ((SOURCE_HEADER, b"other"),))
    data = (source_batch(0, [(b"a", b"1", ())] * 4, ts=5000, ts_deltas=[900, 800, 30, 20], max_ts=5900)
            + source_batch(4, [looped] * 2, ts=8000, ts_deltas=[0, 5], max_ts=8005)
            + source_batch(6, [(b"b", b"2", ())] * 2, ts=4000, ts_deltas=[3, 1], max_ts=99_999))
    copied = copy_fetched(data, 2, [], Provenance("live", 0))
    assert len(copied.batches) == 1 and copied.skipped_loops == 2
    assert [r["ts"] for r in decode(copied.batches[0].encode())] == [5030, 5020, 4003, 4001]
    assert copied.batches[0].max_timestamp == 5030
