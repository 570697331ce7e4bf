"""PartitionLog and LogSegment: segments, sparse indexes, reads, recovery and retention, in a temp dir."""

import os

import pytest
from broker.log.index import CorruptIndex, OffsetIndex
from broker.log.log import LogConfig, OffsetOutOfRange, PartitionLog
from broker.log.manager import LogManager, read_checkpoint
from broker.protocol import records
from rawclient import batch

pytestmark = [pytest.mark.unit, pytest.mark.timeout(30)]


def append(plog, values, ts=1_700_000_000_000):
    data = batch(values, base_timestamp=ts)
    return plog.append(data, records.validate(data, 1 << 20))


def read_all(plog, start=0):
    """Offsets of the records served from ``start`` onward, decoding only batch headers."""
    out, offset = [], start
    while True:
        region = plog.read(offset, 1 << 20)
        if region is None:
            return out
        data, pos = region.read(), 0
        while pos + records.HEADER_SIZE <= len(data):
            header = records.read_header(data, pos)
            if pos + header.size > len(data):
                break
            out.extend(range(header.base_offset, header.next_offset))
            offset = header.next_offset
            pos += header.size


def make(tmp_path, **kw):
    return PartitionLog(str(tmp_path / "t-0"), "t", 0, LogConfig(**kw))


def test_segments_roll_by_size_and_reads_cross_them(tmp_path):
    plog = make(tmp_path, segment_bytes=500, index_interval_bytes=100)
    for i in range(50):
        assert append(plog, [b"v" * 20, b"w" * 20]) == 2 * i
    assert len(plog.segments) > 5
    names = sorted(os.listdir(plog.dir))
    assert "00000000000000000000.log" in names and "00000000000000000000.index" in names
    assert all(s.size <= 500 for s in plog.segments)
    assert read_all(plog) == list(range(100))
    assert read_all(plog, 37)[:3] == [36, 37, 38]  # served from the batch containing offset 37
    with pytest.raises(OffsetOutOfRange):
        plog.read(101, 1000)
    assert plog.read(100, 1000) is None  # at the end: nothing yet


def test_read_returns_one_whole_batch_even_over_budget(tmp_path):
    plog = make(tmp_path)
    append(plog, [b"x" * 3000])
    region = plog.read(0, 100)
    assert region.size == records.read_header(region.read()).size


def test_sparse_index_entries_follow_the_interval(tmp_path):
    plog = make(tmp_path, index_interval_bytes=1000)
    for _ in range(100):
        append(plog, [b"y" * 90])
    index = plog.active.offset_index
    assert 10 < len(index) < 30
    assert list(index.keys) == sorted(index.keys)


def test_reopen_after_clean_close_and_corrupt_index_rebuilt(tmp_path):
    plog = make(tmp_path, segment_bytes=2000)
    for _ in range(40):
        append(plog, [b"z" * 50])
    plog.flush()
    plog.close()
    index_path = os.path.join(plog.dir, "00000000000000000000.index")
    with open(index_path, "ab") as f:
        f.write(b"\x01\x02\x03")  # not a whole entry
    with pytest.raises(CorruptIndex):
        OffsetIndex(index_path, 0).load()
    again = make(tmp_path, segment_bytes=2000)
    assert again.log_end_offset == 40 and read_all(again) == list(range(40))


def test_recovery_truncates_torn_tail(tmp_path):
    plog = make(tmp_path)
    for _ in range(10):
        append(plog, [b"a" * 30])
    path = plog.active.path
    plog.close()
    with open(path, "ab") as f:
        f.write(batch([b"torn"])[:40])
    again = PartitionLog(str(tmp_path / "t-0"), "t", 0, LogConfig(), clean_shutdown=False)
    assert again.log_end_offset == 10 and read_all(again) == list(range(10))
    assert append(again, [b"next"]) == 10


