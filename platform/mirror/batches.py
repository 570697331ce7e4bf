"""Whole-batch copying (the mirror's fast path): fetched record batches in, target record batches out, without a
Python object per record. No I/O.

A fetched partition's bytes are magic-2 batches. Control batches (transaction markers) and the batches of aborted
transactions (``read_committed``: the fetch response lists them) are dropped, as a ``read_committed`` consumer
drops them. Every other record is re-encoded once, straight from bytes to bytes: its key, value, timestamp and
own headers are kept; three provenance headers are appended (``logbus.mirror.source`` / ``.partition`` /
``.offset``, as the record path writes them); a record that already carries ``logbus.mirror.source`` is a
mirrored copy and is skipped (no loops). Offset deltas are renumbered 0..n-1 (a compacted source has gaps; the
target assigns its own offsets), so records of several source batches go into one target batch: Produce v3+
takes exactly one batch per partition; a target batch that reaches ``max_batch_bytes`` is closed and the next
record starts a new one, also in the middle of a source batch. A batch of LogAppendTime source records is copied
with their append time as the create time (what a consumer saw as the record's timestamp). Each target batch's
maxTimestamp is the largest timestamp of the records it holds (-1 if none is larger, as Kafka's batch builder
starts), taken from the records as they are written, never from a source header: it is the first timestamp plus
the largest timestamp delta written into the batch. Compressed source batches are decompressed and the target
batch is compressed with the same codec.

Cost: one pass over each record's fields. Compiled (:func:`broker.protocol.kernels.rewrite_mirrored`, numba):
about 0.3 µs a record, the source batch's records written into a scratch buffer in one native loop. In Python
(``LOGBUS_JIT=0``, or the source batches the kernel declines: it leaves every error and every rare input to this
code, which stays the reference): the varint walk of :mod:`broker.protocol.record_reader` and one ``bytearray``
append per field group, about 3 µs a record. Either way far below the record path's two client objects, a
callback and a produce call.
"""

from __future__ import annotations

import struct
import threading
from dataclasses import dataclass, field

import crc32c
import numpy as np

from broker.protocol import compression, kernels
from broker.protocol.batch_builder import varint
from broker.protocol.control import TIMESTAMP_TYPE, TRANSACTIONAL, committed_batches
from broker.protocol.record_reader import STORED_BATCH_CAP, _varint
from broker.protocol.records import HEADER_SIZE, InvalidRecord

SOURCE_HEADER, PARTITION_HEADER, OFFSET_HEADER = "logbus.mirror.source", "logbus.mirror.partition", \
    "logbus.mirror.offset"
_SOURCE_KEY = SOURCE_HEADER.encode()
_SOURCE_ARRAY = np.frombuffer(_SOURCE_KEY, np.uint8)
_AFTER_CRC = struct.Struct(">hiqqqhii")  # attributes .. record count
_BEFORE_CRC = struct.Struct(">qiibI")  # base offset, length, leader epoch, magic, crc
_ZZ = tuple(varint(i) for i in range(1 << 14))  # zigzag varints of small non-negative numbers (offset deltas)
_ZIGZAG = tuple((b >> 1) ^ -(b & 1) for b in range(0x80))
_SCRATCH = threading.local()
MAX_BATCH_BYTES = 900_000  # records bytes per target batch: under the default message.max.bytes (1 MiB)
_NO_DELTA = kernels.MIN_INT64  # the largest timestamp delta written into a target batch before any record


def _header(name: str, value: bytes) -> bytes:
    key = name.encode()
    return varint(len(key)) + key + varint(len(value)) + value


class Provenance:
    """The provenance headers of one source partition, encoded once."""

    def __init__(self, source_name: str, partition: int):
        self.constant = _header(SOURCE_HEADER, source_name.encode()) + _header(PARTITION_HEADER,
                                                                               str(partition).encode())
        self.offset_key = varint(len(OFFSET_HEADER)) + OFFSET_HEADER.encode()
        self.constant_array = np.frombuffer(self.constant, np.uint8)
        self.offset_key_array = np.frombuffer(self.offset_key, np.uint8)


