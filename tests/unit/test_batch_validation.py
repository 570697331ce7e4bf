"""Produce-time batch validation (Kafka's LogValidator rules) and bounded decompression, in-process.

Batches are built here byte by byte (``record``/``make_batch``), independently of the broker's code, so that
every rule can be broken on purpose with a valid CRC; valid batches also come from kafka-python's builder.
"""

import gzip
import os
import random
import struct
import time
import zlib
from types import SimpleNamespace

import cramjam
import crc32c
import lz4.frame
import pytest
import zstandard

from broker.log.cleaner import build_offset_map, clean_segment
from broker.protocol import compression, kernels, record_reader, records, validation
from broker.protocol.records import BatchTooLarge, CorruptBatch, InvalidBatch, InvalidRecord

pytestmark = [pytest.mark.unit, pytest.mark.timeout(60)]

CAP = 1048588  # the default message.max.bytes
BASE_TS = 1_700_000_000_000


# ---- an independent encoder ---------------------------------------------------------------------------------
def varint(value: int) -> bytes:
    raw = (value << 1) ^ (value >> 63)
    out = bytearray()
    while raw >= 0x80:
        out.append(raw & 0x7F | 0x80)
        raw >>= 7
    out.append(raw)
    return bytes(out)


def record(offset_delta: int, key: bytes | None = b"k", value: bytes | None = b"v", ts_delta: int = 0,
           headers=()) -> bytes:
    body = b"\x00" + varint(ts_delta) + varint(offset_delta)
    body += varint(-1) if key is None else varint(len(key)) + key
    body += varint(-1) if value is None else varint(len(value)) + value
    body += varint(len(headers))
    for hkey, hvalue in headers:
        body += varint(len(hkey)) + hkey + (varint(-1) if hvalue is None else varint(len(hvalue)) + hvalue)
    return varint(len(body)) + body


def xerial(data: bytes, chunk: int = 32 << 10) -> bytes:
    out = b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1)
    for i in range(0, len(data), chunk):
        block = bytes(cramjam.snappy.compress_raw(data[i: i + chunk]))
        out += struct.pack(">i", len(block)) + block
    return out


COMPRESS = {
    0: lambda b: b,
    1: gzip.compress,
    2: lambda b: bytes(cramjam.snappy.compress_raw(b)),
    3: lz4.frame.compress,
    4: zstandard.ZstdCompressor().compress,
}


def make_batch(payload: bytes, count: int, last_offset_delta: int | None = None, attributes: int = 0) -> bytes:
    """A magic-2 batch around ``payload`` (already compressed as ``attributes`` says), CRC valid."""
    delta = count - 1 if last_offset_delta is None else last_offset_delta
    after_crc = struct.pack(">hiqqqhii", attributes, delta, BASE_TS, BASE_TS + max(count - 1, 0), -1, -1, -1,
                            count) + payload
    return struct.pack(">qiibI", 0, 4 + 1 + 4 + len(after_crc), 0, 2, crc32c.crc32c(after_crc)) + after_crc


def batch_of(recs: list[bytes], codec: int = 0, **kw) -> bytes:
    return make_batch(COMPRESS[codec](b"".join(recs)), len(recs), attributes=codec, **kw)


def good_records(n: int = 3, **kw) -> list[bytes]:
    return [record(i, ts_delta=i, **kw) for i in range(n)]


def rejects(data: bytes, kind=InvalidRecord, cap: int = CAP, compacted: bool = False) -> str:
    with pytest.raises(kind) as info:
        validation.validate(data, cap, compacted)
    return str(info.value)


# ---- valid input ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("codec", [0, 1, 2, 3, 4])
def test_valid_batches_of_every_codec_pass(codec):
    data = batch_of(good_records(5, headers=[(b"h", b"v"), (b"n", None)]), codec)
    summary = validation.validate(data, CAP, compacted=True)
    assert (summary.batches, summary.records, summary.offset_count) == (1, 5, 5)


def test_xerial_framed_snappy_passes():
    recs = [record(i, value=os.urandom(20) * 100) for i in range(100)]  # > one 32 KiB chunk
    assert validation.validate(make_batch(xerial(b"".join(recs)), 100, attributes=2), CAP).records == 100


