"""The replica fetcher's Fetch request (v12), framed by hand.

A follower sends one of these after every response it applies. Building it as kio messages took a dataclass per
partition and topic and kio's generic writer every time, one of a follower's largest Python costs under
acks=all load. Only the offsets change between two fetches, so the frame is a few ``struct`` packs.

Fetch v12 (flexible): replica id, max wait, min bytes, max bytes, isolation level, session id and epoch (KIP-227;
0 and -1 by default: a sessionless fetch), the topics with their partitions (current leader epoch, fetch offset,
last fetched epoch -1, log start offset -1, partition max bytes), the forgotten topics with their partition
indexes, an empty rack id, no tagged fields.
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
               max_bytes: int, topics, session_id: int = 0, session_epoch: int = -1, forgotten=()) -> bytes:
    """The whole frame (size prefix included). ``topics``: [(name, [(index, current leader epoch, fetch offset,
    log start offset, partition max bytes), ...]), ...]; ``forgotten``: [(name, [index, ...]), ...]."""
    out = bytearray(_HEAD.pack(0, KEY, VERSION, correlation_id, len(client_id)))
    out += client_id
    out += b"\x00"  # request header v2: no tagged fields
    out += _BODY.pack(replica_id, max_wait_ms, min_bytes, max_bytes, 0, session_id, session_epoch)
    out += write_uvarint(len(topics) + 1)
    for name, partitions in topics:
        _topic_head(out, name, len(partitions))
        for index, leader_epoch, fetch_offset, log_start, partition_max_bytes in partitions:
            out += _PARTITION.pack(index, leader_epoch, fetch_offset, -1, log_start, partition_max_bytes)
            out += b"\x00"
        out += b"\x00"
    out += write_uvarint(len(forgotten) + 1)
    for name, indexes in forgotten:
        _topic_head(out, name, len(indexes))
        for index in indexes:
            out += _I32.pack(index)
        out += b"\x00"
    out += b"\x01\x00"  # rack id: empty; no tagged fields
    _I32.pack_into(out, 0, len(out) - 4)
    return bytes(out)


def _topic_head(out: bytearray, name: str, count: int) -> None:
    """A topic's compact name and the compact length of its array that follows."""
    raw = name.encode()
    out += write_uvarint(len(raw) + 1)
    out += raw
    out += write_uvarint(count + 1)
