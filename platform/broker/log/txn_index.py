"""The aborted transactions of one partition (Kafka's transaction index, one file per partition here:
``aborted-transactions.index`` in the partition's directory).

Entry (34 bytes, Kafka's ``AbortedTxn`` layout): int16 version 0, producer id int64, first offset int64, last
offset int64 (the abort marker), last stable offset int64 (when the marker was written). A ``read_committed``
Fetch lists the (producer id, first offset) of every aborted transaction that overlaps what it returns; the
consumer drops that producer's records from the first offset up to the marker.

The file is append-only; truncation (a follower's diverged tail) and retention (entries wholly below the log
start) rewrite it whole (:func:`replace_file`). After a crash, entries whose marker was written but not indexed
are added back by the producer-state rebuild (:meth:`add` ignores an entry it already has).
"""

from __future__ import annotations

import os
import struct
from bisect import bisect_left
from dataclasses import dataclass

from broker.log.storage_errors import replace_file

FILE_NAME = "aborted-transactions.index"
_ENTRY = struct.Struct(">hqqqq")


@dataclass(frozen=True, slots=True)
class AbortedTxn:
    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int


class TxnIndex:
    def __init__(self, directory: str):
        self.path = os.path.join(directory, FILE_NAME)
        self.entries: list[AbortedTxn] = []  # sorted by last offset (markers are appended in offset order)
        self._lasts: list[int] = []
        try:
            with open(self.path, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            return
        for pos in range(0, len(data) - len(data) % _ENTRY.size, _ENTRY.size):  # a torn last entry is dropped
            version, pid, first, last, lso = _ENTRY.unpack_from(data, pos)
            if version == 0 and (not self._lasts or last > self._lasts[-1]):
                self.entries.append(AbortedTxn(pid, first, last, lso))
                self._lasts.append(last)

    def add(self, entry: AbortedTxn) -> None:
        """Append (OSError: nothing changed). An entry at or below the last one's marker is already there."""
        if self._lasts and entry.last_offset <= self._lasts[-1]:
            return
        size = len(self.entries) * _ENTRY.size
        try:
            with open(self.path, "ab") as f:
                f.write(_ENTRY.pack(0, entry.producer_id, entry.first_offset, entry.last_offset,
                                    entry.last_stable_offset))
        except OSError:
            try:  # no torn entry left behind: later appends stay aligned
                os.truncate(self.path, size)
            except OSError:
                pass
            raise
        self.entries.append(entry)
        self._lasts.append(entry.last_offset)

    def collect(self, fetch_offset: int, upper_offset: int) -> list[AbortedTxn]:
        """Entries whose marker is at or after ``fetch_offset`` and whose first offset is below ``upper_offset``."""
        return [e for e in self.entries[bisect_left(self._lasts, fetch_offset):] if e.first_offset < upper_offset]

    def truncate_to(self, offset: int) -> None:
        """Forget aborts whose marker is at or after ``offset`` (the log was cut there)."""
        keep = bisect_left(self._lasts, offset)
        if keep < len(self.entries):
            self._rewrite(self.entries[:keep])

    def drop_before(self, log_start_offset: int) -> None:
        """Forget aborts whose marker is below the log start (their records are gone)."""
        drop = bisect_left(self._lasts, log_start_offset)
        if drop:
            self._rewrite(self.entries[drop:])

    def clear(self) -> None:
        self._rewrite([])

    def _rewrite(self, entries: list[AbortedTxn]) -> None:
        replace_file(self.path, b"".join(_ENTRY.pack(0, e.producer_id, e.first_offset, e.last_offset,
                                                      e.last_stable_offset) for e in entries), fsync=False)
        self.entries = list(entries)
        self._lasts = [e.last_offset for e in entries]