@pytest.mark.parametrize("codec", [0, 1, 2, 3, 4])
def test_batches_built_by_kafka_python_pass(codec):
    from kafka.record.default_records import DefaultRecordBatchBuilder

    builder = DefaultRecordBatchBuilder(magic=2, compression_type=codec, is_transactional=False, producer_id=-1,
                                        producer_epoch=-1, base_sequence=-1, batch_size=1 << 20)
    for i in range(50):
        builder.append(i, timestamp=BASE_TS + i, key=b"key-%d" % i, value=b"value " * i,
                       headers=[("trace", b"x")])
    assert validation.validate(bytes(builder.build()), CAP, compacted=True).records == 50


def test_several_batches_in_one_record_set():
    data = batch_of(good_records(2)) + batch_of(good_records(3), codec=4)
    assert validation.validate(data, CAP).records == 5


def test_large_varints_and_negative_timestamp_deltas_pass():
    recs = [record(0, key=b"k" * 300, value=b"v" * 20000, ts_delta=-5), record(1, ts_delta=2**40)]
    assert validation.validate(batch_of(recs), CAP).records == 2


# ---- header rules ---------------------------------------------------------------------------------------------
def test_last_offset_delta_must_match_the_record_count():
    assert "lastOffsetDelta" in rejects(batch_of(good_records(1), last_offset_delta=2**31 - 1))
    rejects(batch_of(good_records(3), last_offset_delta=1))
    rejects(batch_of(good_records(3), last_offset_delta=3))


@pytest.mark.parametrize("count", [0, -1, -2**31])
def test_record_count_must_be_positive(count):
    assert "record count" in rejects(make_batch(b"", count, last_offset_delta=max(count - 1, 0)))


def test_a_request_partition_holds_exactly_one_magic_2_batch_and_producer_ids_carry_a_sequence():
    """Kafka's ProduceRequest.validateRecords (before anything else) and LogValidator's sequence rule."""
    one, three = batch_of(good_records(2)), batch_of(good_records(3))
    assert validation.request_shape_problem(one) is None
    assert validation.request_shape_problem(memoryview(one)) is None
    assert validation.request_shape_problem(one + one[:20]) is None  # a partial tail is not a batch (framing's)
    assert "exactly one record batch" in validation.request_shape_problem(one + three)
    assert "exactly one record batch" in validation.request_shape_problem(one + three[:-1] + b"x")  # before CRCs
    assert "at least one record batch" in validation.request_shape_problem(b"")
    assert "at least one record batch" in validation.request_shape_problem(one[:-1])
    old_magic = bytearray(one)
    old_magic[16] = 1
    assert "magic version 2" in validation.request_shape_problem(bytes(old_magic))
    assert validation.request_shape_problem(one[:8] + struct.pack(">i", 13) + one[12:]) is None  # framing's
    bad_magic = bytearray(one)
    bad_magic[16] = 0xFF  # magic -1: Kafka's iterator says CorruptRecordException, so the framing check decides
    assert validation.request_shape_problem(bytes(bad_magic)) is None
    assert validation.request_shape_problem(bytes(bad_magic)[:-5]) is None
    summary = validation.validate(one, CAP)
    validation.check_sequence(summary)  # passes
    with pytest.raises(InvalidRecord, match="Invalid sequence number -1 in record batch with producerId 7"):
        validation.check_sequence(summary._replace(producer_id=7, producer_epoch=0, base_sequence=-1))
    validation.check_sequence(summary._replace(producer_id=7, producer_epoch=0, base_sequence=0))


def test_control_batches_from_clients_are_invalid():
    rejects(make_batch(b"".join(good_records(1)), 1, attributes=0x20))


def test_crc_and_framing_errors_stay_corrupt_message():
    data = bytearray(batch_of(good_records(2)))
    data[-1] ^= 1
    err = rejects(bytes(data), CorruptBatch)
    assert "CRC" in err
    with pytest.raises(InvalidBatch) as info:
        validation.validate(batch_of(good_records(2))[:-1], CAP)
    assert not isinstance(info.value, (InvalidRecord, BatchTooLarge))


# ---- records disagreeing with the header ----------------------------------------------------------------------
@pytest.mark.parametrize("codec", [0, 4])
def test_fewer_records_than_declared(codec):
    payload = COMPRESS[codec](b"".join(good_records(2)) + b"\x00" * 8)  # room for a third, but no record
    rejects(make_batch(payload, 3, attributes=codec))
    rejects(make_batch(COMPRESS[codec](b"".join(good_records(2))), 3, attributes=codec))


