"""The leader epoch cache of a partition: (leader epoch, first offset written in that epoch), kept in the
partition directory as ``leader-epoch-checkpoint`` in Kafka's format (version, count, then ``epoch offset``
lines). A follower that becomes one after a leader change asks the new leader where its own latest epoch ends
(OffsetForLeaderEpoch) and truncates there, instead of to its high watermark, so acknowledged writes survive
back-to-back failovers (KIP-101, KIP-279).

The file is replaced whole (:func:`replace_file`). When the disk refuses it, memory goes ahead of the file and the
cache is *dirty*: :meth:`assign` saves again before it returns, and raises while it cannot, so no batch of an
epoch is ever appended before the file knows that epoch. Truncations save at once or leave the cache dirty; an
outdated file only ever lists epochs past the log end, which loading the log truncates again."""

from __future__ import annotations

import logging
import os
from bisect import bisect_right

from broker.log.storage_errors import incidents, log_dir_of, replace_file

log = logging.getLogger(__name__)

FILE = "leader-epoch-checkpoint"
UNDEFINED = -1


class EpochCache:
    def __init__(self, directory: str):
        self.path = os.path.join(directory, FILE)
        self.entries: list[tuple[int, int]] = []
        self.dirty = False  # memory holds entries the file does not (a save the disk refused)
        if os.path.exists(self.path):
            try:
                with open(self.path) as f:
                    lines = f.read().split("\n")
                count = int(lines[1]) if len(lines) > 1 and lines[1].strip() else 0
                for line in lines[2:2 + count]:
                    epoch, offset = line.split()
                    self.entries.append((int(epoch), int(offset)))
            except (ValueError, UnicodeDecodeError) as exc:  # a torn write (full disk): start over, as Kafka does
                log.warning("%s is unreadable (%s): leader epochs start empty", self.path, exc)
                self.entries = []

    @property
    def latest_epoch(self) -> int:
        return self.entries[-1][0] if self.entries else UNDEFINED

    def assign(self, epoch: int, start_offset: int) -> None:
        """Record that ``epoch`` starts at ``start_offset`` (a no-op for the memory unless it is a new, later
        epoch); returns once the file holds it. Raises OSError if the disk refuses: the entry stays in memory and
        the next call saves it again (callers append nothing until one succeeds)."""
        if epoch >= 0 and (not self.entries or epoch > self.entries[-1][0]):
            self.entries = [(e, o) for e, o in self.entries if o < start_offset]  # a new epoch overrides
            self.entries.append((epoch, start_offset))
            self.dirty = True
        if self.dirty:
            self._save()

    def end_offset_for(self, requested: int, log_end_offset: int) -> tuple[int, int]:
        """(epoch, end offset): the largest epoch <= ``requested`` and the offset where it ended (the start of
        the next epoch, or the log end offset for the latest). (-1, -1) when nothing is known."""
        if requested == UNDEFINED or not self.entries:
            return UNDEFINED, UNDEFINED
        if requested >= self.entries[-1][0]:
            return (self.entries[-1][0], log_end_offset) if requested == self.entries[-1][0] else \
                (UNDEFINED, UNDEFINED)
        epochs = [e for e, _ in self.entries]
        i = bisect_right(epochs, requested)  # entries[i] is the first epoch > requested
        if i == 0:
            return requested, self.entries[0][1]
        return self.entries[i - 1][0], self.entries[i][1]

    def truncate_from_end(self, end_offset: int) -> None:
        """The log was truncated to ``end_offset``: forget epochs that start at or after it."""
        kept = [(e, o) for e, o in self.entries if o < end_offset]
        if kept != self.entries:
            self.entries = kept
            self._save_or_warn()

    def truncate_from_start(self, start_offset: int) -> None:
        """Segments before ``start_offset`` were deleted: the epoch covering it now starts there."""
        if not self.entries or self.entries[0][1] >= start_offset:
            return
        kept = [(e, o) for e, o in self.entries if o > start_offset]
        covering = [(e, o) for e, o in self.entries if o <= start_offset][-1]
        self.entries = [(covering[0], start_offset), *kept]
        self._save_or_warn()

    def clear(self) -> None:
        self.entries = []
        self._save_or_warn()

    def _save_or_warn(self) -> None:
        """Saves after a truncation may fail (a full disk) without harm: the file then still holds entries past
        the new bounds, which loading the log truncates again; the next :meth:`assign` saves first."""
        self.dirty = True
        try:
            self._save()
        except OSError as exc:
            incidents.failed(self._site(), exc, self.path)

    def _save(self) -> None:
        replace_file(self.path, f"0\n{len(self.entries)}\n" + "".join(f"{e} {o}\n" for e, o in self.entries))
        self.dirty = False
        if incidents.any:
            incidents.succeeded(self._site())

    def _site(self) -> str:
        return f"leader-epoch checkpoints in {log_dir_of(os.path.dirname(self.path))}"
