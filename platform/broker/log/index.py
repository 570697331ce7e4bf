"""Sparse per-segment indexes, Kafka's on-disk formats.

``OffsetIndex`` (``.index``): 8-byte entries, ``int32 relative offset, int32 file position``, where the
relative offset is a batch's base offset minus the segment's base offset and the position is where that batch
starts in the ``.log`` file. ``TimeIndex`` (``.timeindex``): 12-byte entries, ``int64 timestamp, int32
relative offset``: the largest timestamp seen so far and the base offset of the batch that carried it.

Entries are appended at most once per ``log.index.interval.bytes`` of log data, so both are sparse. Both are
kept whole in memory (arrays, bisected on lookup) and appended to their file; they are rebuilt from the log
by recovery after an unclean stop, and a file whose size is not a whole number of entries, or whose entries are
out of order, is refused (``CorruptIndex``) so the caller rebuilds it.

Appending an entry never raises: an entry whose relative offset or position does not fit its 32-bit field is
skipped (the log rolls a new segment before that can happen to new data, as Kafka's ``LogSegment`` does; only a
segment written before that rule can hold such offsets), and a write the disk refuses is undone by truncating
the file back to its last whole entry. Both only make the index sparser; lookups stay correct because readers
scan forward from the entry they find. If even that truncation fails, the file is marked torn: no entry is
appended after the partial one until a later truncation succeeds, and :meth:`flush` raises meanwhile (so a clean
shutdown does not vouch for the file and the next start rebuilds it). Not thread-safe: the event loop owns them.
"""

from __future__ import annotations

import errno
import logging
import os
import struct
from array import array
from bisect import bisect_right


log = logging.getLogger(__name__)
INT32_MAX = 2**31 - 1


class CorruptIndex(ValueError):
    pass


class _Index:
    ENTRY: struct.Struct

    def __init__(self, path: str, base_offset: int):
        self.path = path
        self.base_offset = base_offset
        self.keys = array("q")  # offsets (OffsetIndex) or timestamps (TimeIndex), ascending
        self.values = array("q")
        self._warned = False
        self._write_warned = False
        self._torn = False  # the file may end with part of an entry that could not be cut off yet
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)

    def load(self) -> None:
        size = os.fstat(self._fd).st_size
        if size % self.ENTRY.size:
            raise CorruptIndex(f"{self.path}: size {size} is not a multiple of {self.ENTRY.size}")
        data = os.pread(self._fd, size, 0)
        previous = None
        for key, value in self._decode(data):
            if previous is not None and key < previous:
                raise CorruptIndex(f"{self.path}: entries out of order")
            previous = key
            self.keys.append(key)
            self.values.append(value)

    def _write(self, entry: bytes) -> bool:
        """Append one entry to the file; on a refused or short write, cut the file back to whole entries."""
        if self._torn and not self._cut():
            return False
        try:
            if os.write(self._fd, entry) == len(entry):
                return True
            exc = OSError("short write")
        except OSError as refused:
            exc = refused
        if not self._write_warned:  # once per file: the segment append reports the incident itself
            log.warning("%s: index entry not written (%s); the index stays sparser", self.path, exc)
            self._write_warned = True
        self._cut()
        return False

    def _cut(self) -> bool:
        """Cut the file back to the entries in memory; False (the file stays marked torn) if the disk refuses."""
        try:
            os.ftruncate(self._fd, len(self.keys) * self.ENTRY.size)
        except OSError:
            self._torn = True  # until cut, load() refuses the file (size) and the index is rebuilt from the log
            return False
        self._torn = False
        return True

    def _skipped(self, relative: int, position: int) -> bool:
        if 0 <= relative <= INT32_MAX and 0 <= position <= INT32_MAX:
            return False
        if not self._warned:
            log.warning("%s: entry (relative offset %d, value %d) does not fit 32 bits: not indexed", self.path,
                        relative, position)
            self._warned = True
        return True

    def reset(self) -> None:
        os.ftruncate(self._fd, 0)
        self.keys = array("q")
        self.values = array("q")
        self._torn = False

    def truncate_to_entries(self, count: int) -> None:
        """Keep the first ``count`` entries. Never raises: a file that cannot be cut yet is marked torn."""
        del self.keys[count:]
        del self.values[count:]
        self._cut()

    def __len__(self) -> int:
        return len(self.keys)

    def floor(self, key: int) -> int:
        """Index of the last entry with key <= ``key``, or -1."""
        return bisect_right(self.keys, key) - 1

    def flush(self) -> None:
        if self._torn and not self._cut():
            raise OSError(errno.EIO, f"{self.path} ends with part of an entry that cannot be cut off")
        os.fsync(self._fd)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def delete(self) -> None:
        self.close()
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass


class OffsetIndex(_Index):
    ENTRY = struct.Struct(">ii")

    def _decode(self, data: bytes):
        for rel, pos in self.ENTRY.iter_unpack(data):
            yield self.base_offset + rel, pos

    def append(self, offset: int, position: int) -> None:
        if self.keys and offset <= self.keys[-1]:
            return
        relative = offset - self.base_offset
        if self._skipped(relative, position) or not self._write(self.ENTRY.pack(relative, position)):
            return
        self.keys.append(offset)
        self.values.append(position)

    def lookup(self, offset: int) -> int:
        """File position of the last indexed batch starting at or before ``offset`` (0 if none)."""
        i = self.floor(offset)
        return 0 if i < 0 else self.values[i]

    @property
    def last_position(self) -> int:
        return self.values[-1] if self.values else 0


class TimeIndex(_Index):
    ENTRY = struct.Struct(">qi")

    def _decode(self, data: bytes):
        for ts, rel in self.ENTRY.iter_unpack(data):
            yield ts, self.base_offset + rel

    def append(self, timestamp: int, offset: int) -> None:
        if self.keys and timestamp <= self.keys[-1]:
            return
        relative = offset - self.base_offset
        if not -2**63 <= timestamp < 2**63 or self._skipped(relative, 0):
            return
        if not self._write(self.ENTRY.pack(timestamp, relative)):
            return
        self.keys.append(timestamp)
        self.values.append(offset)

    def lookup(self, timestamp: int) -> int:
        """Base offset of a batch at or before the first one with a timestamp >= ``timestamp``."""
        i = bisect_right(self.keys, timestamp - 1) - 1
        return self.base_offset if i < 0 else self.values[i]

    @property
    def max_timestamp(self) -> int:
        return self.keys[-1] if self.keys else -1