@pytest.mark.parametrize("codec", [0, 1])
def test_more_records_than_declared(codec):
    recs = good_records(3)
    assert "after the last record" in rejects(make_batch(COMPRESS[codec](b"".join(recs)), 2, attributes=codec))


def test_trailing_bytes_after_the_last_record():
    assert "after the last record" in rejects(make_batch(b"".join(good_records(2)) + b"\x00", 2))


def test_record_length_running_past_the_batch():
    rec = bytearray(record(0, value=b"v" * 10))
    rec[0] = varint(len(rec) + 50)[0]
    rejects(make_batch(bytes(rec), 1))
    rejects(make_batch(varint(2**31 - 1) + bytes(rec[1:]), 1))


def test_record_length_shorter_than_its_fields():
    rec = bytearray(record(0, value=b"v" * 10))
    rec[0] = varint(len(rec) - 1 - 3)[0]  # the record claims 3 bytes fewer than its fields take
    rejects(make_batch(bytes(rec) + b"\x00" * 3, 1))


def test_record_length_longer_than_its_fields():
    body = record(0)[1:] + b"\x00\x00"  # two padding bytes inside the declared length
    rejects(make_batch(varint(len(body)) + body, 1))


def test_negative_and_tiny_record_lengths():
    rejects(make_batch(varint(-1) + b"\x00" * 6, 1))
    rejects(make_batch(varint(2) + b"\x00\x00" + b"\x00" * 6, 1))


@pytest.mark.parametrize("offsets", [[0, 2, 1], [1, 2, 3], [0, 0, 0], [0, 1, -1]])
def test_offset_deltas_must_be_0_to_n_minus_1_in_order(offsets):
    for codec in (0, 3):
        assert "offset delta" in rejects(batch_of([record(o) for o in offsets], codec))


def _body(fields: bytes) -> bytes:
    return varint(len(fields)) + fields


@pytest.mark.parametrize("fields", [
    b"\x00" + varint(0) + varint(0) + varint(50) + b"k" + varint(1) + b"v" + varint(0),   # key past the record
    b"\x00" + varint(0) + varint(0) + varint(1) + b"k" + varint(50) + b"v" + varint(0),   # value past the record
    b"\x00" + varint(0) + varint(0) + varint(1) + b"k" + varint(1) + b"v" + varint(2**30),  # header count
    b"\x00" + varint(0) + varint(0) + varint(1) + b"k" + varint(1) + b"v" + varint(-1),   # negative header count
    b"\x00" + varint(0) + varint(0) + varint(1) + b"k" + varint(1) + b"v" + varint(1)
    + varint(-1) + varint(0),                                                            # negative header key
    b"\x00" + varint(0) + varint(0) + varint(1) + b"k" + varint(1) + b"v" + varint(1)
    + varint(1) + b"h" + varint(30),                                                     # header value past it
    b"\x00" + b"\xff" * 11 + b"\x00" + varint(0) + varint(1) + b"k" + varint(1) + b"v" + varint(0),  # varlong
    b"\x00" + varint(0) + b"\xff" * 6 + b"\x00" + varint(1) + b"k" + varint(1) + b"v" + varint(0),  # varint
    b"\x00" + varint(0) + varint(0) + varint(1) + b"k" + varint(1),                      # ends inside value
])
def test_each_field_must_parse_within_the_record(fields):
    rejects(make_batch(_body(fields) + b"\x00" * 8, 1))  # padding: the walk may not read into what follows


def test_compacted_topics_need_keys_in_the_same_pass():
    data = batch_of([record(0), record(1, key=None)], codec=3)
    assert validation.validate(data, CAP, compacted=False).records == 2
    assert "key" in rejects(data, compacted=True)


def test_random_corruptions_only_ever_raise_invalid_batch():
    rng = random.Random(24)
    base = b"".join(good_records(6, headers=[(b"h", b"value")]))
    for _ in range(3000):
        body = bytearray(base)
        for _ in range(rng.randint(1, 4)):
            body[rng.randrange(len(body))] = rng.randrange(256)
        codec = rng.choice([0, 0, 1, 2, 3, 4])
        data = make_batch(COMPRESS[codec](bytes(body)), 6, attributes=codec)
        try:
            validation.validate(data, CAP, compacted=rng.random() < 0.5)
        except InvalidBatch:
            pass


