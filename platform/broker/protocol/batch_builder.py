"""Encode records and wrap them in a magic-2 record batch (Kafka's ``DefaultRecord`` / ``DefaultRecordBatch``).

The broker writes batches of its own in two places: transaction markers (control batches, :mod:`control`) and
the transaction coordinator's ``__transaction_state`` records (:mod:`txn_log`). Both are small and uncompressed.
Layout: see :mod:`broker.protocol.records`; record fields: see :mod:`broker.protocol.record_reader`. No I/O.
"""

from __future__ import annotations

import struct

import crc32c

_AFTER_CRC = struct.Struct(">hiqqqhii")  # attributes .. record count
_BEFORE_CRC = struct.Struct(">qiibI")  # base offset, length, leader epoch, magic, crc


def varint(value: int) -> bytes:
    """Zigzag varint (varlong for 64-bit values: the encoding is the same)."""
    raw = (value << 1) ^ (value >> 63)
    out = bytearray()
    while raw >= 0x80:
        out.append((raw & 0x7F) | 0x80)
        raw >>= 7
    out.append(raw)
    return bytes(out)


def _bytes_field(data: bytes | None) -> bytes:
    return varint(-1) if data is None else varint(len(data)) + data


def encode_record(offset_delta: int, key: bytes | None, value: bytes | None, timestamp_delta: int = 0,
                  headers: tuple[tuple[str, bytes | None], ...] = ()) -> bytes:
    body = bytearray(b"\x00")  # record attributes: unused
    body += varint(timestamp_delta) + varint(offset_delta) + _bytes_field(key) + _bytes_field(value)
    body += varint(len(headers))
    for name, header_value in headers:
        encoded = name.encode()
        body += varint(len(encoded)) + encoded + _bytes_field(header_value)
    return varint(len(body)) + bytes(body)


def build_batch(records: list[bytes], *, timestamp_ms: int, attributes: int = 0, base_offset: int = 0,
                producer_id: int = -1, producer_epoch: int = -1, base_sequence: int = -1,
                leader_epoch: int = -1) -> bytes:
    """A batch of already encoded records (offset deltas 0..n-1, timestamp deltas 0), CRC-32C computed."""
    after_crc = _AFTER_CRC.pack(attributes, len(records) - 1, timestamp_ms, timestamp_ms, producer_id,
                                producer_epoch, base_sequence, len(records)) + b"".join(records)
    length = 4 + 1 + 4 + len(after_crc)  # leader epoch, magic, crc, then the rest
    return _BEFORE_CRC.pack(base_offset, length, leader_epoch, 2, crc32c.crc32c(after_crc)) + after_crc
