"""The replica fetcher's Fetch request (v12), framed by hand.

A follower sends one of these after every response it applies. Building it as kio messages took a dataclass per
partition and topic and kio's generic writer every time, one of a follower's largest Python costs under
acks=all load. Only the offsets change between two fetches, so the frame is a few ``struct`` packs.

Fetch v12 (flexible): replica id, max wait, min bytes, max bytes, isolation level, session id and epoch (a
sessionless fetch: 0 and -1), the topics with their partitions (current leader epoch, fetch offset, last fetched
epoch -1, log start offset -1, partition max bytes), no forgotten topics, an empty rack id, no tagged fields.
"""

from __future__ import annotations

import struct

from broker.protocol.codec import write_uvarint

KEY, VERSION = 1, 12
_HEAD = struct.Struct(">ihhih")  # size (patched last), api key, api version, correlation id, client id length
_BODY = struct.Struct(">iiiibii")  # replica id, max wait, min bytes, max bytes, isolation, session id and epoch
_PARTITION = struct.Struct(">iiqiqi")  # index, current leader epoch, fetch offset, last fetched epoch, log start,
# partition max bytes
_I32 = struct.Struct(">i")


def encode_v12(correlation_id: int, client_id: bytes, replica_id: int, max_wait_ms: int, min_bytes: int,
               max_bytes: int, topics) -> bytes:
    """The whole frame (size prefix included). ``topics``: [(name, [(index, current leader epoch, fetch offset,
    partition max bytes), ...]), ...]."""
    out = bytearray(_HEAD.pack(0, KEY, VERSION, correlation_id, len(client_id)))
    out += client_id
    out += b"\x00"  # request header v2: no tagged fields
    out += _BODY.pack(replica_id, max_wait_ms, min_bytes, max_bytes, 0, 0, -1)
    out += write_uvarint(len(topics) + 1)
    for name, partitions in topics:
        raw = name.encode()
        out += write_uvarint(len(raw) + 1)
        out += raw
        out += write_uvarint(len(partitions) + 1)
        for index, leader_epoch, fetch_offset, partition_max_bytes in partitions:
            out += _PARTITION.pack(index, leader_epoch, fetch_offset, -1, -1, partition_max_bytes)
            out += b"\x00"
        out += b"\x00"
    out += b"\x01\x01\x00"  # forgotten topics: none; rack id: empty; no tagged fields
    _I32.pack_into(out, 0, len(out) - 4)
    return bytes(out)
