"""The log can never overflow its own formats, and loading never refuses a log directory the broker wrote
(issue 24, #2 and #4): 32-bit relative offsets, refused index writes, torn side files, unloadable partitions."""

import errno
import os
import struct

import crc32c
import pytest
from broker.log import index as index_module
from broker.log.log import LogConfig, PartitionLog
from broker.log.manager import LogManager, OfflineLog
from broker.protocol import records
from rawclient import batch

pytestmark = [pytest.mark.unit, pytest.mark.timeout(30)]

INT32_MAX = 2**31 - 1


def stretched(data: bytes, base_offset: int, last_offset_delta: int) -> bytes:
    """A one-batch record set with its base offset and lastOffsetDelta rewritten, CRC recomputed (what an old
    broker accepted, or a leader sends to its follower)."""
    out = bytearray(data)
    struct.pack_into(">q", out, 0, base_offset)
    struct.pack_into(">i", out, 23, last_offset_delta)
    struct.pack_into(">I", out, 17, crc32c.crc32c(bytes(out[21:])))
    return bytes(out)


def make(path, **kw):
    return PartitionLog(str(path), "t", 0, LogConfig(**kw))


def offsets_served(plog, offset):
    region = plog.read(offset, 1 << 20)
    return records.read_header(region.read()).base_offset if region else None


def test_the_log_rolls_before_a_relative_offset_stops_fitting_32_bits(tmp_path):
    plog = make(tmp_path / "t-0")
    assert plog.append_as_follower(stretched(batch([b"a"]), 0, INT32_MAX)) == 2**31
    assert plog.append_as_follower(stretched(batch([b"b"]), 2**31, 0)) == 2**31 + 1  # used to raise struct.error
    assert [s.base_offset for s in plog.segments] == [0, 2**31]
    plog.high_watermark = plog.log_end_offset
    assert offsets_served(plog, 2**31) == 2**31
    plog.close()
    reopened = PartitionLog(plog.dir, "t", 0, LogConfig(), clean_shutdown=False)
    assert reopened.log_end_offset == 2**31 + 1


def test_a_segment_whose_offsets_overflow_its_index_still_loads_and_serves(tmp_path):
    """A segment written before the roll rule: start-up rebuilds its index, skipping what does not fit."""
    directory = tmp_path / "t-0"
    directory.mkdir()
    with open(directory / "00000000000000000000.log", "wb") as f:
        f.write(stretched(batch([b"a"]), 0, INT32_MAX))
        f.write(stretched(batch([b"b" * 5000]), 2**31, 0))
        f.write(stretched(batch([b"c"]), 2**31 + 1, 0))
    plog = PartitionLog(str(directory), "t", 0, LogConfig(index_interval_bytes=1), clean_shutdown=False)
    assert plog.log_end_offset == 2**31 + 2
    assert list(plog.segments[0].offset_index.keys) == [0]  # the later entries could not be written
    assert offsets_served(plog, 2**31 + 1) == 2**31 + 1  # found by scanning on from the last entry
    data = batch([b"d"])
    assert plog.append(data, records.validate(data, 1 << 20)) == 2**31 + 2
    assert [s.base_offset for s in plog.segments] == [0, 2**31 + 2]


def test_a_refused_index_write_never_fails_or_corrupts_an_append(tmp_path, monkeypatch):
    plog = make(tmp_path / "t-0", index_interval_bytes=1)
    data = batch([b"x" * 100])
    plog.append(data, records.validate(data, 1 << 20))
    real_write = os.write

    def full_disk(fd, buf):
        if fd in (plog.active.offset_index._fd, plog.active.time_index._fd):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_write(fd, buf)

    monkeypatch.setattr(index_module.os, "write", full_disk)
    for i in range(5):
        data = batch([b"y" * 100], base_timestamp=1_800_000_000_000 + i)
        assert plog.append(data, records.validate(data, 1 << 20)) == i + 1
    monkeypatch.undo()
    assert len(plog.active.offset_index) == 1
    assert os.path.getsize(plog.active.offset_index.path) == 8  # cut back to whole entries
    assert [offsets_served(plog, o) for o in range(6)] == list(range(6))
    plog.close()
    reopened = PartitionLog(plog.dir, "t", 0, LogConfig(), clean_shutdown=True)
    assert reopened.log_end_offset == 6


def test_torn_side_files_do_not_keep_a_log_from_loading(tmp_path):
    plog = make(tmp_path / "t-0")
    plog.leader_epoch = 2
    data = batch([b"a", b"b"])
    plog.append(data, records.validate(data, 1 << 20))
    plog.snapshot_producers()
    plog.close()
    for name, junk in (("leader-epoch-checkpoint", "0\n3\n1 x\n"), ("producer.snapshot", '{"offset": 1, "produ')):
        (tmp_path / "t-0" / name).write_text(junk)
    (tmp_path / "recovery-point-offset-checkpoint").write_text("0\n1\nt-0 garbage\n")
    manager = LogManager([str(tmp_path)], lambda topic: LogConfig())
    manager.load()
    assert manager.get("t", 0).log_end_offset == 2 and not manager.offline


def test_a_partition_that_cannot_load_is_offline_and_the_others_serve(tmp_path):
    good = make(tmp_path / "good-0")
    data = batch([b"a"])
    good.append(data, records.validate(data, 1 << 20))
    good.close()
    os.makedirs(tmp_path / "bad-0" / "00000000000000000000.log")  # a directory where the segment should be
    manager = LogManager([str(tmp_path)], lambda topic: LogConfig())
    manager.load()
    assert manager.get("good", 0).log_end_offset == 1
    assert manager.is_offline("bad", 0) and "IsADirectoryError" in manager.offline[("bad", 0)]
    with pytest.raises(OfflineLog):
        manager.create("bad", 0)
    manager.shutdown()