# ---- compressed payloads ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("codec", [1, 2, 3, 4])
def test_garbage_payloads_are_corrupt(codec):
    random_bytes = random.Random(codec).randbytes(200)
    for payload in (random_bytes, b"", b"\x00" * 40, COMPRESS[codec](b"".join(good_records(3)))[:-4]):
        err = rejects(make_batch(payload, 3, attributes=codec), CorruptBatch)
        assert compression.CODEC_NAMES[codec] in err or "truncated" in err or "snappy" in err


@pytest.mark.parametrize("codec", [1, 2, 3, 4])
def test_garbage_after_a_valid_stream_is_corrupt(codec):
    payload = COMPRESS[codec](b"".join(good_records(3))) + b"garbage!"
    with pytest.raises(InvalidBatch):  # snappy: the block's own length check; the others: a bad next frame
        validation.validate(make_batch(payload, 3, attributes=codec), CAP)


@pytest.mark.parametrize("codec", [5, 6, 7])
def test_unknown_codecs_are_corrupt(codec):
    assert "unknown compression codec" in rejects(make_batch(b"".join(good_records(2)), 2, attributes=codec),
                                                  CorruptBatch)


def test_xerial_chunks_past_the_payload_are_corrupt():
    payload = xerial(b"".join(good_records(3)))
    rejects(make_batch(payload[:-3], 3, attributes=2), CorruptBatch)
    rejects(make_batch(payload[:16] + struct.pack(">i", 1 << 30) + b"x", 3, attributes=2), CorruptBatch)


@pytest.mark.parametrize("codec", [0, 1, 2, 3, 4])
def test_cap_is_exact(codec):
    data = os.urandom(1000) * 5
    assert compression.decompress(codec, COMPRESS[codec](data), len(data)) == data
    with pytest.raises(compression.DecompressedTooLarge):
        compression.decompress(codec, COMPRESS[codec](data), len(data) - 1)


def test_concatenated_gzip_members_and_zstd_frames_decode():
    assert compression.decompress(1, gzip.compress(b"ab") + gzip.compress(b"cd"), 10) == b"abcd"
    cctx = zstandard.ZstdCompressor()
    assert compression.decompress(4, cctx.compress(b"ab") + cctx.compress(b"cd"), 10) == b"abcd"
    assert compression.decompress(3, lz4.frame.compress(b"ab") + lz4.frame.compress(b"cd"), 10) == b"abcd"


# ---- bombs: bounded work ---------------------------------------------------------------------------------------
def _timed_reject(data, kind=BatchTooLarge, compacted=True):
    started = time.perf_counter()
    with pytest.raises(kind):
        validation.validate(data, CAP, compacted)
    return time.perf_counter() - started


def test_zstd_bomb_claiming_five_million_records_is_rejected_at_once():
    payload = zstandard.ZstdCompressor(level=19).compress(record(0, key=None, value=None) * 5_000_000)
    assert len(payload) < 4096
    elapsed = _timed_reject(make_batch(payload, 5_000_000, attributes=4))
    assert elapsed < 1.0, f"{elapsed:.3f}s"


@pytest.mark.parametrize("codec", [1, 3, 4])
def test_payload_decompressing_past_the_cap_is_cut_off(codec):
    """A count the cap could hold, a payload far bigger: decompression stops at cap + 1 bytes."""
    payload = COMPRESS[codec](record(0, key=None, value=None) * 5_000_000)  # 35 MB of records
    elapsed = _timed_reject(make_batch(payload, 100_000, attributes=codec))
    assert elapsed < 1.0, f"{elapsed:.3f}s"


def _zeros_record_compressed(codec: int, size: int) -> bytes:
    """One record whose value is ``size`` zero bytes, compressed in a stream (never built in memory)."""
    value_prefix = b"\x00" + varint(0) + varint(0) + varint(1) + b"k" + varint(size)
    head = varint(len(value_prefix) + size + 1) + value_prefix
    if codec == 4:
        comp = zstandard.ZstdCompressor().compressobj()
        parts, finish = [], comp.flush
    elif codec == 3:
        comp = lz4.frame.LZ4FrameCompressor()
        parts, finish = [comp.begin()], comp.flush
    else:
        comp = zlib.compressobj(1, zlib.DEFLATED, 31)
        parts, finish = [], comp.flush
    parts.append(comp.compress(head))
    chunk = b"\x00" * (1 << 20)
    for _ in range(size >> 20):
        parts.append(comp.compress(chunk))
    parts.append(comp.compress(b"\x00"))  # no headers
    parts.append(finish())
    return b"".join(parts)


