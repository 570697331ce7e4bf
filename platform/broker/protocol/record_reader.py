"""The records inside a batch (Kafka's ``DefaultRecord``), parsed with bounds: produce validation, ListOffsets
by timestamp and the cleaner read them here; the produce/fetch hot paths only touch batch headers.

A record, after the batch header (all varints zigzag-encoded, Kafka's ``ByteUtils``)::

    length varint | attributes int8 | timestampDelta varlong | offsetDelta varint
    keyLength varint | key | valueLength varint | value | headerCount varint
    headerCount x (headerKeyLength varint | headerKey | headerValueLength varint | headerValue)

Every field must lie within the record's declared ``length`` and every record within the batch; the batch
holds exactly ``recordCount`` records and nothing after them. Anything else raises
:class:`~records.InvalidRecord` (Kafka: "Found invalid record structure", "Incorrect declared batch size").
A varint is at most 5 bytes, a varlong 10. Work is bounded by the bytes at hand: parsing stops at the declared
count, a header count larger than the bytes left could hold is refused before looping, and payloads are
decompressed by :mod:`compression` with a cap.
"""

from __future__ import annotations

import struct

import crc32c

from broker.protocol import compression
from broker.protocol.records import HEADER_SIZE, InvalidRecord, read_header

_ZIGZAG = tuple((b >> 1) ^ -(b & 1) for b in range(0x80))  # one-byte varints, decoded
MIN_RECORD_SIZE = 7  # length, attributes, timestamp delta, offset delta, key length, value length, header count
STORED_BATCH_CAP = 64 << 20  # decompression cap for batches already in the log (written under message.max.bytes)


def _varint(buf, pos: int, limit: int) -> tuple[int, int]:
    """A zigzag varint of at most ``limit`` bytes at ``pos``: (value, position after it)."""
    byte = buf[pos]
    raw = byte & 0x7F
    if byte < 0x80:
        return (raw >> 1) ^ -(raw & 1), pos + 1
    byte = buf[pos + 1]
    if byte < 0x80:  # two bytes: lengths of 64..8191, the next most common case
        raw |= byte << 7
        return (raw >> 1) ^ -(raw & 1), pos + 2
    raw |= (byte & 0x7F) << 7
    pos += 2
    shift = 14
    for _ in range(limit - 2):
        byte = buf[pos]
        pos += 1
        raw |= (byte & 0x7F) << shift
        if byte < 0x80:
            return (raw >> 1) ^ -(raw & 1), pos
        shift += 7
    raise InvalidRecord("varint longer than its type allows")


def iter_records(body: bytes, count: int):
    """Yield ``(start, end, timestamp_delta, offset_delta, key_start, key_length, value_length)`` for each of the
    ``count`` records of a decompressed records section; ``body[start:end]`` is the whole record (length field
    included), a key or value length < 0 is null. Raises InvalidRecord as soon as the bytes disagree with the
    structure or the count (the trailing-bytes check runs once the last record has been consumed).

    One- and two-byte varints, the common cases, are decoded inline: this loop is the produce path's per-record
    cost (about a microsecond).
    """
    total = len(body)
    pos = 0
    zigzag = _ZIGZAG
    try:
        for _ in range(count):
            start = pos
            b = body[pos]
            if b < 0x80:
                length = zigzag[b]
                pos += 1
            elif (c := body[pos + 1]) < 0x80:
                b = (b & 0x7F) | c << 7
                length = (b >> 1) ^ -(b & 1)
                pos += 2
            else:
                length, pos = _varint(body, pos, 5)
            end = pos + length
            if length < MIN_RECORD_SIZE - 1 or end > total:
                raise InvalidRecord(f"record at byte {start}: length {length} does not fit the batch")
            pos += 1  # attributes
            b = body[pos]
            if b < 0x80:
                ts_delta = zigzag[b]
                pos += 1
            elif (c := body[pos + 1]) < 0x80:
                b = (b & 0x7F) | c << 7
                ts_delta = (b >> 1) ^ -(b & 1)
                pos += 2
            else:
                ts_delta, pos = _varint(body, pos, 10)
            b = body[pos]
            if b < 0x80:
                offset_delta = zigzag[b]
                pos += 1
            elif (c := body[pos + 1]) < 0x80:
                b = (b & 0x7F) | c << 7
                offset_delta = (b >> 1) ^ -(b & 1)
                pos += 2
            else:
                offset_delta, pos = _varint(body, pos, 5)
            b = body[pos]
            if b < 0x80:
                key_length = zigzag[b]
                pos += 1
            else:
                key_length, pos = _varint(body, pos, 5)
            key_start = pos
            if key_length > 0:
                pos += key_length
            if pos >= end:
                raise InvalidRecord(f"record at byte {start}: key runs past the record")
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
            if pos >= end:
                raise InvalidRecord(f"record at byte {start}: value runs past the record")
            b = body[pos]
            if b == 0:
                pos += 1
            else:
                pos = _skip_headers(body, pos, end)
            if pos != end:
                raise InvalidRecord(f"record at byte {start}: fields do not fill its declared length {length}")
            yield start, end, ts_delta, offset_delta, key_start, key_length, value_length
    except IndexError:
        raise InvalidRecord("fewer records than the batch declares (premature end)") from None
    if pos != total:
        raise InvalidRecord("bytes after the last record the batch declares")


