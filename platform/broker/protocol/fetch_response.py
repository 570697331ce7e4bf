"""Fetch response framing by hand (v4–v12), so record bytes can go from the segment file with sendfile.

A response is a list of parts: ``bytes`` and opaque file regions (anything with a ``size``). The size prefix
and each partition's records length are computed up front from the region sizes. Layout per FetchResponse.json:
``throttle_time_ms`` (v1+), ``error_code``/``session_id`` (v7+), then per topic the name and per partition
``index, error_code, high_watermark, last_stable_offset (v4+), log_start_offset (v5+),
aborted_transactions (v4+), preferred_read_replica (v11+), records``; v12 is flexible (compact lengths and
empty tagged-field sections). No I/O here.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from broker.protocol.codec import write_uvarint

_I32 = struct.Struct(">i")
_PARTITION_V4 = struct.Struct(">ihqq")  # index, error, hw, lso
_I64 = struct.Struct(">q")
_ABORTED = struct.Struct(">qq")  # producer id, first offset


@dataclass(slots=True)
class PartitionData:
    index: int
    error_code: int
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1
    records: object = b""  # bytes or a file region with .size
    aborted: list = None  # [(producer id, first offset)] of aborted transactions (read_committed), or None


def _string(value: str, flexible: bool) -> bytes:
    raw = value.encode()
    if flexible:
        return write_uvarint(len(raw) + 1) + raw
    return struct.pack(">h", len(raw)) + raw


def _array_len(n: int, flexible: bool) -> bytes:
    return write_uvarint(n + 1) if flexible else _I32.pack(n)


def encode(version: int, correlation_id: int, topics: list[tuple[str, list[PartitionData]]],
           error_code: int = 0) -> list:
    flexible = version >= 12
    parts: list = []
    head = bytearray(_I32.pack(correlation_id))
    if flexible:
        head += b"\x00"  # response header v1: empty tagged fields
    head += _I32.pack(0)  # throttle_time_ms
    if version >= 7:
        head += struct.pack(">hi", error_code, 0)  # session id 0: sessionless
    head += _array_len(len(topics), flexible)
    for name, partitions in topics:
        head += _string(name, flexible)
        head += _array_len(len(partitions), flexible)
        for p in partitions:
            head += _PARTITION_V4.pack(p.index, p.error_code, p.high_watermark, p.last_stable_offset)
            if version >= 5:
                head += _I64.pack(p.log_start_offset)
            aborted = p.aborted or ()
            head += _array_len(len(aborted), flexible)
            for producer_id, first_offset in aborted:
                head += _ABORTED.pack(producer_id, first_offset)
                if flexible:
                    head += b"\x00"
            if version >= 11:
                head += _I32.pack(-1)  # preferred read replica: none
            records = p.records
            size = len(records) if isinstance(records, (bytes, bytearray)) else records.size
            head += write_uvarint(size + 1) if flexible else _I32.pack(size)
            if isinstance(records, (bytes, bytearray)):
                head += records
            elif size:
                parts.append(bytes(head))
                parts.append(records)
                head = bytearray()
            if flexible:
                head += b"\x00"
        if flexible:
            head += b"\x00"
    if flexible:
        head += b"\x00"
    parts.append(bytes(head))
    total = sum(len(p) if isinstance(p, bytes) else p.size for p in parts)
    parts.insert(0, _I32.pack(total))
    return parts