def test_time_index_lookup(tmp_path):
    plog = make(tmp_path, segment_bytes=400, index_interval_bytes=0)
    for i in range(30):
        append(plog, [b"r", b"s"], ts=1000 + 10 * i)
    assert plog.offset_for_timestamp(1000) == (1000, 0)
    assert plog.offset_for_timestamp(1105) == (1110, 22)
    assert plog.offset_for_timestamp(1101) == (1101, 21)
    assert plog.offset_for_timestamp(99_999) is None
    assert plog.offset_of_max_timestamp() == (1291, 59)


def test_retention_by_time_and_size_never_deletes_active(tmp_path):
    plog = make(tmp_path, segment_bytes=300, retention_ms=1000, retention_bytes=-1)
    for i in range(20):
        append(plog, [b"q" * 50], ts=10_000 + i)
    scheduled = []
    deleted = plog.apply_retention(now_ms=10_000 + 500, schedule_delete=lambda d, f: scheduled.append(f))
    assert deleted == 0
    deleted = plog.apply_retention(now_ms=10_000_000, schedule_delete=lambda d, f: scheduled.append(f))
    assert deleted == len(scheduled) > 0 and len(plog.segments) == 1
    assert plog.log_start_offset == plog.active.base_offset
    assert any(name.endswith(".deleted") for name in os.listdir(plog.dir))
    for action in scheduled:
        action()
    assert not any(name.endswith(".deleted") for name in os.listdir(plog.dir))
    with pytest.raises(OffsetOutOfRange):
        plog.read(0, 100)

    sized = PartitionLog(str(tmp_path / "s-0"), "s", 0, LogConfig(segment_bytes=300, retention_bytes=600,
                                                                   retention_ms=-1))
    for _ in range(30):
        append(sized, [b"q" * 50])
    sized.apply_retention(now_ms=0, schedule_delete=lambda d, f: f())
    assert sized.size_bytes - sized.active.size < 600 and sized.log_start_offset > 0


def test_manager_checkpoints_and_clean_shutdown_marker(tmp_path):
    manager = LogManager([str(tmp_path / "d1"), str(tmp_path / "d2")], lambda topic: LogConfig())
    manager.load()
    for p in range(4):
        plog = manager.create("topic-with-dashes", p)
        append(plog, [b"m"] * (p + 1))
    manager.shutdown()
    assert os.path.exists(tmp_path / "d1" / ".kafka_cleanshutdown")
    points = {**read_checkpoint(str(tmp_path / "d1" / "recovery-point-offset-checkpoint")),
              **read_checkpoint(str(tmp_path / "d2" / "recovery-point-offset-checkpoint"))}
    assert points == {("topic-with-dashes", p): p + 1 for p in range(4)}
    again = LogManager([str(tmp_path / "d1"), str(tmp_path / "d2")], lambda topic: LogConfig())
    again.load()
    assert {k: v.log_end_offset for k, v in again.logs.items()} == points
    assert not os.path.exists(tmp_path / "d1" / ".kafka_cleanshutdown")


def idempotent_batch(pid, first_seq, count, base_offset=0, epoch=0):
    from kafka.record.default_records import DefaultRecordBatchBuilder

    b = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False, producer_id=pid,
                                  producer_epoch=0, base_sequence=first_seq, batch_size=1 << 20)
    for i in range(count):
        b.append(i, timestamp=1_700_000_000_000 + i, key=None, value=b"v%d" % i, headers=[])
    data = bytes(b.build())
    return records.assign_offsets(data, base_offset, epoch)[0]


def test_follower_appends_leaders_batches_as_they_are_and_truncates_by_epoch(tmp_path):
    leader = make(tmp_path / "l")
    leader.leader_epoch = 3
    append(leader, [b"a", b"b"])
    leader.leader_epoch = 4
    append(leader, [b"c"])
    copied = leader.read(0, 1 << 20, committed_only=False).read()
    follower = make(tmp_path / "f")
    assert follower.append_as_follower(copied) == 3
    assert follower.epochs.entries == [(3, 0), (4, 2)]
    assert follower.read(0, 1 << 20, committed_only=False).read() == copied  # byte for byte
    follower.truncate_to(2)
    assert follower.log_end_offset == 2 and follower.epochs.entries == [(3, 0)]
    with pytest.raises(Exception, match="log ends at 2"):
        follower.append_as_follower(copied)


