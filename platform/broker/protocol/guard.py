"""Bounds check of a request body before it is decoded: no input may reach an allocation bigger than the frame.

``kio``'s native reader allocates a collection as large as the count a request declares, so a 21-byte frame
claiming 2^32 elements makes it ask for 32 GiB and abort the process. Kafka's generated readers refuse such a
collection ("Tried to allocate a collection of size N, but there are only M bytes remaining"); this module does
the same, walking the bytes by the request's schema (kio's dataclasses and their field metadata) without
building anything:

- arrays and compact arrays: a count larger than the bytes left in the frame is refused, before any element;
- strings, bytes and records: a length past the end of the frame is refused;
- tagged fields: a count larger than the bytes left, or a size past the end, is refused; a known tag's value
  must fit inside its declared size;
- a null (length -1, compact 0, entity marker -1) where the schema does not allow one is refused, so handlers
  never see ``None`` in place of a collection;
- tagged fields the schema does not know are skipped, as KIP-482 says a reader must: they are cut out of the
  bytes handed to kio, whose reader would refuse them.

A refusal is :class:`MalformedRequest` (re-exported by :mod:`broker.protocol.codec`); the listener logs it and closes the connection.
Walkers are compiled once per request class (closures over the field layout), so the check costs a few
microseconds per request. Bytes in, nothing out: no I/O, no allocation proportional to a declared size.
"""

from __future__ import annotations

import dataclasses
import struct
import threading
from functools import lru_cache

from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    PrimitiveField,
    PrimitiveTupleField,
    classify_field,
    get_field_tag,
    is_optional,
)


class MalformedRequest(ValueError):
    """The bytes cannot be a request (or response) of the version they claim."""


_FIXED = {
    "int8": 1, "uint8": 1, "bool": 1,
    "int16": 2, "uint16": 2, "error_code": 2,
    "int32": 4, "uint32": 4, "timedelta_i32": 4,
    "int64": 8, "uint64": 8, "float64": 8, "timedelta_i64": 8, "datetime_i64": 8,
    "uuid": 16,
}
_SIZED = ("string", "bytes", "records")
_seen = threading.local()  # unknown tagged fields met by the current check() (its thread's)


def check(cls, buf, pos: int):
    """Walk a body of request class ``cls`` in ``buf`` from ``pos``. Returns ``buf`` itself, or a copy without
    the tagged fields the schema does not know (which kio would refuse).

    Raises MalformedRequest at the first length, count or null the frame cannot hold."""
    _seen.unknown = []
    _entity(cls)(buf, pos, len(buf))
    if _seen.unknown:
        return _without_unknown_tags(buf, _seen.unknown)
    return buf


def read_uvarint(buf, pos: int, end: int) -> tuple[int, int]:
    if pos < end and buf[pos] < 0x80:  # the common case: one byte
        return buf[pos], pos + 1
    shift = result = 0
    while True:
        if pos >= end:
            raise MalformedRequest("truncated varint")
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7
        if shift > 28:
            raise MalformedRequest("varint longer than 5 bytes")


def skip_tags(buf, pos: int, end: int) -> int:
    """The position after a tagged-field section at ``pos`` whose fields are all skipped (the hand decoders'
    messages carry no tagged field they read); a count or a size past ``end`` is MalformedRequest."""
    count, pos = read_uvarint(buf, pos, end)
    if count > end - pos:
        raise MalformedRequest(f"{count} tagged fields but only {end - pos} bytes remain")
    for _ in range(count):
        tag, pos = read_uvarint(buf, pos, end)
        size, pos = read_uvarint(buf, pos, end)
        if size > end - pos:
            raise MalformedRequest(f"tagged field {tag}: size {size} but only {end - pos} bytes remain")
        pos += size
    return pos


_INT16 = struct.Struct(">h").unpack_from
_INT32 = struct.Struct(">i").unpack_from


def _int(buf, pos: int, width: int, end: int) -> int:
    if pos + width > end:
        raise MalformedRequest("request truncated")
    return (_INT16 if width == 2 else _INT32)(buf, pos)[0]


class _Fixed:
    """Fixed-width fields; consecutive ones are merged into one step."""

    __slots__ = ("width",)

    def __init__(self, width: int):
        self.width = width

    def __call__(self, buf, pos, end):
        pos += self.width
        if pos > end:
            raise MalformedRequest("request truncated")
        return pos


def _sized(flexible: bool, nullable: bool, kafka_type: str, name: str):
    """A string, bytes or records field: its length prefix, then that many bytes, all inside the frame."""
    width = 2 if kafka_type == "string" else 4

    def step(buf, pos, end):
        if flexible:
            raw, pos = read_uvarint(buf, pos, end)
            length = raw - 1
        else:
            length = _int(buf, pos, width, end)
            pos += width
        if length < 0:
            if length == -1 and nullable:
                return pos
            raise MalformedRequest(f"{name}: null or negative length {length} where the schema allows none")
        if length > end - pos:
            raise MalformedRequest(f"{name}: length {length} but only {end - pos} bytes remain")
        return pos + length
    return step


