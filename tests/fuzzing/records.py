"""Varints, records and magic-2 record batches (compressed, bombs), with every header field overridable."""

from __future__ import annotations

import functools
import gzip
import struct

import crc32c


def uvarint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def varint(value: int) -> bytes:
    """Zigzag varint (records), 64-bit."""
    return uvarint((value << 1) ^ (value >> 63))


def overlong_uvarint(value: int, size: int) -> bytes:
    """``value`` encoded in ``size`` bytes: redundant 0x80 continuation bytes (decoders should refuse)."""
    out = bytearray(uvarint(value))
    out[-1] |= 0x80
    while len(out) < size - 1:
        out.append(0x80)
    out.append(0x00)
    return bytes(out)


def encode_record(key: bytes | None, value: bytes | None, headers=(), offset_delta: int = 0,
                  timestamp_delta: int = 0, attributes: int = 0) -> bytes:
    body = bytearray(struct.pack(">b", attributes))
    body += varint(timestamp_delta) + varint(offset_delta)
    body += varint(-1) if key is None else varint(len(key)) + key
    body += varint(-1) if value is None else varint(len(value)) + value
    body += varint(len(headers))
    for hkey, hvalue in headers:
        body += varint(len(hkey)) + hkey
        body += varint(-1) if hvalue is None else varint(len(hvalue)) + hvalue
    return varint(len(body)) + bytes(body)


def compress(codec: int, data: bytes, xerial: bool = False) -> bytes:
    import cramjam

    if codec == 0:
        return data
    if codec == 1:
        return gzip.compress(data, compresslevel=6)
    if codec == 2:
        if not xerial:
            return bytes(cramjam.snappy.compress_raw(data))
        out = bytearray(b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1))
        for i in range(0, len(data), 32 * 1024):
            chunk = bytes(cramjam.snappy.compress_raw(data[i:i + 32 * 1024]))
            out += struct.pack(">i", len(chunk)) + chunk
        return bytes(out)
    if codec == 3:
        return bytes(cramjam.lz4.compress(data))
    if codec == 4:
        return bytes(cramjam.zstd.compress(data))
    raise ValueError(codec)


_BATCH_AFTER_CRC = struct.Struct(">hiqqqhii")


def build_batch(records: list[tuple] = (), codec: int = 0, *, base_offset: int = 0, leader_epoch: int = -1,
                magic: int = 2, attributes: int | None = None, last_offset_delta: int | None = None,
                base_timestamp: int = 1_700_000_000_000, max_timestamp: int | None = None,
                producer_id: int = -1, producer_epoch: int = -1, base_sequence: int = -1,
                record_count: int | None = None, body: bytes | None = None, crc: int | None = None,
                length: int | None = None, xerial: bool = False) -> bytes:
    """A magic-2 record batch of ``records`` ((key, value, headers) tuples), every header field overridable.

    ``body`` replaces the (compressed) records section; ``crc`` and ``length`` replace the computed values.
    """
    raw = b"".join(encode_record(k, v, h, offset_delta=i, timestamp_delta=i) for i, (k, v, h) in enumerate(records))
    if body is None:
        body = compress(codec, raw, xerial)
    if attributes is None:
        attributes = codec
    if last_offset_delta is None:
        last_offset_delta = max(len(records) - 1, 0)
    if max_timestamp is None:
        max_timestamp = base_timestamp + max(len(records) - 1, 0)
    if record_count is None:
        record_count = len(records)
    after_crc = _BATCH_AFTER_CRC.pack(attributes, last_offset_delta, base_timestamp, max_timestamp, producer_id,
                                      producer_epoch, base_sequence, record_count) + body
    if crc is None:
        crc = crc32c.crc32c(after_crc)
    if length is None:
        length = 4 + 1 + 4 + len(after_crc)
    return struct.pack(">qiibI", base_offset, length, leader_epoch, magic, crc) + after_crc


def fix_crc(batch: bytes, pos: int = 0) -> bytes:
    """The batch at ``pos`` with its CRC recomputed over its declared length (clipped to the bytes there)."""
    buf = bytearray(batch)
    length = struct.unpack_from(">i", buf, pos + 8)[0]
    end = min(len(buf), pos + 12 + max(length, 0))
    struct.pack_into(">I", buf, pos + 17, crc32c.crc32c(bytes(buf[pos + 21:end])))
    return bytes(buf)


@functools.lru_cache(maxsize=None)
def bomb(codec: int, size: int) -> bytes:
    """A small compressed payload that expands to ``size`` zero bytes."""
    if codec == 1:
        import zlib

        comp = zlib.compressobj(9, zlib.DEFLATED, 31)
        chunk = b"\x00" * (1 << 20)
        out = bytearray()
        for _ in range(size >> 20):
            out += comp.compress(chunk)
        return bytes(out + comp.flush())
    if codec == 4:
        import zstandard

        # one frame written in pieces: the content size is not in the header, so the reader cannot know
        cctx = zstandard.ZstdCompressor(level=19)
        obj = cctx.compressobj()
        chunk = b"\x00" * (1 << 20)
        out = bytearray()
        for _ in range(size >> 20):
            out += obj.compress(chunk)
        return bytes(out + obj.flush())
    return compress(codec, b"\x00" * size)


def bomb_batch(codec: int, size: int, record_count: int = 1) -> bytes:
    return build_batch([(b"k", b"v", ())], codec, body=bomb(codec, size), record_count=record_count)
