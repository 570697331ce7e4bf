"""One segment of a partition log: ``<base offset, 20 digits>.log`` plus its ``.index`` and ``.timeindex``.

The ``.log`` file is a plain concatenation of record batches exactly as producers sent them, with base offset
and leader epoch patched. Reads never parse records: they locate a batch boundary through the sparse offset
index plus a short scan of 12-byte batch prefixes, and return a file region for sendfile.

Appends are all or nothing. ``size`` is the end of the last whole batch; a write the disk refuses or shortens
is cut back to it at once. If the disk refuses even that (EIO), the bytes past ``size`` are never served, the
segment is marked torn and cut again before the next append or flush, which raise until it can be (so neither
a new batch lands behind the torn bytes nor does a clean shutdown vouch for them: the next start recovers).
Not thread-safe: the broker's event loop owns every segment.
"""

from __future__ import annotations

import errno
import logging
import os
import struct
import time
from dataclasses import dataclass

from broker.log.index import CorruptIndex, OffsetIndex, TimeIndex
from broker.protocol import records

log = logging.getLogger(__name__)

_SCAN = struct.Struct(">qiibIhi")  # base offset .. lastOffsetDelta (27 bytes)
_IOV_MAX = 1024


def file_name(base_offset: int, suffix: str) -> str:
    return f"{base_offset:020d}{suffix}"


@dataclass(frozen=True, slots=True)
class FileRegion:
    """Bytes ``[position, position + size)`` of an open segment file, to send as they are."""

    fd: int
    position: int
    size: int

    def read(self) -> bytes:
        return os.pread(self.fd, self.size, self.position)


