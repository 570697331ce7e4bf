"""A partition's log: an ordered list of segments in one directory (``<topic>-<partition>``).

Invariants: segments are sorted by base offset and contiguous; only the last (active) segment is appended to
and it is never deleted by retention; ``log_start_offset <= high_watermark <= log_end_offset``. The
``recovery_point`` is the offset below which everything is known to be on disk (fsync'd).

Writes the disk refuses (a full log dir: ENOSPC; EIO) raise OSError and change nothing: an append leaves the
segment, its indexes, the log end offset, the producer state and the leader epochs as they were (an append whose
flush is refused is rolled back too: it was not acknowledged), and a roll that cannot create the new segment or
its producer snapshot keeps the old segment active. The caller answers KAFKA_STORAGE_ERROR (or retries, as a
follower) and the next append tries again: no restart is needed once space returns.
Not thread-safe: the broker's event loop owns every log.
"""

from __future__ import annotations

import logging
import os
import random
import time
from bisect import bisect_right
from dataclasses import dataclass

from broker.log.epoch_cache import EpochCache
from broker.log.index import INT32_MAX
from broker.log.producer_state import ProducerStateManager
from broker.log.segment import FileRegion, LogSegment
from broker.log.storage_errors import incidents, log_dir_of
from broker.log.txn_index import AbortedTxn, TxnIndex
from broker.protocol import control, records
from broker.protocol.record_reader import first_at_or_after

log = logging.getLogger(__name__)
PRODUCER_SNAPSHOT = "producer.snapshot"


class OffsetOutOfRange(Exception):
    pass


class NotContiguous(ValueError):
    """A follower was sent batches that do not start at its log end offset."""


@dataclass
class LogConfig:
    segment_bytes: int = 1024**3
    roll_ms: int = 7 * 24 * 3_600_000
    segment_jitter_ms: int = 0  # segment.jitter.ms: see PartitionLog._roll_jitter
    index_interval_bytes: int = 4096
    retention_ms: int = 7 * 24 * 3_600_000
    retention_bytes: int = -1
    flush_interval_messages: int = 2**63 - 1
    flush_ms: int = 2**63 - 1
    max_message_bytes: int = 1048588
    file_delete_delay_ms: int = 60_000
    cleanup_policy: str = "delete"


def _next_offset_of(path: str) -> int:
    """The offset after the last whole batch of a segment file (reading only the batch headers)."""
    end = -1
    with open(path, "rb") as f:
        pos = 0
        while True:
            f.seek(pos)
            head = f.read(records.HEADER_SIZE)
            if len(head) < records.HEADER_SIZE:
                return end
            header = records.read_header(head)
            if header.size < records.HEADER_SIZE:
                return end
            end, pos = header.next_offset, pos + header.size