@dataclass
class TargetBatch:
    records: bytearray = field(default_factory=bytearray)
    count: int = 0
    first_timestamp: int = -1
    max_timestamp: int = -1
    codec: int = 0
    last_source_offset: int = -1  # of the last record in it

    def encode(self, producer_id: int = -1, producer_epoch: int = -1, base_sequence: int = -1,
               transactional: bool = False) -> bytes:
        return b"".join(self.encode_parts(producer_id, producer_epoch, base_sequence, transactional))

    def encode_parts(self, producer_id: int = -1, producer_epoch: int = -1, base_sequence: int = -1,
                     transactional: bool = False) -> list:
        """The batch as [its 61-byte header, its records]: the records are not copied (the CRC runs over the two
        pieces in turn). Nothing may change ``records`` afterwards."""
        body = self.records
        attributes = TRANSACTIONAL if transactional else 0
        if self.codec:
            body = compression.compress(self.codec, bytes(body))
            attributes |= self.codec
        fields = _AFTER_CRC.pack(attributes, self.count - 1, self.first_timestamp, self.max_timestamp, producer_id,
                                 producer_epoch, base_sequence, self.count)
        crc = crc32c.crc32c(body, crc32c.crc32c(fields))
        return [_BEFORE_CRC.pack(0, 4 + 1 + 4 + len(fields) + len(body), -1, 2, crc) + fields, body]


@dataclass
class Copied:
    """The target batches made from one fetched partition, and what it consumed."""

    batches: list[TargetBatch]
    next_offset: int  # the source position after everything examined (fetch from here next)
    records: int = 0
    skipped_loops: int = 0
    value_bytes: int = 0  # keys + values of the copied records


def copy_fetched(data, position: int, aborted: list[tuple[int, int]], provenance: Provenance,
                 max_batch_bytes: int = MAX_BATCH_BYTES) -> Copied:
    """Rewrite the whole batches of one fetched partition from ``position`` on. ``aborted``: the response's
    (producer id, first offset) of aborted transactions. Raises InvalidRecord/InvalidBatch for bytes that do not
    parse (a corrupt source)."""
    batches, next_offset = committed_batches(data, position, aborted)
    out = Copied([], next_offset)
    current: TargetBatch | None = None
    for header, batch in batches:
        codec = header.compression
        body = compression.decompress(codec, batch[HEADER_SIZE:], STORED_BATCH_CAP) if codec else batch[HEADER_SIZE:]
        log_append = bool(header.attributes & TIMESTAMP_TYPE)
        if current is None or len(current.records) >= max_batch_bytes:
            current = TargetBatch(codec=codec)
            out.batches.append(current)
        current = _rewrite(body, header, position, log_append, provenance, out, current, max_batch_bytes)
    out.batches = [b for b in out.batches if b.count]
    return out


def _rewrite(body, header, position: int, log_append: bool, provenance: Provenance, out: Copied,
             current: TargetBatch, max_batch_bytes: int) -> TargetBatch:
    """Append the records of one source batch to ``current`` (starting new target batches when full): compiled
    (:func:`broker.protocol.kernels.rewrite_mirrored`) when it can, else (or when the kernel declines the bytes)
    in Python."""
    if kernels.ENABLED:
        done = _rewrite_compiled(body, header, position, log_append, provenance, out, current, max_batch_bytes)
        if done is not None:
            return done
    return _rewrite_python(body, header, position, log_append, provenance, out, current, max_batch_bytes)


