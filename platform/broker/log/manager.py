"""All partition logs of a broker across its ``log.dirs``, their checkpoints and background duties.

Per log dir, in Kafka's text checkpoint format (``0`` version line, entry count, ``topic partition offset``
lines): ``recovery-point-offset-checkpoint`` and ``log-start-offset-checkpoint``. A ``.kafka_cleanshutdown``
marker is written after a clean shutdown; without it, start-up recovers every segment past the recovery point.
Start-up never refuses to run because of one partition: a log that cannot be opened or recovered (an I/O error,
a directory it cannot read) is logged, kept *offline* (its files are left as they are, for an operator) and
answered with KAFKA_STORAGE_ERROR; every other partition serves.

Background writes (checkpoints, producer snapshots, flushes) never raise into the periodic tasks: a write the
disk refuses is reported as an incident (see :mod:`broker.log.storage_errors`) and tried again at the next round;
a checkpoint file is replaced whole or kept as it was.
Not thread-safe: the broker's event loop owns it.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import time
import uuid
from typing import Callable

from broker.log.log import LogConfig, PartitionLog
from broker.log.storage_errors import incidents, replace_file

log = logging.getLogger(__name__)

RECOVERY_CHECKPOINT = "recovery-point-offset-checkpoint"
START_CHECKPOINT = "log-start-offset-checkpoint"
CLEAN_SHUTDOWN = ".kafka_cleanshutdown"
_DIR_NAME = re.compile(r"^(?P<topic>.+)-(?P<partition>\d+)$")
# a replica being moved to this log dir (AlterReplicaLogDirs), and one moved away, to be removed
_MOVE_NAME = re.compile(r"^(?P<topic>.+)-(?P<partition>\d+)\.[0-9a-f]+-(?P<kind>future|ready|delete)$")


def read_checkpoint(path: str) -> dict[tuple[str, int], int]:
    """Entries of a checkpoint file; an unreadable one counts as absent (recovery then starts from offset 0,
    which is slower but safe)."""
    try:
        with open(path) as f:
            lines = f.read().splitlines()
        out = {}
        for line in lines[2:]:
            topic, partition, offset = line.rsplit(" ", 2)
            out[(topic, int(partition))] = int(offset)
        return out
    except FileNotFoundError:
        return {}
    except (OSError, ValueError, UnicodeDecodeError) as exc:
        log.warning("ignoring unreadable checkpoint %s: %s", path, exc)
        return {}


def write_checkpoint(path: str, entries: dict[tuple[str, int], int]) -> None:
    """Replace the checkpoint file whole (fsync'd), or raise OSError and keep the old one."""
    replace_file(path, f"0\n{len(entries)}\n" + "".join(f"{topic} {partition} {offset}\n"
                                                        for (topic, partition), offset in sorted(entries.items())))


def try_checkpoint(path: str, entries: dict[tuple[str, int], int]) -> bool:
    """:func:`write_checkpoint` for background writers: a refused write is reported, not raised."""
    try:
        write_checkpoint(path, entries)
    except OSError as exc:
        incidents.failed(f"writes of {path}", exc)
        return False
    if incidents.any:
        incidents.succeeded(f"writes of {path}")
    return True


class OfflineLog(OSError):
    """The partition's log could not be loaded at start-up; it is not served until an operator fixes it."""


class LogManager:
    def __init__(self, log_dirs: list[str], config_for: Callable[[str], LogConfig]):
        self.log_dirs = log_dirs
        self.config_for = config_for
        self.logs: dict[tuple[str, int], PartitionLog] = {}
        self._dir_of: dict[tuple[str, int], str] = {}
        self.offline: dict[tuple[str, int], str] = {}  # partition -> why it could not be loaded
        self.preferred: dict[tuple[str, int], str] = {}  # AlterReplicaLogDirs for a replica not created yet

    def _finish_interrupted_moves(self) -> None:
        """Left-overs of replica moves between log dirs (:mod:`broker.log.dir_mover`): ``-delete`` and ``-future``
        directories go (a move under way is abandoned: requests to move are not kept across restarts); a ``-ready``
        one (a complete, fsync'd copy) becomes the current one if its partition has none (the broker stopped
        between the move's renames), else it goes too."""
        current, moves = set(), []
        for log_dir in self.log_dirs:
            for name in os.listdir(log_dir):
                if (match := _DIR_NAME.match(name)) is not None and os.path.isdir(os.path.join(log_dir, name)):
                    current.add((match["topic"], int(match["partition"])))
                elif (match := _MOVE_NAME.match(name)) is not None:
                    moves.append((log_dir, name, match))
        for log_dir, name, match in moves:
            key, path = (match["topic"], int(match["partition"])), os.path.join(log_dir, name)
            if match["kind"] == "ready" and key not in current:
                log.warning("%s: a replica move stopped after its copy was complete; finishing it", path)
                os.rename(path, os.path.join(log_dir, f"{key[0]}-{key[1]}"))
                current.add(key)
            else:
                log.info("removing %s (left by a replica move between log dirs)", path)
                shutil.rmtree(path, ignore_errors=True)

    def load(self) -> None:
        for log_dir in self.log_dirs:
            os.makedirs(log_dir, exist_ok=True)
        self._finish_interrupted_moves()
        starts: dict[tuple[str, int], int] = {}  # every dir's: a replica moved to another dir just before a stop is
        # still listed in its old dir's checkpoint
        for log_dir in self.log_dirs:
            for key, offset in read_checkpoint(os.path.join(log_dir, START_CHECKPOINT)).items():
                starts[key] = max(offset, starts.get(key, 0))
        for log_dir in self.log_dirs:
            marker = os.path.join(log_dir, CLEAN_SHUTDOWN)
            clean = os.path.exists(marker)
            recovery = read_checkpoint(os.path.join(log_dir, RECOVERY_CHECKPOINT))
            for name in sorted(os.listdir(log_dir)):
                match = _DIR_NAME.match(name)
                path = os.path.join(log_dir, name)
                if not match or not os.path.isdir(path):
                    continue
                key = (match["topic"], int(match["partition"]))
                started = time.monotonic()
                try:
                    self.logs[key] = PartitionLog(
                        path, key[0], key[1], self.config_for(key[0]),
                        recovery_point=recovery.get(key, 0), log_start_offset=starts.get(key, 0),
                        clean_shutdown=clean,
                    )
                except Exception as exc:  # one bad partition must not keep the others from serving
                    log.error("partition %s-%d is OFFLINE: its log in %s cannot be loaded: %s", key[0], key[1],
                              path, exc, exc_info=True)
                    self.offline[key] = f"{type(exc).__name__}: {exc}"
                    continue
                self._dir_of[key] = log_dir
                if not clean:
                    log.info("recovered %s-%d in %.3fs", key[0], key[1], time.monotonic() - started)
            if clean:
                os.unlink(marker)  # a crash from now on must trigger recovery

    def get(self, topic: str, partition: int) -> PartitionLog | None:
        return self.logs.get((topic, partition))

    def is_offline(self, topic: str, partition: int) -> bool:
        return (topic, partition) in self.offline

    def create(self, topic: str, partition: int) -> PartitionLog:
        """The partition's log, created if needed. A log already open (left by a topic of the same name whose
        deletion a crash interrupted, or by a replica that leads again) takes the topic's configs now: Produce
        reads the configs it enforces (size cap, compaction's keys, timestamps) from the log."""
        key = (topic, partition)
        if key in self.logs:
            plog = self.logs[key]
            plog.config = self.config_for(topic)
            return plog
        if key in self.offline:
            raise OfflineLog(f"{topic}-{partition} is offline: {self.offline[key]}")
        counts = {d: 0 for d in self.log_dirs}
        for d in self._dir_of.values():
            counts[d] += 1
        log_dir = self.preferred.pop(key, None) or min(self.log_dirs, key=lambda d: counts[d])  # else the dir with
        # the fewest partitions, as Kafka picks
        self.logs[key] = PartitionLog(os.path.join(log_dir, f"{topic}-{partition}"), topic, partition,
                                      self.config_for(topic))
        self._dir_of[key] = log_dir
        return self.logs[key]

    def delete_topic(self, topic: str) -> None:
        for key in [k for k in self.offline if k[0] == topic]:
            del self.offline[key]  # its files stay for an operator, out of the way of a new topic of that name
            for log_dir in self.log_dirs:
                path = os.path.join(log_dir, f"{key[0]}-{key[1]}")
                try:
                    os.rename(path, f"{path}.{uuid.uuid4().hex}-offline")
                except OSError:
                    pass
        for key in [k for k in self.logs if k[0] == topic]:
            self.logs.pop(key).delete()
            self._dir_of.pop(key, None)
        self.checkpoint()

    def dir_of(self, topic: str, partition: int) -> str | None:
        return self._dir_of.get((topic, partition))

    def replace(self, key: tuple[str, int], plog: PartitionLog, log_dir: str) -> None:
        """A replica moved to ``log_dir``: ``plog`` serves the partition from now on."""
        self.logs[key] = plog
        self._dir_of[key] = log_dir

    def delete(self, topic: str, partition: int) -> None:
        plog = self.logs.pop((topic, partition), None)
        if plog is not None:
            plog.delete()
            self._dir_of.pop((topic, partition), None)

    def checkpoint(self, snapshots: bool = True) -> bool:
        """Producer snapshots (``snapshots``) and the offset checkpoints of every log dir; False if the disk refused
        any (each is reported and tried again at the next checkpoint). Never raises OSError."""
        ok = True
        for key, partition_log in self.logs.items() if snapshots else ():
            ok = self._attempt("producer snapshots", key, partition_log.snapshot_producers) and ok
        for log_dir in self.log_dirs:
            keys = [k for k, d in self._dir_of.items() if d == log_dir]
            ok = try_checkpoint(os.path.join(log_dir, RECOVERY_CHECKPOINT),
                                {k: self.logs[k].recovery_point for k in keys}) and ok
        return self.checkpoint_starts() and ok

    def checkpoint_starts(self) -> bool:
        """The log start offsets of every log dir alone (DeleteRecords makes them durable before it answers)."""
        ok = True
        for log_dir in self.log_dirs:
            keys = [k for k, d in self._dir_of.items() if d == log_dir]
            ok = try_checkpoint(os.path.join(log_dir, START_CHECKPOINT),
                                {k: self.logs[k].log_start_offset for k in keys}) and ok
        return ok

    def flush_due(self) -> None:
        now = int(time.time() * 1000)
        for key, partition_log in self.logs.items():
            self._attempt("flushes", key, lambda p=partition_log: p.flush_if_due(now))

    def _attempt(self, what: str, key: tuple[str, int], write: Callable[[], None]) -> bool:
        site = f"{what} in {self._dir_of.get(key, '?')}"
        try:
            write()
        except OSError as exc:
            incidents.failed(site, exc, f"{key[0]}-{key[1]}")
            return False
        if incidents.any:
            incidents.succeeded(site)
        return True

    def apply_retention(self, schedule_delete) -> int:
        now = int(time.time() * 1000)
        deleted = 0
        for key, partition_log in self.logs.items():  # retention frees space: a refusal elsewhere must not stop it
            try:
                deleted += partition_log.apply_retention(now, schedule_delete)
            except OSError as exc:
                incidents.failed(f"retention deletions in {self._dir_of.get(key, '?')}", exc, f"{key[0]}-{key[1]}")
        if deleted:
            self.checkpoint()
        return deleted

    def shutdown(self) -> None:
        """Flush everything, write checkpoints and the clean-shutdown marker, close all files. A full or failing
        disk leaves no marker, so the next start recovers the logs (checking every batch past the recovery
        point) instead of trusting them."""
        clean = True
        for key, partition_log in self.logs.items():
            clean = self._attempt("flushes", key, partition_log.flush) and clean
        clean = self.checkpoint() and clean
        if not clean:
            log.error("shutdown could not flush or checkpoint every log: the next start recovers them")
        for partition_log in self.logs.values():
            partition_log.close()
        for log_dir in self.log_dirs if clean else ():
            try:
                with open(os.path.join(log_dir, CLEAN_SHUTDOWN), "w"):
                    pass
            except OSError as exc:
                log.error("no clean-shutdown marker in %s (%s): the next start recovers its logs", log_dir, exc)
