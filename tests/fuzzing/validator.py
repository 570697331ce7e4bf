"""What a broker must refuse: a strict reading of the record batches of a Produce request."""

from __future__ import annotations

import struct

import crc32c


def _read_varint(buf: bytes, pos: int, max_bytes: int) -> tuple[int, int]:
    raw = shift = 0
    for i in range(max_bytes):
        if pos >= len(buf):
            raise ValueError("varint runs past the end")
        byte = buf[pos]
        pos += 1
        raw |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return (raw >> 1) ^ -(raw & 1), pos
        shift += 7
    raise ValueError("varint too long")


def _check_record(rec: bytes) -> bool:
    """Raises ValueError unless ``rec`` (one record, its length prefix stripped) is well formed; returns whether
    its key is null."""
    pos = 1  # attributes
    if len(rec) < 1:
        raise ValueError("empty record")
    _, pos = _read_varint(rec, pos, 10)  # timestamp delta
    _, pos = _read_varint(rec, pos, 5)  # offset delta
    null_key = False
    for what in ("key", "value"):
        n, pos = _read_varint(rec, pos, 5)
        if n < -1:
            raise ValueError(f"record {what} length {n}")
        null_key = null_key or (what == "key" and n == -1)
        pos += max(n, 0)
        if pos > len(rec):
            raise ValueError(f"record {what} runs past the record")
    count, pos = _read_varint(rec, pos, 5)
    if count < 0:
        raise ValueError(f"record header count {count}")
    for _ in range(count):
        n, pos = _read_varint(rec, pos, 5)
        if n < 0:
            raise ValueError(f"record header key length {n}")
        pos += n
        n, pos = _read_varint(rec, pos, 5)
        if n < -1:
            raise ValueError(f"record header value length {n}")
        pos += max(n, 0)
        if pos > len(rec):
            raise ValueError("record header runs past the record")
    if pos != len(rec):
        raise ValueError(f"record of {len(rec)} bytes, fields end at {pos}")
    return null_key


class TooLarge(Exception):
    """Decompresses to more than the checker looks at (a bomb): no verdict."""


def _snappy_raw(data: bytes, limit: int) -> bytes:
    import cramjam

    size = shift = pos = 0
    while True:  # the raw format starts with the uncompressed length
        if pos >= len(data) or pos > 5:
            raise ValueError("bad snappy length")
        byte = data[pos]
        pos += 1
        size |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            break
    if size > limit:
        raise TooLarge()
    return bytes(cramjam.snappy.decompress_raw(data))


def _decompress(codec: int, data: bytes, limit: int = 1 << 20) -> bytes:
    """Decompress with a bound on the output (raises TooLarge beyond ``limit``)."""
    if codec == 1:
        import zlib

        d = zlib.decompressobj(47)
        out = d.decompress(data, limit + 1)
        if len(out) > limit:
            raise TooLarge()
        if not d.eof:
            raise ValueError("truncated gzip stream")
        return out
    if codec == 2:
        if data.startswith(b"\x82SNAPPY\x00"):
            out, pos = bytearray(), 16
            while pos < len(data):
                (size,) = struct.unpack_from(">i", data, pos)
                if size < 0 or pos + 4 + size > len(data):
                    raise ValueError("xerial snappy block runs past the end")
                out += _snappy_raw(data[pos + 4:pos + 4 + size], limit - len(out))
                pos += 4 + size
            return bytes(out)
        return _snappy_raw(data, limit)
    if codec == 3:
        import lz4.frame

        d = lz4.frame.LZ4FrameDecompressor()
        out = d.decompress(data, max_length=limit + 1)
        if len(out) > limit:
            raise TooLarge()
        if not d.eof:
            raise ValueError("truncated lz4 frame")
        return out
    if codec == 4:
        import io

        import zstandard

        out = zstandard.ZstdDecompressor().stream_reader(io.BytesIO(data)).read(limit + 1)
        if len(out) > limit:
            raise TooLarge()
        return out
    return data


def batch_problems(data: bytes | None, null_keys: list | None = None) -> list[str]:
    """Why a broker must refuse ``data`` as the records of a Produce partition (empty list: it may accept it).

    Kafka's LogValidator rules that keep the log readable: whole magic-2 batches, a valid CRC, a record count
    that is positive and matches lastOffsetDelta + 1, a known codec, no control batch from a producer, a base
    sequence of at least 0 when the batch has a producer id, and a records section that decodes to exactly that
    many well-formed records; and Kafka's request rule of exactly one batch per partition. ``null_keys`` (a list) gets True
    appended if a record has a null key (a compacted topic refuses it).
    """
    if not data:
        return ["no record batch"]
    problems: list[str] = []
    pos = 0
    while pos < len(data):
        if len(data) - pos < 61:
            return problems + ["a partial batch header"]
        if pos:
            problems.append("more than one batch")
        (base, length, _epoch, magic, crc, attributes, last_delta, _bts, _mts, pid, _pe, seq,
         count) = struct.unpack_from(">qiibIhiqqqhii", data, pos)
        if magic != 2:
            return problems + [f"magic {magic}"]
        if length < 49 or pos + 12 + length > len(data):
            return problems + [f"batch length {length} does not match the bytes"]
        end = pos + 12 + length
        if crc32c.crc32c(data[pos + 21:end]) != crc:
            problems.append("CRC mismatch")
        if count <= 0:
            problems.append(f"record count {count}")
        elif last_delta + 1 != count:
            problems.append(f"lastOffsetDelta {last_delta} with {count} records")
        codec = attributes & 7
        if codec > 4:
            problems.append(f"compression codec {codec}")
        if attributes & 0x20:
            problems.append("a control batch from a producer")
        if pid >= 0 and seq < 0:
            problems.append(f"base sequence {seq} with producer id {pid}")
        body = data[pos + 61:end]
        if codec <= 4 and 0 < count <= 10_000:
            try:
                raw = _decompress(codec, body) if codec else body
                rpos = 0
                for _ in range(count):
                    n, rpos = _read_varint(raw, rpos, 5)
                    if n < 0 or rpos + n > len(raw):
                        raise ValueError(f"record length {n}")
                    if _check_record(raw[rpos:rpos + n]) and null_keys is not None:
                        null_keys.append(True)
                    rpos += n
                if rpos != len(raw):
                    raise ValueError(f"{len(raw) - rpos} bytes after the last record")
            except TooLarge:
                pass
            except Exception as exc:  # noqa: BLE001 - any decoding failure makes the batch invalid
                problems.append(f"records do not decode: {type(exc).__name__}: {exc}"[:120])
        pos = end
    return problems