def _rewrite_compiled(body, header, position: int, log_append: bool, provenance: Provenance, out: Copied,
                      current: TargetBatch, max_batch_bytes: int) -> TargetBatch | None:
    """:func:`_rewrite` by the kernel; None (and everything as it was) when the kernel declines the batch."""
    source_first_ts = header.max_timestamp if log_append else header.base_timestamp
    first = current
    before = (len(current.records), current.count, current.first_timestamp, current.max_timestamp, current.codec,
              current.last_source_offset, len(out.batches), out.records, out.skipped_loops, out.value_bytes)
    if current.count == 0:
        current.first_timestamp = source_first_ts
        if current.codec == 0:
            current.codec = header.compression
    shift = source_first_ts - current.first_timestamp
    if not -kernels.LIMIT <= shift <= kernels.LIMIT:
        _restore(first, out, before)
        return None
    source = np.frombuffer(body, np.uint8)
    records = min(header.record_count, len(source) // 7 + 1)  # a record takes at least 7 bytes
    buffer = _scratch(len(source) + max(records, 0) * (kernels.GROWTH + len(provenance.constant)
                                                       + len(provenance.offset_key)))
    state = np.zeros(kernels.STATE_SIZE, np.int64)
    state[kernels.REMAINING] = header.record_count
    state[kernels.COUNT] = current.count
    state[kernels.LAST_OFFSET] = current.last_source_offset
    state[kernels.MAX_TS_DELTA] = _NO_DELTA
    copied_before = 0
    while True:
        status = kernels.rewrite_mirrored(source, header.base_offset, position, log_append, shift,
                                          np.frombuffer(varint(shift), np.uint8), provenance.constant_array,
                                          provenance.offset_key_array, _SOURCE_ARRAY, buffer,
                                          max_batch_bytes - len(current.records), state)
        if status == kernels.BAD:
            _restore(first, out, before)
            return None
        current.records += buffer[: state[kernels.WRITTEN]].data
        current.count = int(state[kernels.COUNT])
        current.last_source_offset = int(state[kernels.LAST_OFFSET])
        if status == kernels.OK:
            break
        _raise_max_timestamp(current, int(state[kernels.MAX_TS_DELTA]))  # FULL: the next target batch
        out.records += int(state[kernels.COPIED]) - copied_before
        copied_before = int(state[kernels.COPIED])
        current = TargetBatch(codec=current.codec, first_timestamp=source_first_ts)
        out.batches.append(current)
        shift = 0
        state[kernels.WRITTEN] = 0
        state[kernels.COUNT] = 0
        state[kernels.MAX_TS_DELTA] = _NO_DELTA
    _raise_max_timestamp(current, int(state[kernels.MAX_TS_DELTA]))
    out.records += int(state[kernels.COPIED]) - copied_before
    out.skipped_loops += int(state[kernels.SKIPPED])
    out.value_bytes += int(state[kernels.VALUE_BYTES])
    return current


def _scratch(size: int) -> np.ndarray:
    """This thread's output buffer for the kernel, at least ``size`` bytes: kept, not allocated per batch (a fresh
    buffer of a batch's size is an mmap, and touching it page faults)."""
    buffer = getattr(_SCRATCH, "buffer", None)
    if buffer is None or len(buffer) < size:
        buffer = _SCRATCH.buffer = np.empty(max(size, 1 << 20), np.uint8)
    return buffer


def _raise_max_timestamp(batch: TargetBatch, max_ts_delta: int) -> None:
    """Raise ``batch.max_timestamp`` to the largest timestamp of the records just written into it: its first
    timestamp plus ``max_ts_delta``, the largest timestamp delta written (``_NO_DELTA``: none, nothing changes).
    At most the int64 maximum (only a source whose timestamps run past 64 bits gets there)."""
    ts = batch.first_timestamp + max_ts_delta
    if ts > batch.max_timestamp:
        batch.max_timestamp = min(ts, kernels.MAX_INT64)


def _restore(current: TargetBatch, out: Copied, before: tuple) -> None:
    (size, current.count, current.first_timestamp, current.max_timestamp, current.codec, current.last_source_offset,
     batches, out.records, out.skipped_loops, out.value_bytes) = before
    del current.records[size:]
    del out.batches[batches:]


def _rewrite_python(body, header, position: int, log_append: bool, provenance: Provenance, out: Copied,
                    current: TargetBatch, max_batch_bytes: int) -> TargetBatch:
    """Append the records of one source batch to ``current`` (starting new target batches when full)."""
    zz, zigzag = _ZZ, _ZIGZAG
    constant, offset_key = provenance.constant, provenance.offset_key
    base_offset = header.base_offset
    source_first_ts = header.max_timestamp if log_append else header.base_timestamp
    if current.count == 0:
        current.first_timestamp = source_first_ts
        if current.codec == 0:
            current.codec = header.compression
    shift = source_first_ts - current.first_timestamp
    appended_ts = varint(shift)  # the timestamp delta of every record of a LogAppendTime batch
    records = current.records
    count = current.count
    max_ts_delta = _NO_DELTA  # of the records written into ``current`` here
    value_bytes = skipped = copied = 0
    pos = 0
    end_of_body = len(body)
    try:
        for _ in range(header.record_count):
            b = body[pos]
            if b < 0x80:
                length = zigzag[b]
                pos += 1
            else:
                length, pos = _varint(body, pos, 5)
            end = pos + length
            if end > end_of_body or length < 6:
                raise InvalidRecord("record length does not fit the batch")
            attributes_at = pos
            pos += 1
            b = body[pos]
            if b < 0x80:
                ts_delta = zigzag[b]
                pos += 1
            else:
                ts_delta, pos = _varint(body, pos, 10)
            ts_end = pos
            b = body[pos]
            if b < 0x80:
                offset_delta = zigzag[b]
                pos += 1
            else:
                offset_delta, pos = _varint(body, pos, 5)
            key_at = pos
            b = body[pos]
            if b < 0x80:
                key_length = zigzag[b]
                pos += 1
            else:
                key_length, pos = _varint(body, pos, 5)
            if key_length > 0:
                pos += key_length
            b = body[pos]
            if b < 0x80:
                value_length = zigzag[b]
                pos += 1
            elif (c := body[pos + 1]) < 0x80:
                b = (b & 0x7F) | c << 7
                value_length = (b >> 1) ^ -(b & 1)
                pos += 2
            else:
                value_length, pos = _varint(body, pos, 5)
            if value_length > 0:
                pos += value_length
            headers_at = pos
            b = body[pos]
            if b == 0:
                header_count, own_headers = 0, pos + 1
            else:
                header_count, own_headers = _varint(body, pos, 5)
            if pos >= end or own_headers > end:
                raise InvalidRecord("record fields run past its length")
            offset = base_offset + offset_delta
            if offset < position:
                pos = end
                continue
            if header_count and _has_source_header(body, own_headers, end, header_count):
                skipped += 1
                pos = end
                continue
            if len(records) >= max_batch_bytes:
                current.count = count
                _raise_max_timestamp(current, max_ts_delta)
                out.records += copied
                current = TargetBatch(codec=current.codec, first_timestamp=source_first_ts)
                out.batches.append(current)
                records, count, shift, copied, appended_ts = current.records, 0, 0, 0, b"\x00"
                max_ts_delta = _NO_DELTA
            offset_text = str(offset).encode()
            delta = zz[count] if count < 16384 else varint(count)
            if log_append:
                timestamp = appended_ts
                written_ts_delta = shift
            elif shift:
                written_ts_delta = ts_delta + shift
                timestamp = varint(written_ts_delta)
            else:
                timestamp = None
                written_ts_delta = ts_delta
            if written_ts_delta > max_ts_delta:
                max_ts_delta = written_ts_delta
            inner = (1 + (len(timestamp) if timestamp is not None else ts_end - attributes_at - 1) + len(delta)
                     + headers_at - key_at + (1 if header_count < 61 else len(varint(header_count + 3)))
                     + end - own_headers + len(constant) + len(offset_key) + 1 + len(offset_text))
            records += zz[inner] if inner < 16384 else varint(inner)
            if timestamp is None:
                records += body[attributes_at:ts_end]
            else:
                records += body[attributes_at:attributes_at + 1]
                records += timestamp
            records += delta
            records += body[key_at:headers_at]
            records += zz[header_count + 3] if header_count < 16381 else varint(header_count + 3)
            records += body[own_headers:end]
            records += constant
            records += offset_key
            records += zz[len(offset_text)]
            records += offset_text
            count += 1
            copied += 1
            value_bytes += max(key_length, 0) + max(value_length, 0)
            current.last_source_offset = offset
            pos = end
    except IndexError:
        raise InvalidRecord("fewer records than the batch declares") from None
    current.count = count
    _raise_max_timestamp(current, max_ts_delta)
    out.records += copied
    out.skipped_loops += skipped
    out.value_bytes += value_bytes
    return current


def _has_source_header(body, pos: int, end: int, count: int) -> bool:
    for _ in range(count):
        key_length, pos = _varint(body, pos, 5)
        if key_length < 0 or pos + key_length > end:
            raise InvalidRecord("header key runs past the record")
        if body[pos: pos + key_length] == _SOURCE_KEY:
            return True
        pos += key_length
        value_length, pos = _varint(body, pos, 5)
        if value_length > 0:
            pos += value_length
    return False
