"""Record batch header validation and patching, on batches built by kafka-python (an outside encoder)."""

import pytest
from broker.protocol import records
from broker.protocol.record_reader import record_timestamps
from rawclient import batch

pytestmark = [pytest.mark.unit, pytest.mark.timeout(10)]


def test_validate_summarises_whole_batches():
    data = batch([b"a", b"bb", b"ccc"]) + batch([b"d"], base_timestamp=1_800_000_000_000)
    summary = records.validate(data, 1 << 20)
    assert (summary.batches, summary.records, summary.offset_count) == (2, 4, 4)
    assert summary.max_timestamp == 1_800_000_000_000


def test_crc_mismatch_is_corrupt():
    data = bytearray(batch([b"payload"]))
    data[70] ^= 1
    with pytest.raises(records.CorruptBatch):
        records.validate(bytes(data), 1 << 20)


@pytest.mark.parametrize("cut", [1, 30, 61, 70])
def test_torn_batch_is_invalid(cut):
    data = batch([b"payload" * 3])
    with pytest.raises(records.InvalidBatch):
        records.validate(data[: len(data) - cut] if cut < len(data) else data[:cut], 1 << 20)


def test_wrong_magic_and_too_large():
    data = bytearray(batch([b"x"]))
    data[16] = 1
    with pytest.raises(records.InvalidBatch, match="magic"):
        records.validate(bytes(data), 1 << 20)
    with pytest.raises(records.BatchTooLarge):
        records.validate(batch([b"x" * 5000]), 1000)


def test_assign_offsets_patches_offsets_and_epoch_and_keeps_crc_valid():
    data = batch([b"a", b"b"]) + batch([b"c", b"d", b"e"])
    patched, next_offset = records.assign_offsets(data, 1000, 7)
    assert next_offset == 1005
    first = records.read_header(patched, 0)
    second = records.read_header(patched, first.size)
    assert (first.base_offset, first.leader_epoch, second.base_offset) == (1000, 7, 1002)
    records.validate(patched, 1 << 20)  # CRCs still match: neither field is covered


def test_record_timestamps_reads_each_record():
    data = batch([b"a", b"b", b"c"], base_timestamp=5000)
    patched, _ = records.assign_offsets(data, 10, 0)
    assert list(record_timestamps(bytes(patched))) == [(10, 5000), (11, 5001), (12, 5002)]