class LogSegment:
    def __init__(self, directory: str, base_offset: int, index_interval: int):
        self.dir = directory
        self.base_offset = base_offset
        self.index_interval = index_interval
        self.path = os.path.join(directory, file_name(base_offset, ".log"))
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        offset_index = None
        try:
            offset_index = OffsetIndex(os.path.join(directory, file_name(base_offset, ".index")), base_offset)
            self.time_index = TimeIndex(os.path.join(directory, file_name(base_offset, ".timeindex")), base_offset)
        except BaseException:
            if offset_index is not None:
                offset_index.close()
            os.close(self.fd)
            raise
        self.offset_index = offset_index
        self.size = os.fstat(self.fd).st_size
        self.next_offset = base_offset
        self.max_timestamp = -1
        self.first_append_ms: int | None = None
        self._bytes_since_index = 0
        self._torn = False  # bytes past ``size`` that could not be cut off yet

    @classmethod
    def create(cls, directory: str, base_offset: int, index_interval: int) -> "LogSegment":
        """A new, empty segment (a roll); if the disk refuses one of its files, none of them is left behind."""
        paths = [os.path.join(directory, file_name(base_offset, suffix)) for suffix in (".log", ".index",
                                                                                         ".timeindex")]
        new = [p for p in paths if not os.path.exists(p)]
        try:
            return cls(directory, base_offset, index_interval)
        except OSError:
            for path in new:
                try:
                    os.unlink(path)
                except OSError:
                    pass
            raise

    # ---- loading and recovery -------------------------------------------------------------------------------
    def load(self) -> None:
        """Trust the indexes (clean shutdown); find the next offset from the last indexed batch onwards."""
        try:
            self.offset_index.load()
            self.time_index.load()
            if self.offset_index.last_position > self.size:
                raise CorruptIndex("index points past the end of the log")
        except CorruptIndex as exc:
            log.warning("rebuilding index of %s: %s", self.path, exc)
            self.recover()
            return
        pos = self.offset_index.last_position
        self.max_timestamp = self.time_index.max_timestamp
        while pos < self.size:
            head = os.pread(self.fd, records.HEADER_SIZE, pos)
            if len(head) < records.HEADER_SIZE:
                break
            header = records.read_header(head)
            self.next_offset = header.next_offset
            self.max_timestamp = max(self.max_timestamp, header.max_timestamp)
            pos += header.size
        self.first_append_ms = int(os.stat(self.path).st_mtime * 1000) if self.size else None

    def recover(self, max_batch_bytes: int = 2**31 - 1) -> int:
        """Rebuild both indexes from the log, checking every batch's CRC; truncate a torn or corrupt tail.

        Returns the number of bytes truncated.
        """
        self.offset_index.reset()
        self.time_index.reset()
        self.next_offset = self.base_offset
        self.max_timestamp = -1
        self._bytes_since_index = 0
        pos = 0
        while pos < self.size:
            head = os.pread(self.fd, records.HEADER_SIZE, pos)
            if len(head) < records.HEADER_SIZE:
                break
            header = records.read_header(head)
            if (
                header.magic != 2
                or header.length < records.HEADER_SIZE - records.LOG_OVERHEAD
                or pos + header.size > self.size
                or header.size > max_batch_bytes
                or header.base_offset < self.next_offset
            ):
                break
            data = os.pread(self.fd, header.size, pos)
            if not records.crc_ok(data, 0, header.size):
                break
            self._index_batch(header.base_offset, pos, header.size, header.max_timestamp)
            self.next_offset = header.next_offset
            pos += header.size
        truncated = self.size - pos
        if truncated:
            log.warning("recovery: truncating %d bytes of torn or corrupt data from %s", truncated, self.path)
            os.ftruncate(self.fd, pos)
            self.size = pos
        self.first_append_ms = int(os.stat(self.path).st_mtime * 1000) if self.size else None
        return truncated

    def truncate_to(self, offset: int) -> int:
        """Drop every batch whose last offset is >= ``offset`` (a follower discarding a divergent tail), then
        rebuild the indexes. Returns the bytes dropped."""
        found = self.find_batch(offset, self.size)
        if found is None:
            return 0
        position = found[0]
        dropped = self.size - position
        os.ftruncate(self.fd, position)
        self.size = position
        self._torn = False
        self.recover()
        return dropped

    # ---- writes -------------------------------------------------------------------------------------------
    def append(self, parts: list, size: int, base_offset: int, next_offset: int, max_timestamp: int,
               batches: list | None = None) -> None:
        """Append whole batches (offsets already assigned), given as buffers totalling ``size`` bytes, in one
        ``writev``. One index entry at most per call, or per batch of ``batches`` ((base offset, size, max
        timestamp) of each: a run of requests indexed as if appended one by one). All or nothing: raises OSError
        with the file cut back."""
        if self._torn:
            self.repair()
        position = self.size
        if len(parts) > _IOV_MAX:
            parts = [b"".join(parts)]
        try:
            written = os.writev(self.fd, parts)
        except OSError:
            self._cut(position)  # a refused writev may still have stored part of the data (EIO mid-way)
            raise
        if written != size:  # a short write on a regular file means the disk is full
            self._cut(position)
            raise OSError(errno.ENOSPC, f"short write to {self.path} ({written} of {size} bytes): disk full")
        if self.first_append_ms is None:
            self.first_append_ms = int(time.time() * 1000)
        if batches is None:
            self._index_batch(base_offset, position, size, max_timestamp)
        else:
            for offset, batch_size, timestamp in batches:
                self._index_batch(offset, position, batch_size, timestamp)
                position += batch_size
        self.size += size
        self.next_offset = next_offset

    def _index_batch(self, base_offset: int, position: int, size: int, max_timestamp: int) -> None:
        if self._bytes_since_index >= self.index_interval or not len(self.offset_index):
            self.offset_index.append(base_offset, position)
            self._bytes_since_index = 0
        self._bytes_since_index += size
        if max_timestamp > self.max_timestamp:
            self.max_timestamp = max_timestamp
            self.time_index.append(max_timestamp, base_offset)

    def _cut(self, position: int) -> None:
        try:
            os.ftruncate(self.fd, position)
        except OSError as exc:
            log.error("%s: cannot cut a refused write back to %d bytes (%s): appends wait until it can be",
                      self.path, position, exc)
            self._torn = True

    def repair(self) -> None:
        """Cut bytes a refused write left past ``size``; raises OSError while the disk refuses it."""
        if self._torn:
            os.ftruncate(self.fd, self.size)
            self._torn = False
            log.info("%s: torn bytes cut off; appends resume", self.path)

    def mark(self) -> tuple:
        """The append state now, for :meth:`rollback`."""
        return (self.size, self.next_offset, self.max_timestamp, self.first_append_ms, self._bytes_since_index,
                len(self.offset_index), len(self.time_index))

    def rollback(self, mark: tuple) -> None:
        """Undo the appends made since ``mark`` (their flush was refused): file, indexes and offsets as they were.
        Never raises: what cannot be cut off yet is marked torn (see the module docstring)."""
        (size, self.next_offset, self.max_timestamp, self.first_append_ms, self._bytes_since_index, offsets,
         times) = mark
        self.offset_index.truncate_to_entries(offsets)
        self.time_index.truncate_to_entries(times)
        self.size = size
        self._cut(size)

    def flush(self) -> None:
        self.repair()
        os.fsync(self.fd)
        self.offset_index.flush()
        self.time_index.flush()

    # ---- reads --------------------------------------------------------------------------------------------
    def find_batch(self, offset: int, end_position: int) -> tuple[int, int] | None:
        """(position, size) of the batch containing ``offset`` (or the first batch after it), below
        ``end_position``; None if there is none."""
        pos = self.offset_index.lookup(offset)
        while pos < end_position:
            head = os.pread(self.fd, _SCAN.size, pos)
            if len(head) < _SCAN.size:
                return None
            base, length, _epoch, _magic, _crc, _attrs, last_delta = _SCAN.unpack(head)
            size = length + records.LOG_OVERHEAD
            if base + last_delta >= offset:
                return pos, size
            pos += size
        return None

    def read(self, offset: int, max_bytes: int, end_position: int | None = None) -> FileRegion | None:
        """Bytes from the batch containing ``offset``: at most ``max_bytes``, but always one whole batch
        (KIP-74). The region may end inside a batch; clients drop a partial trailing batch."""
        end = self.size if end_position is None else end_position
        found = self.find_batch(offset, end)
        if found is None:
            return None
        pos, first_size = found
        size = min(end - pos, max(max_bytes, first_size))
        return FileRegion(self.fd, pos, size)

    def headers_from(self, offset: int):
        """Batch headers from the batch containing ``offset`` to the end of the segment (recovery scans)."""
        found = self.find_batch(offset, self.size)
        pos = found[0] if found else self.size
        while pos < self.size:
            head = os.pread(self.fd, records.HEADER_SIZE, pos)
            if len(head) < records.HEADER_SIZE:
                return
            header = records.read_header(head)
            yield header
            pos += header.size

    def find_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        """(position, size) of the first batch whose max timestamp is >= ``timestamp``, or None."""
        if self.max_timestamp < timestamp:
            return None
        start = self.time_index.lookup(timestamp)
        pos = self.offset_index.lookup(start)
        while pos < self.size:
            header = records.read_header(os.pread(self.fd, records.HEADER_SIZE, pos))
            if header.max_timestamp >= timestamp:
                return pos, header.size
            pos += header.size
        return None

    # ---- lifecycle ----------------------------------------------------------------------------------------
    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
        self.offset_index.close()
        self.time_index.close()

    def delete(self) -> None:
        self.close()
        for path in (self.path, self.offset_index.path, self.time_index.path):
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass
