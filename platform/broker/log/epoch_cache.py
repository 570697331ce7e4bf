"""The leader epoch cache of a partition: (leader epoch, first offset written in that epoch), kept in the
partition directory as ``leader-epoch-checkpoint`` in Kafka's format (version, count, then ``epoch offset``
lines). A follower that becomes one after a leader change asks the new leader where its own latest epoch ends
(OffsetForLeaderEpoch) and truncates there, instead of to its high watermark, so acknowledged writes survive
back-to-back failovers (KIP-101, KIP-279)."""

from __future__ import annotations

import logging
import os
from bisect import bisect_right

log = logging.getLogger(__name__)

FILE = "leader-epoch-checkpoint"
UNDEFINED = -1


class EpochCache:
    def __init__(self, directory: str):
        self.path = os.path.join(directory, FILE)
        self.entries: list[tuple[int, int]] = []
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
        """Record that ``epoch`` starts at ``start_offset`` (no-op unless it is a new, later epoch)."""
        if epoch < 0 or (self.entries and epoch <= self.entries[-1][0]):
            return
        entries = [(e, o) for e, o in self.entries if o < start_offset]  # a new epoch overrides
        entries.append((epoch, start_offset))
        self._save(entries)  # first: if the disk refuses it, memory still matches the file and a retry saves
        self.entries = entries

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
        self._save()

    def _save_or_warn(self) -> None:
        """Saves after a truncation may fail (a full disk) without harm: the file then still holds entries past
        the new bounds, and loading the log truncates them again."""
        try:
            self._save()
        except OSError as exc:
            log.warning("%s not rewritten (%s); it is truncated again at the next start", self.path, exc)

    def _save(self, entries: list[tuple[int, int]] | None = None) -> None:
        entries = self.entries if entries is None else entries
        tmp = self.path + ".tmp"
        with open(tmp, "w") as f:
            f.write(f"0\n{len(entries)}\n" + "".join(f"{e} {o}\n" for e, o in entries))
        os.replace(tmp, self.path)