def _array(flexible: bool, nullable: bool, element, name: str):
    def step(buf, pos, end):
        if flexible:
            raw, pos = read_uvarint(buf, pos, end)
            count = raw - 1
        else:
            count = _int(buf, pos, 4, end)
            pos += 4
        if count < 0:
            if count == -1 and nullable:
                return pos
            raise MalformedRequest(f"{name}: null or negative array where the schema allows none")
        if count > end - pos:
            raise MalformedRequest(f"{name}: tried to allocate a collection of size {count}, "
                                   f"but there are only {end - pos} bytes remaining")
        for _ in range(count):
            pos = element(buf, pos, end)
        return pos
    return step


def _nullable_entity(walk, name: str):
    def step(buf, pos, end):
        if pos >= end:
            raise MalformedRequest("request truncated")
        marker = buf[pos]
        if marker == 0xFF:  # -1: null
            return pos + 1
        if marker != 1:
            raise MalformedRequest(f"{name}: bad nullable struct marker {marker}")
        return walk(buf, pos + 1, end)
    return step


def _field_step(field, flexible: bool, is_tag: bool):
    kind = classify_field(field)
    nullable = True if is_tag else is_optional(field)
    kafka_type = field.metadata.get("kafka_type")
    name = field.name
    if isinstance(kind, PrimitiveField):
        return _primitive(kafka_type, flexible, nullable, name)
    if isinstance(kind, PrimitiveTupleField):
        return _array(flexible, nullable, _primitive(kafka_type, flexible, False, name), name)
    if isinstance(kind, EntityField):
        walk = _entity(kind.type_)
        return _nullable_entity(walk, name) if nullable else walk
    if isinstance(kind, EntityTupleField):
        return _array(flexible, nullable, _entity(kind.type_), name)
    raise TypeError(f"unknown field kind {kind!r}")  # pragma: no cover - a kio schema we do not know


def _primitive(kafka_type: str, flexible: bool, nullable: bool, name: str):
    if kafka_type in _FIXED:
        return _Fixed(_FIXED[kafka_type])
    if kafka_type in _SIZED:
        return _sized(flexible, nullable, kafka_type, name)
    raise TypeError(f"{name}: unknown kafka_type {kafka_type!r}")  # pragma: no cover


def _tagged_section(tags: dict):
    def step(buf, pos, end):
        start = pos
        count, pos = read_uvarint(buf, pos, end)
        if count > end - pos:
            raise MalformedRequest(f"{count} tagged fields but only {end - pos} bytes remain")
        count_end, dropped = pos, []
        for _ in range(count):
            field_start = pos
            tag, pos = read_uvarint(buf, pos, end)
            size, pos = read_uvarint(buf, pos, end)
            if size > end - pos:
                raise MalformedRequest(f"tagged field {tag}: size {size} but only {end - pos} bytes remain")
            known = tags.get(tag)
            if known is not None:
                known(buf, pos, pos + size)  # the value must fit in its declared size
            else:
                dropped.append((field_start, pos + size))
            pos += size
        if dropped:
            _seen.unknown.append((start, count_end, count - len(dropped), dropped))
        return pos
    return step


def _without_unknown_tags(buf, sections) -> bytes:
    """``buf`` with the unknown tagged fields cut out and their sections' counts rewritten (KIP-482: a reader
    skips tags it does not know; kio's reader refuses them, so they never reach it)."""
    out, pos = bytearray(), 0
    for start, count_end, kept, dropped in sections:
        out += buf[pos:start]
        out += write_uvarint(kept)
        pos = count_end
        for drop_start, drop_end in dropped:
            out += buf[pos:drop_start]
            pos = drop_end
    out += buf[pos:]
    return bytes(out)


def write_uvarint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


@lru_cache(maxsize=None)
def _entity(cls):
    flexible = bool(getattr(cls, "__flexible__", False))
    steps = []
    tags = {}
    for field in dataclasses.fields(cls):
        tag = get_field_tag(field)
        if tag is not None:
            tags[int(tag)] = _field_step(field, flexible, True)
        else:
            step = _field_step(field, flexible, False)
            if isinstance(step, _Fixed) and steps and isinstance(steps[-1], _Fixed):
                steps[-1] = _Fixed(steps[-1].width + step.width)
            else:
                steps.append(step)
    if flexible:
        steps.append(_tagged_section(tags))
    steps = tuple(steps)

    def walk(buf, pos, end):
        for step in steps:
            pos = step(buf, pos, end)
        return pos
    return walk
