"""Reading individual records of a batch: only for cold paths (ListOffsets by timestamp), never produce/fetch.

Decompresses gzip (stdlib), snappy (raw or xerial-framed), lz4 (frame) and zstd with ``cramjam``.
"""

from __future__ import annotations

import gzip
import struct

from broker.protocol.records import HEADER_SIZE, read_header

_XERIAL_MAGIC = b"\x82SNAPPY\x00"


def _varint(buf, pos: int) -> tuple[int, int]:
    shift = raw = 0
    while True:
        byte = buf[pos]
        pos += 1
        raw |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return (raw >> 1) ^ -(raw & 1), pos
        shift += 7


def decompress(codec: int, data: bytes) -> bytes:
    if codec == 0:
        return data
    if codec == 1:
        return gzip.decompress(data)
    import cramjam

    if codec == 2:
        if data.startswith(_XERIAL_MAGIC):
            out, pos = bytearray(), 16
            while pos < len(data):
                (size,) = struct.unpack_from(">i", data, pos)
                out += bytes(cramjam.snappy.decompress_raw(data[pos + 4 : pos + 4 + size]))
                pos += 4 + size
            return bytes(out)
        return bytes(cramjam.snappy.decompress_raw(data))
    if codec == 3:
        return bytes(cramjam.lz4.decompress(data))
    if codec == 4:
        return bytes(cramjam.zstd.decompress(data))
    raise ValueError(f"unknown compression codec {codec}")


def record_timestamps(batch: bytes):
    """Yield (offset, timestamp) of every record in one whole batch."""
    header = read_header(batch)
    body = decompress(header.compression, batch[HEADER_SIZE : header.size])
    pos = 0
    for _ in range(header.record_count):
        length, pos = _varint(body, pos)
        start = pos
        pos += 1  # attributes
        ts_delta, pos = _varint(body, pos)
        offset_delta, pos = _varint(body, pos)
        yield header.base_offset + offset_delta, header.base_timestamp + ts_delta
        pos = start + length


def records_of(batch) -> tuple[object, list[tuple[int, bytes | None, bool, bytes]]]:
    """(header, [(offset, key, is_tombstone, raw record bytes)]) of one whole batch, decompressed."""
    header = read_header(batch)
    body = decompress(header.compression, bytes(batch[HEADER_SIZE: header.size]))
    out = []
    pos = 0
    for _ in range(header.record_count):
        length, pos = _varint(body, pos)
        start = pos
        pos += 1  # attributes
        _ts, pos = _varint(body, pos)
        offset_delta, pos = _varint(body, pos)
        key_len, pos = _varint(body, pos)
        key = None if key_len < 0 else body[pos: pos + key_len]
        pos += max(key_len, 0)
        value_len, _ = _varint(body, pos)
        raw = body[start - _varint_size(length): start + length]
        out.append((header.base_offset + offset_delta, key, value_len < 0, raw))
        pos = start + length
    return header, out


def _varint_size(value: int) -> int:
    raw = (value << 1) ^ (value >> 63)
    size = 1
    while raw >= 0x80:
        raw >>= 7
        size += 1
    return size


def keys_present(batches) -> bool:
    """Whether every record of the given whole batches has a key (compacted topics refuse the others)."""
    view = memoryview(batches)
    pos = 0
    while pos < len(view):
        header = read_header(view, pos)
        _, recs = records_of(view[pos: pos + header.size])
        if any(key is None for _, key, _, _ in recs):
            return False
        pos += header.size
    return True


def rebuild_batch(header, raw_records: list[bytes]) -> bytes:
    """A batch with the same base offset, epoch, last offset delta, timestamps and producer fields as
    ``header`` but only ``raw_records`` (their offset deltas unchanged), uncompressed, CRC recomputed."""
    import crc32c

    body = b"".join(raw_records)
    attributes = header.attributes & ~0x07
    after_crc = struct.pack(">hiqqqhii", attributes, header.last_offset_delta, header.base_timestamp,
                            header.max_timestamp, header.producer_id, header.producer_epoch, header.base_sequence,
                            len(raw_records)) + body
    length = 4 + 1 + 4 + len(after_crc)  # leader epoch, magic, crc, then the rest
    return struct.pack(">qiibI", header.base_offset, length, header.leader_epoch, 2,
                       crc32c.crc32c(after_crc)) + after_crc
