"""Compaction merges small cleaned segments (Kafka's groupSegmentsBySize): groups bounded by segment.bytes, the
merged segment serves every surviving record at its offset, and a crash between the merge's steps leaves a
consistent log."""

import asyncio
import os
import types

import pytest
from broker.log.cleaner import LogCleaner, build_offset_map, clean_segments, group_by_size
from broker.log.log import LogConfig, PartitionLog
from broker.log.manager import LogManager
from broker.protocol import records
from test_log_full_disk import append, idempotent_batch, served


def with_records(plog) -> list[int]:
    """Offsets of the batches the log serves that hold records (an empty batch kept for its producer holds none)."""
    out, offset = [], plog.log_start_offset
    while (region := plog.read(offset, 1 << 20, committed_only=False)) is not None:
        data, pos = region.read(), 0
        while pos + records.HEADER_SIZE <= len(data):
            header = records.read_header(data, pos)
            if pos + header.size > len(data):
                break
            if header.record_count:
                out.extend(range(header.base_offset, header.next_offset))
            offset, pos = header.next_offset, pos + header.size
    return out

pytestmark = [pytest.mark.unit, pytest.mark.timeout(30)]


def _segment(base: int, size: int, next_offset: int):
    return types.SimpleNamespace(base_offset=base, size=size, next_offset=next_offset)


def test_groups_are_bounded_by_size_and_offset_span():
    a, b, c, d = _segment(0, 100, 10), _segment(10, 150, 20), _segment(20, 100, 30), _segment(30, 500, 40)
    assert group_by_size([a, b, c, d], 300) == [[a, b], [c], [d]]  # 100 + 150 fit, + 100 would not
    assert group_by_size([a, b, c], 350) == [[a, b, c]]
    assert group_by_size([d, a], 300) == [[d], [a]]  # a segment larger than the limit stands alone
    far = _segment(40, 10, 2**31 + 5)  # its last offset is more than 2^31 - 1 past the group's base
    assert group_by_size([a, far], 10_000) == [[a], [far]]


def _cleaner(manager, tmp_path):
    topic = types.SimpleNamespace(configs={"cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0.01"})
    broker = types.SimpleNamespace(
        log_dirs=[str(tmp_path)], logs=manager, topics=types.SimpleNamespace(get=lambda name: topic),
        config={"log.cleanup.policy": "compact", "log.cleaner.min.cleanable.ratio": 0.5,
                "log.cleaner.delete.retention.ms": 0, "log.cleaner.min.compaction.lag.ms": 0,
                "log.cleaner.max.compaction.lag.ms": 2**63 - 1})
    return LogCleaner(broker)


def _fill(plog, rounds: int, keys: int, producer_id: int = 7):
    """``rounds`` values of each of ``keys`` keys, one record a batch; each key's offsets."""
    written, seq = {}, 0
    for r in range(rounds):
        for k in range(keys):
            key = f"k{k}".encode()
            written.setdefault(key, []).append(append(plog, idempotent_batch([f"{r}".encode() * 40], seq,
                                                                            producer_id, keys=[key])))
            seq += 1
    plog.high_watermark = plog.log_end_offset
    return written


def _latest_before(written, end: int) -> list[int]:
    """Each key's last offset below ``end``: what cleaning the segments before ``end`` keeps."""
    return sorted(max(o for o in offsets if o < end) for offsets in written.values() if min(offsets) < end)


def test_cleaning_merges_small_segments_and_keeps_every_latest_value_at_its_offset(tmp_path):
    """Groups are formed from the segments' sizes before a round (as Kafka does), so segments a round shrank
    are merged by the next one."""
    manager = LogManager([str(tmp_path)], lambda topic: LogConfig(segment_bytes=1000, cleanup_policy="compact"))
    plog = manager.create("c", 0)
    cleaner = _cleaner(manager, tmp_path)
    written = _fill(plog, rounds=6, keys=5)  # 30 batches of ~110 bytes: 9 per 1000-byte segment
    assert asyncio.run(cleaner.run_once()) is True
    shrunk = [(s.base_offset, s.size) for s in plog.segments[:-1]]
    assert len(shrunk) >= 3 and sum(size for _, size in shrunk) <= 1000  # each cleaned alone: several small ones
    more = _fill(plog, rounds=2, keys=5, producer_id=8)
    for key, offsets in more.items():
        written[key] += offsets
    assert asyncio.run(cleaner.run_once()) is True
    bases = [s.base_offset for s in plog.segments]
    assert bases[0] == 0 and not {base for base, _ in shrunk[1:]} & set(bases)  # the small ones are one now
    survivors = [o for o in with_records(plog) if o < plog.active.base_offset]
    assert survivors == _latest_before(written, plog.active.base_offset)
    logs = sorted(n for n in os.listdir(plog.dir) if n.endswith(".log"))
    assert len(logs) == len(plog.segments)  # the merged-away segments' files are gone (.deleted, removed later)
    # reopened from disk (as after a restart), the log serves the same
    reopened = PartitionLog(plog.dir, "c", 0, LogConfig(segment_bytes=1000), clean_shutdown=False)
    assert served(reopened) == served(plog)


