"""Bounded decompression of record-batch payloads: the only place the broker decompresses anything; and
:func:`compress`, for batches a topic's ``compression.type`` recompresses.

A batch's CRC covers its compressed bytes, so a valid CRC says nothing about what they decompress to: 227 bytes of
zstd can claim gigabytes. Every codec here therefore decodes at most ``cap`` bytes, however the payload is built,
and allocates little beyond that (the decoders' own buffers: an lz4 block of at most 4 MiB, a zstd window of at
most ``max(8 MiB, 2 x cap)``):

* gzip (1): ``zlib.decompressobj`` with ``max_length``; concatenated members are decoded in turn.
* snappy (2): raw snappy states its uncompressed length in a preamble, checked before decoding; xerial framing
  (``\\x82SNAPPY\\0`` + version + compatible version, then ``int32 length`` + raw block chunks, as the Java and
  librdkafka clients write it) is checked chunk by chunk.
* lz4 (3): the LZ4 frame format, ``lz4.frame.LZ4FrameDecompressor`` with ``max_length``.
* zstd (4): a ``stream_reader`` read of ``cap + 1`` bytes bounds the output, then a second pass, bounded by the
  first, checks that every frame ends (the reader does not tell a truncated frame from a whole one); the window
  a frame may ask for is limited (``max_window_size``): the decoder allocates it from the frame header.

A payload whose output exceeds ``cap`` raises :class:`DecompressedTooLarge` (a :class:`~records.BatchTooLarge`:
MESSAGE_TOO_LARGE to a producer, Kafka's ``RecordTooLargeException``). A payload that is not valid for its codec
(garbage, truncated, trailing bytes that are not another frame) or a codec id that does not exist (5, 6, 7)
raises :class:`CorruptPayload` (a :class:`~records.CorruptBatch`: CORRUPT_MESSAGE). Nothing else escapes.

:func:`compress` writes what Kafka's Java producer writes: a gzip stream, xerial-framed snappy in 32 KiB blocks,
an LZ4 frame of independent 64 KiB blocks without content size or checksum, one zstd frame.

The protocol layer does no I/O; callers decide which thread this runs in (it is CPU work: see the produce and
ListOffsets handlers).
"""

from __future__ import annotations

import struct
import zlib

import cramjam
import lz4.frame
import zstandard

from broker.protocol.records import BatchTooLarge, CorruptBatch

NONE, GZIP, SNAPPY, LZ4, ZSTD = range(5)
CODEC_NAMES = {NONE: "none", GZIP: "gzip", SNAPPY: "snappy", LZ4: "lz4", ZSTD: "zstd"}

_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = 16  # magic, int32 version, int32 compatible version
_CHUNK_LENGTH = struct.Struct(">i")
_GZIP_MAGIC = b"\x1f\x8b"
_XERIAL_BLOCK = 32 << 10
_XERIAL_PREFIX = _XERIAL_MAGIC + struct.pack(">ii", 1, 1)
_ZSTD_MIN_WINDOW = 8 << 20  # what zstd levels 1-19 ask for at most; a bigger cap allows a bigger window


class CorruptPayload(CorruptBatch):
    """The payload does not decode with its codec, or the codec id is unknown."""


class DecompressedTooLarge(BatchTooLarge):
    """The payload decodes to more than the cap (message.max.bytes)."""

    def __init__(self, cap: int):
        super().__init__(cap + 1, f"records decompress to more than {cap} bytes (message.max.bytes)")


def decompress(codec: int, data, cap: int) -> bytes:
    """The decompressed payload of a batch with compression ``codec``; at most ``cap`` bytes are produced."""
    if codec == NONE:
        if len(data) > cap:
            raise DecompressedTooLarge(cap)
        return bytes(data)
    decoder = _DECODERS.get(codec)
    if decoder is None:
        raise CorruptPayload(f"unknown compression codec {codec}")
    try:
        return decoder(bytes(data), cap)
    except (zlib.error, cramjam.DecompressionError, zstandard.ZstdError, RuntimeError, struct.error) as exc:
        raise CorruptPayload(f"{CODEC_NAMES[codec]} payload does not decompress: {exc}") from exc