class PartitionLog:
    def __init__(self, directory: str, topic: str, partition: int, config: LogConfig,
                 recovery_point: int = 0, log_start_offset: int = 0, clean_shutdown: bool = True):
        self.dir = directory
        self.topic = topic
        self.partition = partition
        self.config = config
        self.segments: list[LogSegment] = []
        self._bases: list[int] = []
        self.leader_epoch = 0
        self.recovery_point = recovery_point
        self.producers = ProducerStateManager()
        self._unflushed_messages = 0
        self._last_flush_ms = int(time.time() * 1000)
        self.truncations = 0  # files rewritten in place (a copy of them, as a log dir move's, must start over)
        os.makedirs(directory, exist_ok=True)
        self._load(clean_shutdown)
        self.log_start_offset = max(log_start_offset, self.segments[0].base_offset)
        self.high_watermark = self.log_end_offset
        self.epochs = EpochCache(directory)
        self.epochs.truncate_from_end(self.log_end_offset)  # recovery may have dropped a tail
        self._snapshot_path = os.path.join(directory, PRODUCER_SNAPSHOT)
        self.txn_index = TxnIndex(directory)
        self.txn_index.truncate_to(self.log_end_offset)
        self.rebuild_producer_state()
        # Replicated (cluster mode): the partition's leader moves the high watermark over the ISR; standalone,
        # every append is committed at once.
        self.replicated = False

    # ---- loading ------------------------------------------------------------------------------------------
    def _load(self, clean_shutdown: bool) -> None:
        swapped = self._finish_interrupted_swaps()
        bases = sorted(int(name[:-4]) for name in os.listdir(self.dir)
                       if name.endswith(".log") and name[:-4].isdigit())
        truncated_at = None
        for i, base in enumerate(bases):
            segment = LogSegment(self.dir, base, self.config.index_interval_bytes)
            following = bases[i + 1] if i + 1 < len(bases) else None
            if base not in swapped and (clean_shutdown or (following is not None and
                                                           following <= self.recovery_point)):
                segment.load()
            elif segment.recover(self.config.max_message_bytes + records.LOG_OVERHEAD) and truncated_at is None:
                truncated_at = i
            self._add(segment)
        if not self.segments:
            self._add(LogSegment(self.dir, 0, self.config.index_interval_bytes))
        if truncated_at is not None:
            # A recovered segment lost its tail; any later segment is then unreachable garbage. (Offset gaps
            # between segments are normal after compaction; only a truncation drops what follows.)
            for dropped in self.segments[truncated_at + 1:]:
                log.warning("recovery: dropping segment %s after a truncated one", dropped.path)
                dropped.delete()
            del self.segments[truncated_at + 1:]
            del self._bases[truncated_at + 1:]
        self.recovery_point = self.log_end_offset

    def _finish_interrupted_swaps(self) -> set[int]:
        """Crash safety of compaction (see cleaner.py): a ``.cleaned`` file was never complete, so it goes;
        a ``.swap`` file was, so it replaces its segment. Also removes left-overs of interrupted deletions.
        Returns the base offsets of swapped-in segments (their indexes are rebuilt)."""
        swapped = set()
        for name in sorted(os.listdir(self.dir)):
            path = os.path.join(self.dir, name)
            if name.endswith((".deleted", ".cleaned")):
                os.unlink(path)
            elif name.endswith(".log.swap"):
                base = int(name.split(".")[0])
                for suffix in (".index", ".timeindex"):
                    try:
                        os.unlink(os.path.join(self.dir, f"{base:020d}{suffix}"))
                    except FileNotFoundError:
                        pass
                os.replace(path, os.path.join(self.dir, f"{base:020d}.log"))
                swapped.add(base)
                covered = _next_offset_of(os.path.join(self.dir, f"{base:020d}.log"))
                for inside in os.listdir(self.dir):  # a merged group: its other segments are in the swapped file
                    other = inside.split(".")[0]
                    if other.isdigit() and base < int(other) < covered and inside.endswith(
                            (".log", ".index", ".timeindex")):
                        log.info("recovery: %s is inside the compacted segment %d, removed", inside, base)
                        os.unlink(os.path.join(self.dir, inside))
        return swapped

    def _add(self, segment: LogSegment) -> None:
        self.segments.append(segment)
        self._bases.append(segment.base_offset)

    # ---- offsets ------------------------------------------------------------------------------------------
    @property
    def active(self) -> LogSegment:
        return self.segments[-1]

    @property
    def log_end_offset(self) -> int:
        return self.active.next_offset

    @property
    def size_bytes(self) -> int:
        return sum(s.size for s in self.segments)

    # ---- writes -------------------------------------------------------------------------------------------
    def append(self, data, summary: records.BatchSummary, refused_seq: int = -1) -> int:
        """Append validated batches (``data``: whole batches in one buffer, or a list of buffers of one batch
        each); returns the base offset assigned to the first one. ``refused_seq``: see
        :meth:`ProducerStateManager.check`."""
        pid, epoch = summary.producer_id, summary.producer_epoch
        if summary.control:
            raise records.InvalidRecord("control batches are written by the broker, not by clients")
        idempotent = pid >= 0  # the producer state has nothing to say about the others
        if idempotent:
            transactional = control.is_transactional(summary.attributes)
            self.producers.check(pid, epoch, summary.base_sequence, summary.last_sequence, transactional, refused_seq)
        base = self.segments[-1].next_offset  # the log end offset
        each = None  # a list of batches: indexed one by one, as if appended one by one
        if type(data) is list:
            parts, next_offset, each = records.patched_batches(data, base, self.leader_epoch)
            size = sum(batch[1] for batch in each)
        else:
            parts, next_offset = records.patched_parts(data, base, self.leader_epoch)
            size = len(data)
        self._maybe_roll(size, next_offset - 1)
        self.epochs.assign(self.leader_epoch, base)  # the file knows the epoch before any batch of it is written
        self._write(parts, size, base, next_offset, summary.max_timestamp, summary.records, each)
        if not self.replicated:
            self.high_watermark = next_offset
        if idempotent:
            self.producers.update(pid, epoch, summary.base_sequence, summary.last_sequence, base, transactional,
                                  summary.max_timestamp)
        return base

    def append_marker(self, producer_id: int, producer_epoch: int, coordinator_epoch: int, commit: bool,
                      timestamp_ms: int) -> int:
        """Write a transaction marker (leader): closes the producer's transaction here. Returns its offset.
        Raises InvalidProducerEpoch / CoordinatorFenced for a stale marker, OSError (nothing changed)."""
        self.producers.check_marker(producer_id, producer_epoch, coordinator_epoch)
        batch = control.marker_batch(producer_id, producer_epoch, commit, coordinator_epoch, timestamp_ms)
        offset = self.log_end_offset
        parts, next_offset = records.patched_parts(batch, offset, self.leader_epoch)
        self._maybe_roll(len(batch), offset)
        self.epochs.assign(self.leader_epoch, offset)
        first = self.producers.open_transactions().get(producer_id, -1)
        if not commit and first >= 0:  # indexed first: a marker is never on disk without its index entry
            self.txn_index.add(AbortedTxn(producer_id, first, offset, self.last_stable_offset))
        try:
            self._write(parts, len(batch), offset, next_offset, timestamp_ms, 1)
        except OSError:
            self.txn_index.truncate_to(offset)
            raise
        if not self.replicated:
            self.high_watermark = next_offset
        self.producers.apply_marker(producer_id, producer_epoch, coordinator_epoch, offset, timestamp_ms)
        self.producers.first_unstable_offset(self.high_watermark)  # forgets what the high watermark passed
        return offset

    def _track_marker(self, header: records.BatchHeader, batch) -> None:
        """A marker written by the leader (follower, rebuild): close the transaction, index an abort."""
        try:
            kind, coordinator_epoch = control.read_marker(batch)
        except records.InvalidBatch:
            log.warning("%s-%d: unreadable control batch at offset %d", self.topic, self.partition,
                        header.base_offset)
            return
        first = self.producers.open_transactions().get(header.producer_id, -1)
        if kind == control.ABORT and first >= 0:
            self.txn_index.add(AbortedTxn(header.producer_id, first, header.base_offset,
                                          min(first, self.high_watermark)))
        self.producers.apply_marker(header.producer_id, header.producer_epoch, coordinator_epoch,
                                    header.base_offset, header.max_timestamp)
        self.producers.first_unstable_offset(self.high_watermark)  # a follower's list stays short too

    def append_as_follower(self, data) -> int:
        """Append batches copied from the leader as they are (offsets and leader epochs kept). ``data`` holds
        whole, validated batches starting at the log end offset. Returns the new log end offset."""
        view = memoryview(data)
        pos, total = 0, len(view)
        headers = []
        while pos < total:
            header = records.read_header(view, pos)
            headers.append(header)
            pos += header.size
        if not headers:
            return self.log_end_offset
        if headers[0].base_offset != self.log_end_offset:
            raise NotContiguous(f"batch at {headers[0].base_offset}, log ends at {self.log_end_offset}")
        self._maybe_roll(total, headers[-1].last_offset)
        next_offset = headers[-1].next_offset
        try:
            for h in headers:
                self.epochs.assign(h.leader_epoch, h.base_offset)
            self._write([view], total, headers[0].base_offset, next_offset, max(h.max_timestamp for h in headers),
                        sum(h.record_count for h in headers))
        except OSError:
            self.epochs.truncate_from_end(self.log_end_offset)  # no epoch for batches this replica does not have
            raise
        pos = 0
        for h in headers:
            if control.is_control(h.attributes):
                self._track_marker(h, view[pos:pos + h.size])
            elif h.producer_id >= 0:
                last_seq = h.base_sequence + h.last_offset_delta if h.base_sequence >= 0 else -1
                self.producers.update(h.producer_id, h.producer_epoch, h.base_sequence, last_seq, h.base_offset,
                                      control.is_transactional(h.attributes), h.max_timestamp)
            pos += h.size
        return next_offset

    def _write(self, parts: list, size: int, base: int, next_offset: int, max_timestamp: int, count: int,
               batches: list | None = None) -> None:
        """Append to the active segment, and flush when the flush policy says so: all or nothing (OSError).
        ``batches``: index each batch on its own (see :meth:`LogSegment.append`)."""
        active = self.segments[-1]
        due = self._unflushed_messages + count >= self.config.flush_interval_messages
        mark = active.mark() if due else None
        try:
            active.append(parts, size, base, next_offset, max_timestamp, batches)
        except OSError:
            self.truncations += 1  # a refused write may have been cut back
            raise
        if not due:
            self._unflushed_messages += count
            return
        try:
            self.flush()
        except OSError:
            self.truncations += 1
            active.rollback(mark)  # flush.messages promised the batch on disk before it is acknowledged
            raise

    def truncate_to(self, offset: int) -> None:
        """Discard everything at or after ``offset`` (whole batches), as a follower whose tail diverged from
        the leader's log."""
        if offset >= self.log_end_offset:
            return
        offset = max(offset, self.log_start_offset)
        self.truncations += 1
        while len(self.segments) > 1 and self.segments[-1].base_offset >= offset:
            self.segments.pop().delete()
            self._bases.pop()
        if self.segments[-1].base_offset >= offset:
            self.segments[-1].truncate_to(self.segments[-1].base_offset)
        else:
            self.segments[-1].truncate_to(offset)
        self.epochs.truncate_from_end(self.log_end_offset)
        self.high_watermark = min(self.high_watermark, self.log_end_offset)
        self.recovery_point = min(self.recovery_point, self.log_end_offset)
        self.txn_index.truncate_to(self.log_end_offset)
        self.rebuild_producer_state()
        log.info("%s-%d truncated to offset %d", self.topic, self.partition, self.log_end_offset)

    def reset_to(self, offset: int) -> None:
        """Drop the whole log and start empty at ``offset`` (a follower whose leader no longer has what it
        would need next)."""
        fresh = LogSegment.create(self.dir, offset, self.config.index_interval_bytes)  # first: it may be refused
        self.truncations += 1
        for segment in self.segments:
            segment.delete()
        self.segments.clear()
        self._bases.clear()
        self._add(fresh)
        self.log_start_offset = self.high_watermark = self.recovery_point = offset
        self.epochs.clear()
        self.producers = ProducerStateManager()
        self._drop_snapshot()  # of the dropped log
        self.txn_index.clear()

    def begin_leader_epoch(self, epoch: int) -> None:
        """This replica leads from now on, in ``epoch``, which starts at the log end offset. A disk that refuses
        the leader-epoch checkpoint does not stop the leadership: the epoch is kept in memory and saved before
        the first batch of it is appended (appends fail with the error until then)."""
        self.leader_epoch = epoch
        try:
            self.epochs.assign(epoch, self.log_end_offset)
        except OSError as exc:
            incidents.failed(f"leader-epoch checkpoints in {log_dir_of(self.dir)}", exc,
                             f"{self.topic}-{self.partition}, epoch {epoch}")

    # ---- idempotent producers ------------------------------------------------------------------------------
    def snapshot_producers(self) -> None:
        self.producers.snapshot(self._snapshot_path, self.log_end_offset)

    def rebuild_producer_state(self) -> None:
        """Producer state = the snapshot (if it is not past the log end) + the batches written after it; with
        no usable snapshot, the batches of the whole log (Kafka's rebuild from the log start). A snapshot past
        the log end (a truncation discarded what it covers) is deleted: once the log grew past its offset again
        it would pass for one of the new log, describing batches that are not there or missing ones that are."""
        loaded = ProducerStateManager.load_snapshot(self._snapshot_path)
        if loaded is not None and self.log_start_offset <= loaded[1] <= self.log_end_offset:
            self.producers, start = loaded
        else:
            if loaded is not None and loaded[1] > self.log_end_offset:
                self._drop_snapshot()
            self.producers, start = ProducerStateManager(), self.segments[0].base_offset
        if start >= self.log_end_offset:
            return
        i = bisect_right(self._bases, start) - 1
        for segment in self.segments[max(i, 0):]:
            for h in segment.headers_from(start):
                if h.base_offset < start:
                    continue
                if control.is_control(h.attributes):
                    region = segment.read(h.base_offset, h.size)
                    self._track_marker(h, region.read() if region is not None else b"")
                elif h.producer_id >= 0:
                    last_seq = h.base_sequence + h.last_offset_delta if h.base_sequence >= 0 else -1
                    self.producers.update(h.producer_id, h.producer_epoch, h.base_sequence, last_seq,
                                          h.base_offset, control.is_transactional(h.attributes), h.max_timestamp)

    def _drop_snapshot(self) -> None:
        try:
            os.unlink(self._snapshot_path)
        except FileNotFoundError:
            pass
        except OSError as exc:  # kept on disk: the next restart ignores it as long as it is past the log end
            log.warning("%s-%d: cannot delete the producer snapshot past the log end: %s", self.topic,
                        self.partition, exc)

    def _maybe_roll(self, incoming: int, last_offset: int) -> None:
        """Roll before an append that would make the active segment too big or too old, or whose last offset
        would not fit the 32-bit relative offsets of the segment's indexes (Kafka's LogSegment rule)."""
        active = self.segments[-1]
        if active.size == 0:
            return
        config = self.config
        if (active.size + incoming > config.segment_bytes  # too big
                or last_offset - active.base_offset > INT32_MAX  # too far for the indexes
                or (active.first_append_ms is not None  # too old
                    and time.time() * 1000 - active.first_append_ms > config.roll_ms - self._roll_jitter(active))):
            self.roll()

    _jitter: tuple[int, int] = (-1, 0)  # (base offset of the segment it was drawn for, jitter ms)

    def _roll_jitter(self, segment: LogSegment) -> int:
        """Kafka's rollJitterMs: a random amount in [0, min(segment.jitter.ms, segment.ms)) drawn once per segment
        and taken off its roll age, so the segments of partitions created together do not all roll at once."""
        if self._jitter[0] != segment.base_offset:
            bound = min(self.config.segment_jitter_ms, self.config.roll_ms)
            self._jitter = (segment.base_offset, random.randrange(bound) if bound > 0 else 0)
        return self._jitter[1]

    def roll(self) -> LogSegment:
        """Close the active segment for appends and start a new one at the log end offset. All or nothing: if
        the disk refuses the new segment's files or the producer snapshot, the old segment stays active (OSError).
        """
        if self.active.size == 0:
            return self.active
        self.active.repair()  # a closed segment ends with a whole batch
        segment = LogSegment.create(self.dir, self.log_end_offset, self.config.index_interval_bytes)
        try:
            self.snapshot_producers()
        except OSError:
            try:
                segment.delete()
            except OSError:
                pass
            raise
        # No fsync here: it would block the event loop for as long as the OS takes to write the segment.
        # The flush policy (or shutdown) makes it durable; until then recovery starts at the recovery point.
        self._add(segment)
        return segment

    def flush(self) -> None:
        """fsync every segment from the one holding the recovery point (segments rolled since the last flush
        too, not only the active one); then the recovery point is the log end offset."""
        for segment in self.segments[max(bisect_right(self._bases, self.recovery_point) - 1, 0):]:
            segment.flush()
        self.recovery_point = self.log_end_offset
        self._unflushed_messages = 0
        self._last_flush_ms = int(time.time() * 1000)

    def flush_if_due(self, now_ms: int) -> None:
        if self._unflushed_messages and now_ms - self._last_flush_ms >= self.config.flush_ms:
            self.flush()

    # ---- reads --------------------------------------------------------------------------------------------
    @property
    def last_stable_offset(self) -> int:
        """The high watermark, or the first offset of a transaction not yet decided below it (read_committed)."""
        unstable = self.producers.first_unstable_offset(self.high_watermark)
        return self.high_watermark if unstable is None else min(unstable, self.high_watermark)

    def aborted_transactions(self, fetch_offset: int, upper_offset: int) -> list[AbortedTxn]:
        return self.txn_index.collect(fetch_offset, upper_offset)

    def read(self, offset: int, max_bytes: int, committed_only: bool = True,
             upper: int | None = None) -> FileRegion | None:
        """Bytes starting at the batch containing ``offset``, up to the high watermark (consumers), the last
        stable offset (``upper``: read_committed consumers) or the log end (followers: ``committed_only=False``).
        The high watermark and the last stable offset are batch boundaries."""
        if offset < self.log_start_offset or offset > self.log_end_offset:
            raise OffsetOutOfRange(offset)
        limit = self.high_watermark if committed_only else self.log_end_offset
        if upper is not None:
            limit = min(limit, upper)
        if offset >= limit:
            return None
        i = bisect_right(self._bases, offset) - 1
        while i < len(self.segments):
            segment = self.segments[i]
            end_position = None
            if limit < segment.next_offset:  # the high watermark is inside this segment: stop at its batch
                found = segment.find_batch(limit, segment.size)
                end_position = found[0] if found else None
            region = segment.read(offset, max_bytes, end_position)
            if region is not None:
                return region
            i += 1
        return None

    def timestamp_batches(self, timestamp: int):
        """Whole batches, in log order, that may hold the first record with a timestamp >= ``timestamp``: per
        segment, the first batch whose max timestamp reaches it. Only indexes and one read per segment: scanning
        the records (decompression, bounded) is the caller's, which may do it off the event loop."""
        for segment in list(self.segments):
            found = segment.find_timestamp(timestamp)
            if found is not None:
                position, size = found
                yield os.pread(segment.fd, size, position)

    def offset_for_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        """(timestamp, offset) of the first record with a timestamp >= ``timestamp``, or None."""
        for batch in self.timestamp_batches(timestamp):
            hit = first_at_or_after(batch, timestamp, self.log_start_offset)
            if hit is not None:
                return hit
        return None

    @property
    def max_timestamp(self) -> int:
        return max((s.max_timestamp for s in self.segments), default=-1)

    def offset_of_max_timestamp(self) -> tuple[int, int] | None:
        """(timestamp, offset) of the record with the largest timestamp (the first such), or None."""
        best = self.max_timestamp
        return None if best < 0 else self.offset_for_timestamp(best)

    # ---- retention ----------------------------------------------------------------------------------------
    def apply_retention(self, now_ms: int, schedule_delete) -> int:
        """Delete old segments by time, then by size; never the active one. Returns segments deleted.
        Compacted topics without ``delete`` in their cleanup.policy keep everything (the cleaner trims them)."""
        deleted = 0
        if "delete" not in self.config.cleanup_policy.split(","):
            return 0
        retention_ms = self.config.retention_ms
        retention_bytes = self.config.retention_bytes
        size = self.size_bytes
        while len(self.segments) > 1:
            oldest = self.segments[0]
            expired = retention_ms >= 0 and oldest.max_timestamp >= 0 and now_ms - oldest.max_timestamp > retention_ms
            oversize = retention_bytes >= 0 and size - oldest.size >= retention_bytes
            if not (expired or oversize):
                break
            size -= oldest.size
            self.segments.pop(0)
            self._bases.pop(0)
            self.log_start_offset = max(self.log_start_offset, self.segments[0].base_offset)
            self._delete_later(oldest, schedule_delete)
            deleted += 1
        if deleted:
            self.epochs.truncate_from_start(self.log_start_offset)
            try:
                self.txn_index.drop_before(self.log_start_offset)
            except OSError as exc:  # kept whole: entries below the log start are never collected anyway
                incidents.failed(f"transaction indexes in {log_dir_of(self.dir)}", exc, self.dir)
        return deleted

    def retire_segment(self, segment: LogSegment, schedule_delete) -> None:
        """Rename a segment's files away (``.deleted``) and close them later; the caller puts a replacement
        with the same base offset in place (:meth:`replace_segments`)."""
        self._delete_later(segment, schedule_delete)

    def replace_segments(self, olds: list[LogSegment], fresh: LogSegment) -> None:
        """``fresh`` (with the first one's base offset) in place of the consecutive segments ``olds``: compaction's
        rewrite of a group of them."""
        i = self.segments.index(olds[0])
        self.segments[i:i + len(olds)] = [fresh]
        self._bases[i:i + len(olds)] = [fresh.base_offset]

    def advance_start(self, offset: int, schedule_delete) -> int:
        """DeleteRecords (or a follower taking its leader's log start): the log starts at ``offset`` at the latest
        (never past the high watermark, never backwards); segments wholly below it go as retention's do, the rest
        of the first one stays on disk but is no longer read (a fetch below is OFFSET_OUT_OF_RANGE). Returns the
        log start offset."""
        offset = min(offset, self.high_watermark)
        if offset <= self.log_start_offset:
            return self.log_start_offset
        self.log_start_offset = offset
        while len(self.segments) > 1 and self.segments[1].base_offset <= offset:
            self._bases.pop(0)
            self._delete_later(self.segments.pop(0), schedule_delete)
        self.epochs.truncate_from_start(offset)
        try:
            self.txn_index.drop_before(offset)
        except OSError as exc:  # kept whole: entries below the log start are never collected anyway
            incidents.failed(f"transaction indexes in {log_dir_of(self.dir)}", exc, self.dir)
        log.info("%s-%d: log start offset %d", self.topic, self.partition, offset)
        return offset

    def _delete_later(self, segment: LogSegment, schedule_delete) -> None:
        """Rename to ``.deleted`` now; close and unlink after ``file.delete.delay.ms`` so in-flight
        sendfile calls on the old descriptors finish."""
        for path in (segment.path, segment.offset_index.path, segment.time_index.path):
            try:
                os.rename(path, path + ".deleted")
            except FileNotFoundError:
                pass
        segment.path += ".deleted"
        segment.offset_index.path += ".deleted"
        segment.time_index.path += ".deleted"
        schedule_delete(self.config.file_delete_delay_ms / 1000, segment.delete)

    def delete(self) -> None:
        for segment in self.segments:
            segment.delete()
        self.segments.clear()
        self._bases.clear()
        try:
            for name in os.listdir(self.dir):
                os.unlink(os.path.join(self.dir, name))
            os.rmdir(self.dir)
        except FileNotFoundError:
            pass

    def close(self) -> None:
        for segment in self.segments:
            segment.close()