@pytest.mark.parametrize("crash_after", ["swap written", "some retired"])
def test_a_crash_inside_a_merge_leaves_a_consistent_log(tmp_path, crash_after):
    plog = PartitionLog(str(tmp_path / "c-0"), "c", 0, LogConfig(segment_bytes=1000, cleanup_policy="compact"))
    written = _fill(plog, rounds=6, keys=5)
    group = plog.segments[:-1]
    assert len(group) >= 3
    offsets = build_offset_map([(s.path, s.size) for s in group])
    clean_segments([(s.path, s.size) for s in group], offsets, 0)
    first = group[0].path
    os.replace(first + ".cleaned", first + ".swap")  # the merge is complete on disk, the old files still there
    if crash_after == "some retired":
        for s in group[:2]:
            for path in (s.path, s.offset_index.path, s.time_index.path):
                if os.path.exists(path):
                    os.rename(path, path + ".deleted")
    reopened = PartitionLog(plog.dir, "c", 0, LogConfig(segment_bytes=1000), clean_shutdown=False)
    assert [s.base_offset for s in reopened.segments] == [0, plog.active.base_offset]
    expected = _latest_before(written, plog.active.base_offset) + list(range(plog.active.base_offset,
                                                                             plog.log_end_offset))
    assert served(reopened) == expected
    assert not [n for n in os.listdir(plog.dir) if n.endswith((".swap", ".deleted", ".cleaned"))]


def test_a_producers_last_batch_is_kept_empty_when_its_records_go(tmp_path):
    """Kafka's BatchRetention.RETAIN_EMPTY: producer 8's only batch is superseded by producer 7's later value of
    the same key; cleaning keeps an empty batch of producer 8, so its epoch and sequence are still in the log: a
    log reopened without its producer snapshot still knows producer 8 and finds its retried batch a duplicate."""
    from broker.log.cleaner import clean_segment
    from broker.log.producer_state import DuplicateSequence

    plog = PartitionLog(str(tmp_path / "c-0"), "c", 0, LogConfig(segment_bytes=1000, cleanup_policy="compact"))
    retried = idempotent_batch([b"old"], 0, 8, keys=[b"k"])
    assert append(plog, retried) == 0
    for seq in range(12):  # producer 7 writes k again and again: the first segments fill and roll
        append(plog, idempotent_batch([b"v" * 60], seq, 7, keys=[b"k"]))
    first = plog.segments[0]
    latest = build_offset_map([(s.path, s.size) for s in plog.segments[:-1]])
    clean_segment(first.path, first.size, latest, 0, last_batches=plog.producers.last_batch_offsets())
    data = open(first.path + ".cleaned", "rb").read()
    header = records.read_header(data)
    assert (header.base_offset, header.producer_id, header.record_count) == (0, 8, 0)  # kept, empty
    os.replace(first.path + ".cleaned", first.path)
    for name in os.listdir(plog.dir):
        if name.endswith((".index", ".timeindex")) or name == "producer.snapshot":
            os.unlink(os.path.join(plog.dir, name))
    reopened = PartitionLog(plog.dir, "c", 0, LogConfig(segment_bytes=1000), clean_shutdown=False)
    assert 8 in {pid for pid, *_ in reopened.producers.active_producers()}
    with pytest.raises(DuplicateSequence):
        reopened.producers.check(8, 0, 0, 0)
    assert 0 not in with_records(reopened)  # the empty batch holds no record