def _gzip(data: bytes, cap: int) -> bytes:
    out = bytearray()
    while True:
        d = zlib.decompressobj(16 + zlib.MAX_WBITS)
        out += d.decompress(data, cap + 1 - len(out))
        if len(out) > cap:
            raise DecompressedTooLarge(cap)
        if not d.eof:
            raise CorruptPayload("gzip payload is truncated")
        data = d.unused_data
        if not data:
            return bytes(out)
        if not data.startswith(_GZIP_MAGIC):
            raise CorruptPayload("bytes after the gzip stream")


def _snappy(data: bytes, cap: int) -> bytes:
    if not data.startswith(_XERIAL_MAGIC):
        return _snappy_raw(data, cap)
    out = bytearray()
    pos = _XERIAL_HEADER
    if len(data) < pos:
        raise CorruptPayload("truncated xerial snappy header")
    while pos < len(data):
        (size,) = _CHUNK_LENGTH.unpack_from(data, pos)
        pos += _CHUNK_LENGTH.size
        if size < 0 or pos + size > len(data):
            raise CorruptPayload("xerial snappy chunk runs past the payload")
        out += _snappy_raw(data[pos: pos + size], cap - len(out))
        pos += size
    return bytes(out)


def _snappy_raw(data: bytes, cap: int) -> bytes:
    if cramjam.snappy.decompress_raw_len(data) > cap:  # the preamble: what the block claims to decode to
        raise DecompressedTooLarge(cap)
    return bytes(cramjam.snappy.decompress_raw(data))


def _lz4(data: bytes, cap: int) -> bytes:
    out = bytearray()
    while True:
        d = lz4.frame.LZ4FrameDecompressor()
        out += d.decompress(data, max_length=cap + 1 - len(out))
        if len(out) > cap:
            raise DecompressedTooLarge(cap)
        if not d.eof:
            raise CorruptPayload("lz4 frame is truncated")
        data = d.unused_data
        if not data:
            return bytes(out)


def _zstd(data: bytes, cap: int) -> bytes:
    dctx = zstandard.ZstdDecompressor(max_window_size=max(_ZSTD_MIN_WINDOW, 1 << max(cap, 1).bit_length()))
    # The reader bounds the output but does not tell a truncated frame from a whole one ...
    if len(dctx.stream_reader(data, read_across_frames=True).read(cap + 1)) > cap:
        raise DecompressedTooLarge(cap)
    # ... so decode again frame by frame, now known to produce at most ``cap`` bytes, and check each one ends.
    out = bytearray()
    while True:
        d = dctx.decompressobj()
        out += d.decompress(data)
        if not d.eof:
            raise CorruptPayload("zstd frame is truncated")
        data = d.unused_data
        if not data:
            return bytes(out)


_DECODERS = {GZIP: _gzip, SNAPPY: _snappy, LZ4: _lz4, ZSTD: _zstd}


def compress(codec: int, data: bytes, level: int | None = None) -> bytes:
    """``data`` compressed with ``codec`` at ``level`` (None or -1: the codec's default; Kafka's
    compression.<codec>.level ranges: gzip 1-9, lz4 1-17, zstd up to 22)."""
    if codec == NONE:
        return bytes(data)
    if codec == GZIP:
        c = zlib.compressobj(-1 if level is None else level, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
        return c.compress(data) + c.flush()
    if codec == SNAPPY:
        view = memoryview(data)
        out = bytearray(_XERIAL_PREFIX)
        for pos in range(0, len(view), _XERIAL_BLOCK):
            block = bytes(cramjam.snappy.compress_raw(view[pos: pos + _XERIAL_BLOCK]))
            out += _CHUNK_LENGTH.pack(len(block)) + block
        return bytes(out)
    if codec == LZ4:
        return lz4.frame.compress(bytes(data), compression_level=min(9 if level is None else level, 16),
                                  block_size=lz4.frame.BLOCKSIZE_MAX64KB, block_linked=False,
                                  content_checksum=False, store_size=False)
    if codec == ZSTD:
        return zstandard.ZstdCompressor(level=3 if level is None else level).compress(bytes(data))
    raise ValueError(f"unknown compression codec {codec}")
