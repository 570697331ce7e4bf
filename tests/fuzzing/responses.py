"""Responses: size-prefixed frames split out of a byte stream, and decoded with kio (raising when malformed)."""

from __future__ import annotations

import struct

from kio.index import load_response_schema
from kio.serial import entity_reader

from .constants import API_VERSIONS


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
