"""Moving a partition's replica to another log dir of the same broker (AlterReplicaLogDirs, key 34: Kafka's future
replica and its ``ReplicaAlterLogDirsThread``), while the partition goes on serving.

A move copies the partition's directory into ``<destination>/<topic>-<partition>.<id>-future`` in a worker thread,
pass after pass, while the log keeps taking appends. Between truncations every file of a log is append-only
(segments, indexes, the transaction index), so a pass copies only what a file grew since the last one; a file
replaced by another (a new inode: a compacted segment, a new leader-epoch checkpoint or producer snapshot), one
that shrank, or any truncation of the log (:attr:`PartitionLog.truncations`) is copied whole again, and files
that are gone are removed from the copy. Once a pass has little left to copy (or after 20 passes), the last one
runs on the event loop, where nothing can be appended in between: a producer snapshot is written, the rest
copied and fsync'd, the old directory renamed ``<topic>-<partition>.<id>-delete``, the future one renamed
``<topic>-<partition>`` in the destination, and a log opened there takes the old one's place (its high
watermark, leader epoch and replicated flag carried over; every caller looks a log up by its partition, the
cluster's partition object is pointed at the new one). The old files are closed and removed after
``file.delete.delay.ms`` (reads in flight on them finish first). The checkpoints of every log dir are written at
once.

What Kafka does differently: its future replica fetches batches from the current one (and is listed with its own
log end offset); logbus copies files, and describes a move's ``offset_lag`` as the log end offset minus the base
offset of the first segment not yet copied whole. A move is not kept across a restart (Kafka resumes it): the
future directory is removed at start-up, unless the broker stopped between the two renames of a complete copy
(:meth:`LogManager._finish_interrupted_moves`), and must be asked for again. The log cleaner is waited for: the
last pass does not run while a compaction is under way.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import uuid
from dataclasses import dataclass, field

from broker.log.log import PartitionLog

log = logging.getLogger(__name__)

LAST_PASS_BYTES = 1024 * 1024  # a pass that copied less than this is followed by the last one, on the loop
MAX_PASSES = 20
CHUNK = 1024 * 1024
TRANSIENT = (".deleted", ".cleaned", ".swap")  # files on their way out or not complete yet


@dataclass
class CopyState:
    """What a move has copied of each file: name -> (inode, bytes copied)."""

    files: dict[str, tuple[int, int]] = field(default_factory=dict)
    copied: int = 0  # bytes in all


def copy_pass(source: str, target: str, state: CopyState) -> int:
    """Bring ``target`` up to what ``source`` holds now; the bytes copied. No event loop needed (a worker thread)."""
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
        if inode != st.st_ino or done > st.st_size or not os.path.exists(dst):
            done = 0
            with open(dst, "wb"):
                pass
        if done < st.st_size:
            try:
                with open(src, "rb") as fin, open(dst, "r+b") as fout:
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


def fsync_dir(path: str) -> None:
    for name in os.listdir(path):
        fd = os.open(os.path.join(path, name), os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@dataclass
class Move:
    key: tuple[str, int]
    destination: str
    future: str
    state: CopyState = field(default_factory=CopyState)
    task: asyncio.Task | None = None

    @property
    def size(self) -> int:
        """Bytes of the copy so far."""
        return sum(done for _, done in self.state.files.values())

    def offset_lag(self, plog: PartitionLog) -> int:
        """The log end offset minus the base offset of the first segment whose ``.log`` is not copied whole."""
        for segment in plog.segments:
            name = os.path.basename(segment.path)
            if self.state.files.get(name, (0, -1))[1] < segment.size:
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
                    shutil.rmtree(move.future, ignore_errors=True)
                    return
                truncations = plog.truncations
                copied = await asyncio.to_thread(copy_pass, plog.dir, move.future, move.state)
                passes += 1
                if plog.truncations != truncations:
                    move.state.files.clear()  # rewritten in place meanwhile: copy it all again
                    continue
                # the last pass once little is left, or after MAX_PASSES whatever is left (appends faster than
                # the copy would otherwise keep it going for ever)
                last = copied < LAST_PASS_BYTES or passes >= MAX_PASSES
                if last and not self.broker.cleaner.busy and logs.get(*move.key) is plog:
                    self._finish(move, plog)
                    return
                if copied < LAST_PASS_BYTES:
                    await asyncio.sleep(0.1)
        except asyncio.CancelledError:
            shutil.rmtree(move.future, ignore_errors=True)
            raise
        except OSError as exc:
            log.error("%s-%d: moving the replica to %s failed: %s; it stays in %s", *move.key, move.destination,
                      exc, os.path.dirname(plog.dir))
            shutil.rmtree(move.future, ignore_errors=True)
        finally:
            if self.moves.get(move.key) is move:
                del self.moves[move.key]

    def _finish(self, move: Move, plog: PartitionLog) -> None:
        """The last pass and the swap, on the event loop (no append can come in between)."""
        topic, partition = move.key
        plog.snapshot_producers()
        copy_pass(plog.dir, move.future, move.state)
        fsync_dir(move.future)
        retired = f"{plog.dir}.{uuid.uuid4().hex}-delete"
        final = os.path.join(move.destination, f"{topic}-{partition}")
        os.rename(plog.dir, retired)
        try:
            os.rename(move.future, final)
            moved = PartitionLog(final, topic, partition, plog.config, recovery_point=plog.log_end_offset,
                                 log_start_offset=plog.log_start_offset, clean_shutdown=True)
        except Exception:
            if os.path.exists(final) and not os.path.exists(move.future):
                os.rename(final, move.future)
            os.rename(retired, plog.dir)  # the old log serves on, unchanged
            raise
        moved.high_watermark = plog.high_watermark
        moved.leader_epoch = plog.leader_epoch
        moved.replicated = plog.replicated
        self.broker.logs.replace(move.key, moved, move.destination)
        cluster = self.broker.cluster
        if cluster is not None and (part := cluster.partition(topic, partition)) is not None:
            part.log = moved
        self.broker.logs.checkpoint()

        def remove_old() -> None:
            plog.close()
            shutil.rmtree(retired, ignore_errors=True)

        asyncio.get_running_loop().call_later(plog.config.file_delete_delay_ms / 1000, remove_old)
        log.info("%s-%d: replica moved to %s (%d bytes copied)", topic, partition, move.destination,
                 move.state.copied)