def test_consumers_read_only_up_to_the_high_watermark(tmp_path):
    plog = make(tmp_path)
    plog.replicated = True
    append(plog, [b"a"])
    append(plog, [b"b"])
    assert plog.read(0, 1 << 20) is None  # nothing committed yet
    plog.high_watermark = 1
    assert read_all(plog) == [0]
    assert plog.read(0, 1 << 20, committed_only=False).size > plog.read(0, 1 << 20).size


def test_producer_state_survives_a_crash_from_snapshot_and_log(tmp_path):
    from broker.log.producer_state import DuplicateSequence

    plog = make(tmp_path)
    data = idempotent_batch(42, 0, 3)
    plog.append(data, records.validate(data, 1 << 20))
    plog.snapshot_producers()
    data2 = idempotent_batch(42, 3, 2)
    plog.append(data2, records.validate(data2, 1 << 20))  # after the snapshot: found by scanning the log
    plog.close()
    reopened = PartitionLog(str(tmp_path / "t-0"), "t", 0, LogConfig(), clean_shutdown=False)
    for first, last, offset in ((0, 2, 0), (3, 4, 3)):
        with pytest.raises(DuplicateSequence) as dup:
            reopened.producers.check(42, 0, first, last)
        assert dup.value.base_offset == offset


def keyed_batch(pairs, ts=1_700_000_000_000):
    from kafka.record.default_records import DefaultRecordBatchBuilder

    b = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False, producer_id=-1,
                                  producer_epoch=-1, base_sequence=-1, batch_size=1 << 20)
    for i, (key, value) in enumerate(pairs):
        b.append(i, timestamp=ts + i, key=key, value=value, headers=[])
    return bytes(b.build())


def test_compaction_swap_is_crash_safe(tmp_path):
    from broker.log.cleaner import build_offset_map, clean_segment
    from broker.protocol.record_reader import records_of

    plog = make(tmp_path)
    for value in (b"1", b"2", b"3"):
        data = keyed_batch([(b"a", value), (b"b", value)])
        plog.append(data, records.validate(data, 1 << 20))
        plog.roll()
    data = keyed_batch([(b"a", b"4")])
    plog.append(data, records.validate(data, 1 << 20))
    first = plog.segments[0]
    latest = build_offset_map([(s.path, s.size) for s in plog.segments[:-1]])
    clean_segment(first.path, first.size, latest, drop_tombstones_before_ms=0)
    plog.close()
    # a crash before the rename to .swap: the half-done .cleaned file is discarded, the log is as it was
    reopened = PartitionLog(str(tmp_path / "t-0"), "t", 0, LogConfig(), clean_shutdown=False)
    assert not any(n.endswith(".cleaned") for n in os.listdir(tmp_path / "t-0"))
    assert read_all(reopened) == list(range(7))
    first = reopened.segments[0]
    clean_segment(first.path, first.size, latest, drop_tombstones_before_ms=0)
    os.replace(first.path + ".cleaned", first.path + ".swap")
    reopened.close()
    # a crash after it: start-up completes the swap; segment 0 lost both records (later values exist)
    swapped = PartitionLog(str(tmp_path / "t-0"), "t", 0, LogConfig(), clean_shutdown=True)
    assert read_all(swapped) == [2, 3, 4, 5, 6]
    assert swapped.log_end_offset == 7
    _, recs = records_of(swapped.read(2, 1 << 20).read()[:200])
    assert [(o, k) for o, k, _, _ in recs] == [(2, b"a"), (3, b"b")]


def test_retention_leaves_compact_only_logs_alone(tmp_path):
    plog = make(tmp_path, retention_bytes=1, cleanup_policy="compact")
    for _ in range(3):
        append(plog, [b"x" * 100])
        plog.roll()
    assert plog.apply_retention(10**13, lambda delay, fn: fn()) == 0
    plog.config.cleanup_policy = "compact,delete"
    assert plog.apply_retention(10**13, lambda delay, fn: fn()) == 3
