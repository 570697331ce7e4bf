"""Request/response framing over the generated message types of ``kio`` (Kafka's JSON specs).

Frames are ``int32 size`` + payload. A request payload is a header (v1, or v2 with tagged fields when the
(api key, version) is flexible) and a body; a response is ``correlation_id`` (+ tagged fields when
flexible, except ApiVersions, which always uses response header v0 — KIP-511) and a body.
Bytes in, typed messages out: this module does no I/O.
"""

from __future__ import annotations

import io
import struct
from functools import lru_cache
from typing import NamedTuple

from kio.index import load_request_schema, load_response_schema
from kio.serial import entity_reader, entity_writer

from broker.protocol import guard, produce_request
from broker.protocol.guard import MalformedRequest, write_uvarint  # noqa: F401 (re-exported)

API_VERSIONS_KEY = 18
_HEADER = struct.Struct(">hhih")
_INT32 = struct.Struct(">i")


class RequestHeader(NamedTuple):  # a tuple: built once per request, cheaper than a frozen dataclass
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    body_offset: int


def read_uvarint(buf, pos: int) -> tuple[int, int]:
    return guard.read_uvarint(buf, pos, len(buf))


@lru_cache(maxsize=None)
def request_type(api_key: int, version: int):
    return load_request_schema(api_key, version)


@lru_cache(maxsize=None)
def response_type(api_key: int, version: int):
    return load_response_schema(api_key, version)


@lru_cache(maxsize=None)
def _reader(api_key: int, version: int):
    return entity_reader(request_type(api_key, version))


@lru_cache(maxsize=None)
def _writer(api_key: int, version: int):
    return entity_writer(response_type(api_key, version))


@lru_cache(maxsize=None)
def is_flexible(api_key: int, version: int) -> bool:
    return bool(request_type(api_key, version).__flexible__)


def read_header(payload, flexible_lookup=is_flexible) -> RequestHeader:
    """Parse the request header; ``flexible_lookup`` decides whether a tagged-field section follows."""
    end = len(payload)
    if end < 10:
        raise MalformedRequest("request shorter than its header")
    api_key, version, correlation_id, client_len = _HEADER.unpack_from(payload, 0)
    pos = 10  # _HEADER.size
    client_id = None
    if client_len >= 0:
        pos += client_len
        if pos > end:
            raise MalformedRequest("client id runs past the frame")
        raw = bytes(payload[10:pos])
        client_id = _client_ids.get(raw)
        if client_id is None:
            client_id = _client_id(raw)
    flexible = _flexible.get((api_key, version))
    if flexible is None:
        try:
            flexible = flexible_lookup(api_key, version)
        except Exception:
            return RequestHeader(api_key, version, correlation_id, client_id, pos)  # unknown: the caller decides
        if flexible_lookup is is_flexible:
            _flexible[(api_key, version)] = flexible
    if flexible:
        if pos < end and payload[pos] == 0:  # the common case: no tagged fields
            pos += 1
        else:
            count, pos = read_uvarint(payload, pos)
            for _ in range(count):
                _tag, pos = read_uvarint(payload, pos)
                size, pos = read_uvarint(payload, pos)
                pos += size
            if pos > len(payload):
                raise MalformedRequest("tagged fields run past the frame")
    return RequestHeader(api_key, version, correlation_id, client_id, pos)


_flexible: dict[tuple[int, int], bool] = {}  # (api key, version) -> flexible, for the versions kio knows
_client_ids: dict[bytes, str] = {}  # a connection sends the same client id with every request


def _client_id(raw: bytes) -> str:
    """A client id not seen yet: decoded, and remembered (a connection sends the same one with every request)."""
    client_id = raw.decode("utf-8", "replace")
    if len(_client_ids) < 1024:  # bounded: client ids are chosen by clients
        _client_ids[raw] = client_id
    return client_id


def decode_body(header: RequestHeader, payload):
    """The typed request body; raises MalformedRequest on any decoding failure.

    :func:`guard.check` walks the body first: kio's native reader would allocate whatever a count claims.
    Produce, the request of the hot path, is decoded by hand (:mod:`broker.protocol.produce_request`, same rules)."""
    if header.api_key == 0 and header.api_version in produce_request.VERSIONS:
        return produce_request.decode(header.api_version, payload, header.body_offset)
    payload = guard.check(request_type(header.api_key, header.api_version), payload, header.body_offset)
    try:
        body, end = _reader(header.api_key, header.api_version)(payload, header.body_offset)
    except Exception as exc:  # kio raises a variety of errors on bad input
        raise MalformedRequest(f"cannot decode api {header.api_key} v{header.api_version}: {exc}") from exc
    return body


def response_header(api_key: int, version: int, correlation_id: int) -> bytes:
    if api_key != API_VERSIONS_KEY and is_flexible(api_key, version):
        return _INT32.pack(correlation_id) + b"\x00"
    return _INT32.pack(correlation_id)


def encode_response(api_key: int, version: int, correlation_id: int, body) -> bytes:
    """A whole response frame (size prefix included)."""
    buf = io.BytesIO()
    buf.write(b"\x00\x00\x00\x00")
    buf.write(response_header(api_key, version, correlation_id))
    _writer(api_key, version)(buf, body)
    data = buf.getbuffer()
    _INT32.pack_into(data, 0, len(data) - 4)
    del data
    return buf.getvalue()



# ---- the client side (a follower fetching from its leader) ----------------------------------------------------
@lru_cache(maxsize=None)
def _request_writer(api_key: int, version: int):
    return entity_writer(request_type(api_key, version))


@lru_cache(maxsize=None)
def _response_reader(api_key: int, version: int):
    return entity_reader(response_type(api_key, version))


def encode_request(api_key: int, version: int, correlation_id: int, client_id: str, body) -> bytes:
    """A whole request frame (size prefix included), header v1 or v2 as the version requires."""
    cid = client_id.encode()
    buf = io.BytesIO()
    buf.write(b"\x00\x00\x00\x00")
    buf.write(_HEADER.pack(api_key, version, correlation_id, len(cid)) + cid)
    if is_flexible(api_key, version):
        buf.write(b"\x00")
    _request_writer(api_key, version)(buf, body)
    data = buf.getbuffer()
    _INT32.pack_into(data, 0, len(data) - 4)
    del data
    return buf.getvalue()


def decode_response(api_key: int, version: int, frame) -> tuple[int, object]:
    """(correlation id, typed body) of a response frame without its size prefix."""
    if len(frame) < 4:
        raise MalformedRequest("response shorter than its header")
    correlation_id = _INT32.unpack_from(frame, 0)[0]
    pos = 4
    if api_key != API_VERSIONS_KEY and is_flexible(api_key, version):
        _count, pos = read_uvarint(frame, pos)  # tagged fields of the header: none are sent by logbus
    frame = guard.check(response_type(api_key, version), frame, pos)  # a broken peer must not make us allocate
    try:
        body, _ = _response_reader(api_key, version)(frame, pos)
    except Exception as exc:
        raise MalformedRequest(f"cannot decode response of api {api_key} v{version}: {exc}") from exc
    return correlation_id, body
