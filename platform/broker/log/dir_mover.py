"""Moving a partition's replica to another log dir of the same broker (AlterReplicaLogDirs, key 34: Kafka's future
replica and its ``ReplicaAlterLogDirsThread``), while the partition goes on serving.

A move copies the partition's directory into ``<destination>/<topic>-<partition>.<id>-future`` in a worker thread,
pass after pass, while the log keeps taking appends, every file written fsync'd there. Between in-place rewrites
(a truncation, or an append the disk refused and that was cut back: :attr:`PartitionLog.truncations`, which makes
the copy start over) the segments and indexes are append-only, so a pass copies only what they grew; a file
replaced by another (a new inode: a compacted segment) or one that shrank is copied whole, the small other files
(leader-epoch checkpoint, producer snapshot) whole every pass, and files that are gone are removed from the copy.
Once a pass has copied less than 1 MiB (after 20 passes, less than 16 MiB), the last one runs on the event loop,
where nothing can be appended in between: a producer snapshot is written, the rest copied (the active segment's
indexes whole), the copy renamed ``-ready``, the old directory ``<topic>-<partition>.<id>-delete``, the copy
``<topic>-<partition>`` in the destination (both parents fsync'd), and a log opened there takes the old one's
place (its high watermark, leader epoch and replicated flag carried over; every caller looks a log up by its
partition, the cluster's partition object is pointed at the new one). The old files are closed and removed after
``file.delete.delay.ms`` (reads in flight on them finish first). The offset checkpoints of every log dir are
written at once (start-up also takes the highest log start offset any dir's checkpoint lists).

What Kafka does differently: its future replica fetches batches from the current one (and is listed with its own
log end offset); logbus copies files, and describes a move's ``offset_lag`` as the log end offset minus the base
offset of the first segment not yet copied whole. A move is not kept across a restart (Kafka resumes it): a
``-future`` directory is removed at start-up, a ``-ready`` one becomes the replica if the broker stopped between
the renames (:meth:`LogManager._finish_interrupted_moves`), and a move must be asked for again. The log cleaner is
waited for: the last pass does not run while a compaction is under way. A partition written faster than it can be
copied keeps its move going (as a Kafka future replica that never catches up).
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import threading
import uuid
from dataclasses import dataclass, field

from broker.log.log import PartitionLog

log = logging.getLogger(__name__)

LAST_PASS_BYTES = 1024 * 1024  # a pass that copied less than this is followed by the last one, on the loop
MAX_PASSES = 20
LATE_LAST_PASS_BYTES = 16 * 1024 * 1024  # after MAX_PASSES, the last pass once a pass copied less than this
CHUNK = 1024 * 1024
TRANSIENT = (".deleted", ".cleaned", ".swap")  # files on their way out or not complete yet
APPEND_ONLY = (".log", ".index", ".timeindex", ".txnindex")  # between truncations; other files are rewritten whole


@dataclass
class CopyState:
    """What a move has copied of each file: name -> (inode, bytes copied)."""

    files: dict[str, tuple[int, int]] = field(default_factory=dict)
    copied: int = 0  # bytes in all


def _remove_in_background(path: str) -> None:
    threading.Thread(target=shutil.rmtree, args=(path, True), daemon=True).start()


def _fsync_path(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def copy_pass(source: str, target: str, state: CopyState, whole: frozenset = frozenset()) -> int:
    """Bring ``target`` up to what ``source`` holds now, each file written fsync'd; the bytes copied. Append-only
    files get what they grew (unless their inode changed, they shrank, or they are named in ``whole``); the small
    others are copied whole every time (a file replaced twice may get its first inode back). No event loop needed
    (a worker thread)."""
    os.makedirs(target, exist_ok=True)
    moved = 0
    present = set()
    for name in sorted(os.listdir(source)):
        if name.endswith(TRANSIENT):
            continue
        src = os.path.join(source, name)
        try:
            st = os.stat(src)
        except FileNotFoundError:  # deleted meanwhile (retention)
            continue
        if not os.path.isfile(src):
            continue
        present.add(name)
        inode, done = state.files.get(name, (-1, -1))
        dst = os.path.join(target, name)
        if (inode != st.st_ino or done > st.st_size or name in whole or not name.endswith(APPEND_ONLY)
                or not os.path.exists(dst)):
            done = -1
        if done == st.st_size:
            continue
        try:
            with open(src, "rb") as fin, open(dst, "wb" if done < 0 else "r+b") as fout:
                done = max(done, 0)
                fin.seek(done)
                fout.seek(done)
                while done < st.st_size:
                    chunk = fin.read(min(CHUNK, st.st_size - done))
                    if not chunk:  # shrank meanwhile: the next pass sees it
                        break
                    fout.write(chunk)
                    done += len(chunk)
                    moved += len(chunk)
                fout.truncate(done)
                fout.flush()
                os.fsync(fout.fileno())
        except FileNotFoundError:
            continue
        state.files[name] = (st.st_ino, done)
    for name in set(state.files) - present:
        state.files.pop(name)
        try:
            os.unlink(os.path.join(target, name))
        except FileNotFoundError:
            pass
    state.copied += moved
    return moved


@dataclass
class Move:
    key: tuple[str, int]
    destination: str
    future: str
    state: CopyState = field(default_factory=CopyState)
    task: asyncio.Task | None = None
    truncations: int = -1  # the log's count of in-place rewrites the copy so far is valid for

    @property
    def size(self) -> int:
        """Bytes of the copy so far."""
        return sum(done for _, done in list(self.state.files.values()))

    def offset_lag(self, plog: PartitionLog) -> int:
        """The log end offset minus the base offset of the first segment whose ``.log`` is not copied whole."""
        files = dict(self.state.files)
        for segment in plog.segments:
            if files.get(os.path.basename(segment.path), (0, -1))[1] < segment.size:
                return plog.log_end_offset - segment.base_offset
        return 0


class LogDirMover:
    def __init__(self, broker):
        self.broker = broker
        self.moves: dict[tuple[str, int], Move] = {}

    def request(self, topic: str, partition: int, destination: str) -> None:
        """Move the partition's log to ``destination`` (one of the broker's log dirs; the log exists): started
        unless a move there is under way; a move elsewhere is given up; to its own dir, nothing (any move is
        given up)."""
        key = (topic, partition)
        current = self.moves.get(key)
        if current is not None:
            if current.destination == destination:
                return
            self.cancel(key)
        if self.broker.logs.dir_of(topic, partition) == destination:
            return
        move = Move(key, destination, os.path.join(destination, f"{topic}-{partition}.{uuid.uuid4().hex}-future"))
        self.moves[key] = move
        move.task = asyncio.get_running_loop().create_task(self._run(move))
        log.info("%s-%d: moving its replica to %s", topic, partition, destination)

    def cancel(self, key: tuple[str, int]) -> None:
        move = self.moves.pop(key, None)
        if move is not None and move.task is not None:
            move.task.cancel()

    async def stop(self) -> None:
        for key in list(self.moves):
            self.cancel(key)

    async def _run(self, move: Move) -> None:
        logs = self.broker.logs
        plog = logs.get(*move.key)
        passes = 0
        try:
            while True:
                if logs.get(*move.key) is not plog:  # deleted (a topic deletion, a reassignment) meanwhile
                    log.info("%s-%d: its log went away; the move to %s is given up", *move.key, move.destination)
                    _remove_in_background(move.future)
                    return
                if plog.truncations != move.truncations:  # rewritten in place (now or ever): copy it all again
                    move.state.files.clear()
                    move.truncations = plog.truncations
                copied = await asyncio.to_thread(copy_pass, plog.dir, move.future, move.state)
                passes += 1
                if plog.truncations != move.truncations:
                    continue
                # the last pass once little is left; past MAX_PASSES once a pass copied less than 16 MiB (appends
                # about as fast as the copy would otherwise keep it going for a long time)
                last = copied < LAST_PASS_BYTES or (passes >= MAX_PASSES and copied < LATE_LAST_PASS_BYTES)
                if last and not self.broker.cleaner.busy and logs.get(*move.key) is plog \
                        and plog.truncations == move.truncations:
                    self._finish(move, plog)
                    return
                if copied < LAST_PASS_BYTES:
                    await asyncio.sleep(0.1)
        except asyncio.CancelledError:
            _remove_in_background(move.future)
            raise
        except Exception as exc:  # noqa: BLE001 - the replica stays where it is, serving
            log.error("%s-%d: moving the replica to %s failed: %s; it stays in %s", *move.key, move.destination,
                      exc, os.path.dirname(plog.dir))
            _remove_in_background(move.future)
        finally:
            if self.moves.get(move.key) is move:
                del self.moves[move.key]

    def _finish(self, move: Move, plog: PartitionLog) -> None:
        """The last pass and the swap, on the event loop (no append can come in between). The copy is renamed
        ``-ready`` once complete and fsync'd (start-up promotes only such a copy, never a partial one), then the
        old directory ``-delete``, then the copy into place; both parents fsync'd."""
        topic, partition = move.key
        plog.snapshot_producers()
        active = plog.segments[-1]
        whole = frozenset(os.path.basename(p) for p in (active.offset_index.path, active.time_index.path))
        copy_pass(plog.dir, move.future, move.state, whole | {"leader-epoch-checkpoint"})
        source_parent = os.path.dirname(plog.dir)
        ready = move.future[:-len("-future")] + "-ready"
        retired = f"{plog.dir}.{uuid.uuid4().hex}-delete"
        final = os.path.join(move.destination, f"{topic}-{partition}")
        os.rename(move.future, ready)
        _fsync_path(move.destination)
        os.rename(plog.dir, retired)
        try:
            os.rename(ready, final)
            moved = PartitionLog(final, topic, partition, plog.config, recovery_point=plog.log_end_offset,
                                 log_start_offset=plog.log_start_offset, clean_shutdown=True)
        except Exception:
            if os.path.exists(final):
                os.rename(final, move.future)
            os.rename(retired, plog.dir)  # the old log serves on, unchanged
            raise
        _fsync_path(move.destination)
        _fsync_path(source_parent)
        moved.high_watermark = plog.high_watermark
        moved.leader_epoch = plog.leader_epoch
        moved.replicated = plog.replicated
        self.broker.logs.replace(move.key, moved, move.destination)
        cluster = self.broker.cluster
        if cluster is not None and (part := cluster.partition(topic, partition)) is not None:
            part.log = moved
        self.broker.logs.checkpoint(snapshots=False)  # the offsets of both dirs, not every partition's snapshot

        def remove_old() -> None:
            plog.close()
            _remove_in_background(retired)

        asyncio.get_running_loop().call_later(plog.config.file_delete_delay_ms / 1000, remove_old)
        log.info("%s-%d: replica moved to %s (%d bytes copied)", topic, partition, move.destination,
                 move.state.copied)
