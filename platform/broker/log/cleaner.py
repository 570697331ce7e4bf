"""Log compaction (``cleanup.policy=compact``): keep at least the latest value of every key.

A compacted log has a clean section (already compacted, before the cleaner checkpoint) and a dirty section
(written since), up to the first uncleanable offset: the start of the active segment, or the high watermark if
lower (the active segment is never cleaned, uncommitted data neither), or the first dirty segment holding a
record younger than ``min.compaction.lag.ms`` (its max timestamp within the lag: Kafka's rule). Every
``log.cleaner.backoff.ms`` the cleaner takes the log with the highest dirty ratio (dirty bytes / cleanable bytes)
among those above their ``min.cleanable.dirty.ratio`` or overdue (a cleanable dirty segment whose first batch
is older than ``max.compaction.lag.ms``: cleaned whatever its ratio) and:

1. builds an offset map of the dirty section: key → latest offset (a key's 16-byte digest, so memory is bounded
   by the number of distinct keys, not their size);
2. rewrites every cleanable segment keeping a record only if no later offset of its key is in the map, and
   dropping tombstones (null values) older than ``delete.retention.ms``; survivors keep their offsets (a batch
   keeps its base offset and last offset delta; compressed batches are rewritten uncompressed);
   A batch of an idempotent or transactional producer that loses all its records but is that producer's last
   batch is kept empty (its header, no records: Kafka's ``BatchRetention.RETAIN_EMPTY``), so the producer's epoch
   and sequence survive in the log, not only in the producer snapshot;
2b. merges small segments as it rewrites them (Kafka's ``groupSegmentsBySize``): consecutive cleanable segments
   whose sizes add up to at most ``segment.bytes`` (and whose offsets span at most 2^31 - 1) are rewritten into
   one segment with the first one's base offset, so a log compacted round after round does not keep a file per
   segment it ever rolled;
3. swaps each rewritten group in: ``<base>.log.cleaned`` (written and fsync'd off the event loop) is renamed to
   ``.log.swap``, the old files of the group are renamed ``.deleted`` (closed later, so in-flight sendfile calls
   finish), and ``.swap`` becomes the segment. A crash before the rename to ``.swap`` leaves the old segments;
   after it, start-up completes the swap and deletes the group's other segments, whose offsets the swapped-in
   file covers (see PartitionLog._finish_interrupted_swaps): the log is always consistent;
4. moves the checkpoint (``cleaner-offset-checkpoint``, Kafka's format) to the end of the cleaned range.

A disk that refuses a write (a full log dir) ends the round: every ``.cleaned`` file of it is removed (they would
hold the space the disk lacks), the log stays as it was, the incident is reported (rate-limited) and the next
round tries again. A refused checkpoint only means the next round cleans that range once more.

The record-level work runs in a worker thread on immutable (non-active) segments; the swap runs on the loop.
Records are read with the bounded parser of ``record_reader`` (decompression capped at the larger of the topic's
``message.max.bytes`` and ``STORED_BATCH_CAP``). A batch that cannot be read (a payload that does not decompress,
records that do not parse: possible only for data written before produce validated records) is logged and kept
as it is: its keys are left out of the offset map, so nothing it might supersede is dropped.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import time

from broker.log.log import PartitionLog
from broker.log.manager import read_checkpoint, try_checkpoint
from broker.log.segment import LogSegment
from broker.log.storage_errors import incidents, log_dir_of
from broker.protocol import records
from broker.protocol.record_reader import STORED_BATCH_CAP, rebuild_batch, records_of

log = logging.getLogger(__name__)
CHECKPOINT = "cleaner-offset-checkpoint"
LONG_MAX = 2**63 - 1
INT_MAX = 2**31 - 1


def _digest(key: bytes) -> bytes:
    return hashlib.md5(key, usedforsecurity=False).digest()


def _batches(path: str, size: int):
    with open(path, "rb") as f:
        data = f.read(size)
    pos = 0
    while pos + records.HEADER_SIZE <= len(data):
        header = records.read_header(data, pos)
        if pos + header.size > len(data):
            return
        yield data[pos: pos + header.size]
        pos += header.size


def _records(path: str, batch, cap: int):
    """records_of(batch), or None (logged) if the batch cannot be read."""
    try:
        return records_of(batch, cap)
    except records.InvalidBatch as exc:
        header = records.read_header(batch)
        log.warning("cleaner: keeping unreadable batch at offset %d of %s as it is: %s", header.base_offset, path,
                    exc)
        return None


def _transactional(batch) -> bool:
    """Transactional and control batches (markers) are copied untouched and never enter the offset map: a
    marker's key is its type (every commit marker has the same one), and a record of an aborted transaction must
    not supersede a committed value."""
    return bool(records.read_header(batch).attributes & 0x30)


def build_offset_map(paths: list[tuple[str, int]], cap: int = STORED_BATCH_CAP) -> dict[bytes, int]:
    latest: dict[bytes, int] = {}
    for path, size in paths:
        for batch in _batches(path, size):
            if _transactional(batch):
                continue
            parsed = _records(path, batch, cap)
            for offset, key, _tombstone, _raw in parsed[1] if parsed else ():
                if key is not None:
                    latest[_digest(key)] = offset
    return latest


def group_by_size(segments: list[LogSegment], max_bytes: int) -> list[list[LogSegment]]:
    """Consecutive segments in groups to rewrite as one (Kafka's ``groupSegmentsBySize``): a group's sizes add up
    to at most ``max_bytes`` and its offsets span at most ``INT_MAX`` (relative offsets in an index are 32-bit); a
    segment larger than ``max_bytes`` is a group of its own."""
    groups: list[list[LogSegment]] = []
    size = 0  # of the last group
    for segment in segments:
        if (groups and size + segment.size <= max_bytes
                and (segment.size == 0 or segment.next_offset - 1 - groups[-1][0].base_offset <= INT_MAX)):
            groups[-1].append(segment)
            size += segment.size
        else:
            groups.append([segment])
            size = segment.size
    return groups


def clean_segment(path: str, size: int, latest: dict[bytes, int], drop_tombstones_before_ms: int,
                  cap: int = STORED_BATCH_CAP, last_batches: dict[int, int] | None = None) -> tuple[int, int]:
    """Write ``path.cleaned`` with the surviving records; returns (records kept, records dropped)."""
    return clean_segments([(path, size)], latest, drop_tombstones_before_ms, cap, last_batches)


def clean_segments(parts: list[tuple[str, int]], latest: dict[bytes, int], drop_tombstones_before_ms: int,
                   cap: int = STORED_BATCH_CAP, last_batches: dict[int, int] | None = None) -> tuple[int, int]:
    """Write ``<first path>.cleaned`` with the surviving records of every segment of ``parts`` (path, size), in
    order: one segment in place of a group; returns (records kept, records dropped). ``last_batches``: producer
    id -> the last offset of its last batch, kept empty when all its records go."""
    target = parts[0][0] + ".cleaned"
    try:
        return _write_cleaned(parts, target, latest, drop_tombstones_before_ms, cap, last_batches or {})
    except BaseException:
        _discard(target)
        raise


def _discard(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def _write_cleaned(parts: list[tuple[str, int]], target: str, latest: dict[bytes, int],
                   drop_tombstones_before_ms: int, cap: int, last_batches: dict[int, int]) -> tuple[int, int]:
    kept = dropped = 0
    with open(target, "wb") as out:
        for path, batch in ((path, batch) for path, size in parts for batch in _batches(path, size)):
            parsed = None if _transactional(batch) else _records(path, batch, cap)
            if parsed is None:
                out.write(batch)
                continue
            header, recs = parsed
            survivors = []
            for offset, key, tombstone, raw in recs:
                if key is not None and latest.get(_digest(key), -1) > offset:
                    dropped += 1
                elif tombstone and header.max_timestamp < drop_tombstones_before_ms:
                    dropped += 1
                else:
                    survivors.append(raw)
            kept += len(survivors)
            if len(survivors) == len(recs):
                out.write(batch)
            elif survivors or (header.producer_id >= 0 and last_batches.get(header.producer_id)
                               == header.base_offset + header.last_offset_delta):  # a producer's last: kept empty
                out.write(rebuild_batch(header, survivors))
        out.flush()
        os.fsync(out.fileno())
    return kept, dropped


class LogCleaner:
    def __init__(self, broker):
        self.broker = broker
        self.first_dirty: dict[tuple[str, int], int] = {}
        for log_dir in broker.log_dirs:
            path = os.path.join(log_dir, CHECKPOINT)
            if os.path.exists(path):
                self.first_dirty.update(read_checkpoint(path))
        self.busy = False

    def _setting(self, topic: str, name: str, broker_key: str) -> str:
        info = self.broker.topics.get(topic)
        value = info.configs.get(name) if info else None
        return str(self.broker.config[broker_key]) if value is None else value  # the default only when needed

    def compacted(self, topic: str) -> bool:
        return "compact" in self._setting(topic, "cleanup.policy", "log.cleanup.policy").split(",")

    def cleanable(self, plog: PartitionLog, now_ms: int | None = None) -> tuple[float, list[LogSegment], int]:
        """(dirty ratio, cleanable segments, first dirty offset) at ``now_ms`` (default: now)."""
        key = (plog.topic, plog.partition)
        first_dirty = max(self.first_dirty.get(key, plog.log_start_offset), plog.log_start_offset)
        end = min(plog.active.base_offset, plog.high_watermark, plog.last_stable_offset)
        lag = int(self._setting(plog.topic, "min.compaction.lag.ms", "log.cleaner.min.compaction.lag.ms"))
        if lag > 0:  # a dirty segment with a record younger than the lag, and all after it, wait
            now_ms = int(time.time() * 1000) if now_ms is None else now_ms
            young = next((s.base_offset for s in plog.segments[:-1]
                          if s.base_offset >= first_dirty and s.max_timestamp > now_ms - lag), None)
            if young is not None:
                end = min(end, young)
        segments = [s for i, s in enumerate(plog.segments[:-1]) if plog.segments[i + 1].base_offset <= end]
        dirty = sum(s.size for s in segments if s.base_offset >= first_dirty)
        total = sum(s.size for s in segments)
        return (dirty / total if total else 0.0), segments, first_dirty

    def overdue(self, plog: PartitionLog, segments: list[LogSegment], first_dirty: int, now_ms: int) -> bool:
        """True if a cleanable dirty segment's first batch is older than ``max.compaction.lag.ms`` (Kafka's
        ``needCompactionNow``: the log is cleaned whatever its dirty ratio)."""
        lag = int(self._setting(plog.topic, "max.compaction.lag.ms", "log.cleaner.max.compaction.lag.ms"))
        if lag >= LONG_MAX:
            return False
        for segment in segments:
            if segment.base_offset >= first_dirty:
                first = next(segment.headers_from(segment.base_offset), None)
                if first is not None and 0 <= first.max_timestamp <= now_ms - lag:
                    return True
        return False

    async def run_once(self) -> bool:
        """Clean the dirtiest log above its threshold or overdue; True if one was cleaned."""
        if self.busy:
            return False
        best = None
        now_ms = int(time.time() * 1000)
        for (topic, partition), plog in list(self.broker.logs.logs.items()):
            if not self.compacted(topic):
                continue
            ratio, segments, first_dirty = self.cleanable(plog, now_ms)
            threshold = float(self._setting(topic, "min.cleanable.dirty.ratio", "log.cleaner.min.cleanable.ratio"))
            due = ratio >= threshold or self.overdue(plog, segments, first_dirty, now_ms)
            if segments and ratio > 0 and due and (best is None or ratio > best[0]):
                best = (ratio, plog, segments, first_dirty)
        if best is None:
            return False
        plog = best[1]
        site = f"compaction rounds in {log_dir_of(plog.dir)}"
        self.busy = True
        try:
            await self.clean(plog, best[2], best[3])
        except OSError as exc:
            incidents.failed(site, exc, f"{plog.topic}-{plog.partition}")
            return False
        finally:
            self.busy = False
        if incidents.any:
            incidents.succeeded(site)
        return True

    async def clean(self, plog: PartitionLog, segments: list[LogSegment], first_dirty: int) -> None:
        retention = int(self._setting(plog.topic, "delete.retention.ms", "log.cleaner.delete.retention.ms"))
        cutoff = int(time.time() * 1000) - retention
        dirty = [(s.path, s.size) for s in segments if s.base_offset >= first_dirty]
        following = plog.segments[plog.segments.index(segments[-1]) + 1].base_offset
        started = time.monotonic()
        cap = max(plog.config.max_message_bytes, STORED_BATCH_CAP)
        latest = await asyncio.to_thread(build_offset_map, dirty, cap)
        jobs = [(group, [(s.path, s.size) for s in group])
                for group in group_by_size(segments, plog.config.segment_bytes)]
        last_batches = plog.producers.last_batch_offsets()
        swapped = 0
        try:
            results = await asyncio.to_thread(
                lambda: [clean_segments(parts, latest, cutoff, cap, last_batches) for _, parts in jobs])
            for group, parts in jobs:
                self._swap(plog, group, parts[0][0])
                swapped += 1
        except OSError:
            for _, parts in jobs[swapped:]:
                _discard(parts[0][0] + ".cleaned")
            raise
        self.first_dirty[(plog.topic, plog.partition)] = following
        self.checkpoint()
        log.info("cleaned %s-%d: %d segment(s) into %d, %d record(s) kept, %d dropped, %d key(s) in the map, "
                 "%.2fs", plog.topic, plog.partition, len(segments), len(jobs), sum(k for k, _ in results),
                 sum(d for _, d in results), len(latest), time.monotonic() - started)

    def _swap(self, plog: PartitionLog, group: list[LogSegment], path: str) -> None:
        """Put ``path.cleaned`` (the rewrite of ``group``, at the first segment's ``path``) in the group's place."""
        at = plog.segments.index(group[0]) if group[0] in plog.segments else -1
        if at < 0 or plog.segments[at:at + len(group)] != group:  # retention or truncation took some meanwhile
            os.unlink(path + ".cleaned")
            return
        os.replace(path + ".cleaned", path + ".swap")
        for old in group:
            plog.retire_segment(old, asyncio.get_running_loop().call_later)
        os.replace(path + ".swap", path)
        fresh = LogSegment(plog.dir, group[0].base_offset, plog.config.index_interval_bytes)
        fresh.recover()
        plog.replace_segments(group, fresh)

    def checkpoint(self) -> None:
        for log_dir in self.broker.log_dirs:
            entries = {k: v for k, v in self.first_dirty.items()
                       if self.broker.logs.dir_of(*k) == log_dir}
            try_checkpoint(os.path.join(log_dir, CHECKPOINT), entries)

