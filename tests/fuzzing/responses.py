"""Responses: size-prefixed frames split out of a byte stream, and decoded with kio (raising when malformed)."""

from __future__ import annotations

import struct
from types import SimpleNamespace

from kio.index import load_response_schema
from kio.serial import entity_reader

from .constants import API_VERSIONS

DESCRIBE_TRANSACTIONS = 65


def split_frames(data: bytes) -> tuple[list[bytes], bytes]:
    """Whole size-prefixed frames in ``data`` and the bytes left over."""
    frames, pos = [], 0
    while len(data) - pos >= 4:
        size = struct.unpack_from(">i", data, pos)[0]
        if size < 0 or len(data) - pos - 4 < size:
            break
        frames.append(data[pos + 4:pos + 4 + size])
        pos += 4 + size
    return frames, data[pos:]


def effective_header(frame: bytes) -> tuple[int, int, int] | None:
    """(api key, version, correlation id) the broker reads from the first frame of ``frame``, if it can."""
    if len(frame) < 12:
        return None
    return struct.unpack_from(">hhi", frame, 4)


def decode_response(api_key: int, version: int, frame: bytes, advertised: dict[int, tuple[int, int]]):
    """Decode a response (without its size prefix) with kio; raises on a malformed one. Returns the body."""
    if api_key == API_VERSIONS:
        lo, hi = advertised.get(API_VERSIONS, (0, 3))
        if not lo <= version <= hi:
            version = 0  # KIP-511: an unknown ApiVersions version is answered with a v0 body
    if api_key == DESCRIBE_TRANSACTIONS:
        return _describe_transactions(frame)
    resp_type = load_response_schema(api_key, version)
    pos = 4
    if resp_type.__flexible__ and api_key != API_VERSIONS:
        count = frame[pos]
        if count != 0:
            raise ValueError(f"response header has {count} tagged fields")
        pos += 1
    body, size = entity_reader(resp_type)(frame, pos)  # the reader returns the bytes it consumed
    if pos + size != len(frame):
        raise ValueError(f"response of {len(frame)} bytes, body ends at {pos + size}")
    return body


class _Reader:
    """Just enough of the flexible encoding to walk a DescribeTransactions v0 answer by hand."""

    def __init__(self, frame: bytes, pos: int):
        self.frame, self.pos = frame, pos

    def fixed(self, fmt: str) -> int:
        value = struct.unpack_from(fmt, self.frame, self.pos)[0]  # raises past the end
        self.pos += struct.calcsize(fmt)
        return value

    def varint(self) -> int:
        value = shift = 0
        while True:
            byte = self.frame[self.pos]
            self.pos += 1
            value |= (byte & 0x7F) << shift
            if byte < 0x80:
                return value
            shift += 7

    def string(self) -> str:
        n = self.varint() - 1
        if n < 0 or self.pos + n > len(self.frame):
            raise ValueError("bad compact string")
        self.pos += n
        return self.frame[self.pos - n:self.pos].decode()

    def no_tags(self) -> None:
        if self.varint() != 0:
            raise ValueError("unexpected tagged fields")


def _describe_transactions(frame: bytes):
    """DescribeTransactions v0, decoded by hand: kio's reader refuses the start time -1 that Kafka sends for a
    transactional id with no transaction open (Empty, Complete*). The same checks: every field, nothing after."""
    r = _Reader(frame, 4)
    r.no_tags()  # response header
    r.fixed(">i")  # throttle time
    states = []
    for _ in range(r.varint() - 1):
        error, tid, state = r.fixed(">h"), r.string(), r.string()
        timeout, start, pid, epoch = r.fixed(">i"), r.fixed(">q"), r.fixed(">q"), r.fixed(">h")
        topics = []
        for _ in range(r.varint() - 1):
            name = r.string()
            topics.append((name, [r.fixed(">i") for _ in range(r.varint() - 1)]))
            r.no_tags()
        r.no_tags()
        states.append(SimpleNamespace(error_code=error, transactional_id=tid, transaction_state=state,
                                      transaction_timeout=timeout, transaction_start_time=start, producer_id=pid,
                                      producer_epoch=epoch, topics=topics))
    r.no_tags()
    if r.pos != len(frame):
        raise ValueError(f"response of {len(frame)} bytes, body ends at {r.pos}")
    return SimpleNamespace(throttle_time=0, transaction_states=states)