@pytest.mark.parametrize("codec", [3, 4])
def test_500_mb_of_zeros_in_one_value_is_too_large(codec):
    payload = _zeros_record_compressed(codec, 500 << 20)
    if len(payload) > CAP:  # lz4 cannot squeeze it under message.max.bytes: the batch size check answers
        payload = _zeros_record_compressed(codec, 200 << 20)
    for compacted in (False, True):
        elapsed = _timed_reject(make_batch(payload, 1, attributes=codec), compacted=compacted)
        assert elapsed < 1.0, f"{elapsed:.3f}s"


def test_snappy_preambles_are_checked_before_decoding():
    lying = varint(0)[:0] + bytes([0x80, 0x80, 0x80, 0x80, 0x01]) + b"\x00" * 20  # claims 256 MiB
    with pytest.raises(compression.DecompressedTooLarge):
        compression.decompress(2, lying, CAP)
    framed = b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1)
    small = bytes(cramjam.snappy.compress_raw(b"x" * 1000))
    with pytest.raises(compression.DecompressedTooLarge):  # each chunk fits, their sum does not
        compression.decompress(2, framed + (struct.pack(">i", len(small)) + small) * 20, 10_000)


def test_zstd_frames_asking_for_a_huge_window_are_refused():
    params = zstandard.ZstdCompressionParameters.from_level(3, window_log=30)
    comp = zstandard.ZstdCompressor(compression_params=params).compressobj()  # streamed: no content size
    payload = comp.compress(b"x" * 1000) + comp.flush()
    with pytest.raises(CorruptBatch):
        compression.decompress(4, payload, CAP)


# ---- the inline/worker split ------------------------------------------------------------------------------------
def _inline(data: bytes, compacted: bool = False, compiled_left: list[int] | None = None) -> bool:
    """True if check_records finishes within the inline budget, False if it asks for a worker."""
    try:
        validation.check_records(data, CAP, compacted, budget=validation.INLINE_BUDGET,
                                 compiled_left=[validation.COMPILED_INLINE_BUDGET] if compiled_left is None
                                 else compiled_left)
    except validation.OverBudget:
        return False
    return True


def test_small_record_sets_are_checked_within_the_budget_compressed_or_not():
    validation._load_kernels()  # as a broker has, after its first batch of KERNEL_MIN_RECORDS records
    for codec in (0, 1, 2, 3, 4):
        assert _inline(batch_of([record(i, value=os.urandom(200)) for i in range(50)], codec))
    assert _inline(batch_of(good_records(2)) + batch_of(good_records(2), codec=1))


def test_record_sets_over_the_budget_go_to_a_worker_and_pass_there(monkeypatch):
    big = batch_of([record(i, value=os.urandom(300)) for i in range(200)])  # ~61 KB uncompressed
    compressible = batch_of([record(i, value=b"\x00" * 1000) for i in range(100)], codec=4)  # 100 KB, ~1 KB of zstd
    two_halves = batch_of([record(i, value=b"x" * 1000) for i in range(20)], codec=3) * 2  # 2 x 20 KB
    validation.check_records(big, CAP)  # the compiled check loaded (if numba is on) ...
    for data in (compressible, two_halves):  # ... compressed sets over the budget still go to a worker
        assert not _inline(data)
        validation.check_records(data, CAP)
    monkeypatch.setattr(validation, "_kernels", SimpleNamespace(ENABLED=False))  # numba off: so does a big
    assert not _inline(big)                                                       # uncompressed one


@pytest.mark.skipif(not kernels.ENABLED, reason="numba off (LOGBUS_JIT=0)")
def test_big_uncompressed_sets_stay_on_the_loop_once_the_compiled_check_is_loaded(monkeypatch):
    big = batch_of([record(i, value=os.urandom(300)) for i in range(200)])  # ~61 KB
    monkeypatch.setattr(validation, "_kernels", None)  # not loaded yet
    assert not _inline(big)  # the first one goes to a worker, which loads the kernel (numba) off the loop
    validation.check_records(big, CAP)
    assert validation._kernels is kernels
    assert _inline(big)
    assert _inline(batch_of([record(i, value=os.urandom(300)) for i in range(20)]))
    huge = batch_of([record(i, value=os.urandom(1000)) for i in range(1100)])  # over COMPILED_INLINE_BUDGET
    assert not _inline(huge)
    validation.check_records(huge, CAP * 2)
    # a big batch the kernel cannot vouch for: its walk (for the exact error) goes to a worker, not the loop
    broken = batch_of([record(i, value=os.urandom(300)) for i in range(199)] + [record(7)])
    assert not _inline(broken)
    with pytest.raises(InvalidRecord):
        validation.check_records(broken, CAP)
    # the compiled check's allowance is the whole request's: a second big batch goes to a worker
    left = [validation.COMPILED_INLINE_BUDGET]
    assert _inline(big, compiled_left=left)
    assert left[0] == validation.COMPILED_INLINE_BUDGET - (len(big) - 61)
    left[0] = len(big) - 62
    assert not _inline(big, compiled_left=left)
    # few records (the walk's case) never take it, however big
    few = batch_of([record(i, value=os.urandom(40000)) for i in range(3)])
    assert not _inline(few)