def _skip_headers(body: bytes, pos: int, end: int) -> int:
    count, pos = _varint(body, pos, 5)
    if count < 0 or count * 2 > end - pos:  # a header takes at least 2 bytes
        raise InvalidRecord(f"invalid header count {count}")
    for _ in range(count):
        key_length, pos = _varint(body, pos, 5)
        if key_length < 0:
            raise InvalidRecord("negative header key length")
        pos += key_length
        value_length, pos = _varint(body, pos, 5)
        if value_length > 0:
            pos += value_length
        if pos > end:
            raise InvalidRecord("header runs past the record")
    return pos


def records_body(batch, header, cap: int) -> bytes:
    """The decompressed records section of one whole batch, at most ``cap`` bytes (see :mod:`compression`)."""
    return compression.decompress(header.compression, memoryview(batch)[HEADER_SIZE: header.size], cap)


def record_timestamps(batch: bytes, cap: int = STORED_BATCH_CAP):
    """Yield (offset, timestamp) of every record in one whole batch (stops early if the caller does)."""
    header = read_header(batch)
    body = records_body(batch, header, cap)
    for _start, _end, ts_delta, offset_delta, *_ in iter_records(body, header.record_count):
        yield header.base_offset + offset_delta, header.base_timestamp + ts_delta


def first_at_or_after(batch: bytes, timestamp: int, min_offset: int,
                      cap: int = STORED_BATCH_CAP) -> tuple[int, int] | None:
    """(timestamp, offset) of the first record of one whole batch with a timestamp >= ``timestamp`` and an offset
    >= ``min_offset`` (the log start), or None."""
    for offset, ts in record_timestamps(batch, cap):
        if ts >= timestamp and offset >= min_offset:
            return ts, offset
    return None


def records_of(batch, cap: int = STORED_BATCH_CAP) -> tuple[object, list[tuple[int, bytes | None, bool, bytes]]]:
    """(header, [(offset, key, is_tombstone, raw record bytes)]) of one whole batch, decompressed."""
    header = read_header(batch)
    body = records_body(batch, header, cap)
    out = []
    for start, end, _ts, offset_delta, key_start, key_length, value_length in iter_records(body,
                                                                                           header.record_count):
        key = None if key_length < 0 else body[key_start: key_start + key_length]
        out.append((header.base_offset + offset_delta, key, value_length < 0, body[start:end]))
    return header, out


def rebuild_batch(header, raw_records: list[bytes]) -> bytes:
    """A batch with the same base offset, epoch, last offset delta, timestamps and producer fields as
    ``header`` but only ``raw_records`` (their offset deltas unchanged), uncompressed, CRC recomputed."""
    return encode_batch(header, b"".join(raw_records), header.attributes & ~0x07, header.max_timestamp,
                        len(raw_records))


def encode_batch(header, payload, attributes: int, max_timestamp: int, record_count: int | None = None) -> bytes:
    """A batch with ``header``'s base offset, epoch, last offset delta, base timestamp and producer fields, and
    the given ``attributes`` (codec bits included), max timestamp and records section ``payload`` (compressed
    as the attributes say); CRC-32C recomputed."""
    after_crc = struct.pack(">hiqqqhii", attributes, header.last_offset_delta, header.base_timestamp,
                            max_timestamp, header.producer_id, header.producer_epoch, header.base_sequence,
                            header.record_count if record_count is None else record_count) + bytes(payload)
    length = 4 + 1 + 4 + len(after_crc)  # leader epoch, magic, crc, then the rest
    return struct.pack(">qiibI", header.base_offset, length, header.leader_epoch, 2,
                       crc32c.crc32c(after_crc)) + after_crc
