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