def test_invalid_small_record_sets_are_rejected_inline():
    with pytest.raises(InvalidRecord):
        _inline(batch_of(good_records(3), last_offset_delta=5))
    with pytest.raises(CorruptBatch):
        _inline(make_batch(b"garbage", 2, attributes=4))
    with pytest.raises(InvalidRecord):
        _inline(batch_of([record(0, key=None)], codec=3), compacted=True)


@pytest.mark.parametrize("kernel_loaded", [True, False])
def test_a_bomb_costs_the_loop_only_the_budget(monkeypatch, kernel_loaded):
    if not kernel_loaded:  # refused inline even before the compiled check has been loaded
        monkeypatch.setattr(validation, "_kernels", None)
    bomb = make_batch(zstandard.ZstdCompressor(level=19).compress(record(0, key=None, value=None) * 5_000_000),
                      5_000_000, attributes=4)
    with pytest.raises(BatchTooLarge):  # cannot fit under the cap whatever it holds: refused inline, at once
        _inline(bomb)
    sneaky = make_batch(bomb[61:], 4000, attributes=4)  # a count the budget could hold, a payload it cannot
    started = time.perf_counter()
    assert not _inline(sneaky)
    assert time.perf_counter() - started < 0.05
    with pytest.raises(BatchTooLarge):
        validation.check_records(sneaky, CAP)


# ---- readers of stored batches ----------------------------------------------------------------------------------
def _stored(data: bytes, base_offset: int = 100) -> bytes:
    return records.assign_offsets(data, base_offset, 0)[0]


def test_readers_use_the_same_bounded_parser():
    stored = _stored(batch_of(good_records(4), codec=4))
    assert list(record_reader.record_timestamps(stored)) == [(100 + i, BASE_TS + i) for i in range(4)]
    assert record_reader.first_at_or_after(stored, BASE_TS + 2, 0) == (BASE_TS + 2, 102)
    assert record_reader.first_at_or_after(stored, BASE_TS + 2, 103) == (BASE_TS + 3, 103)
    header, recs = record_reader.records_of(stored)
    assert [(o, k, t) for o, k, t, _ in recs] == [(100 + i, b"k", False) for i in range(4)]
    assert b"".join(raw for *_, raw in recs) == b"".join(good_records(4))


@pytest.mark.parametrize("data", [
    make_batch(b"garbage zstd", 2, attributes=4),
    make_batch(b"".join(good_records(2)), 2, attributes=6),
    make_batch(b"".join(good_records(2))[:-3], 2),
    make_batch(zstandard.ZstdCompressor().compress(record(0, value=None) * 5_000_000), 5_000_000, attributes=4),
])
def test_unreadable_stored_batches_raise_invalid_batch_only(data):
    stored = _stored(data)
    with pytest.raises(InvalidBatch):
        list(record_reader.record_timestamps(stored, cap=CAP))
    with pytest.raises(InvalidBatch):
        record_reader.records_of(stored, cap=CAP)


def test_cleaner_keeps_an_unreadable_batch_as_it_is(tmp_path):
    good = _stored(batch_of([record(0, key=b"a", value=b"1"), record(1, key=b"a", value=b"2")]), 0)
    bad = _stored(make_batch(b"not zstd at all", 2, attributes=4), 2)
    path = str(tmp_path / "00000000000000000000.log")
    with open(path, "wb") as f:
        f.write(good + bad)
    latest = build_offset_map([(path, len(good) + len(bad))])
    assert list(latest.values()) == [1]
    kept, dropped = clean_segment(path, len(good) + len(bad), latest, 0)
    assert (kept, dropped) == (1, 1)
    with open(path + ".cleaned", "rb") as f:
        cleaned = f.read()
    assert cleaned.endswith(bad)
