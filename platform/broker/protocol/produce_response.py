"""Produce response framing by hand (v3–9): the produce hot path answers thousands of small requests a
second, and a generic encoder costs more than appending the data. Layout per ProduceResponse.json:
per topic ``name``, per partition ``index, error_code, base_offset, log_append_time_ms, log_start_offset (v5+),
record_errors (v8+), error_message (v8+)``, then ``throttle_time_ms``; v9 is flexible (compact lengths, empty
tagged fields). Checked byte for byte against kio's generated encoder in the unit tests. No I/O here.
"""

from __future__ import annotations

import struct

from broker.protocol.codec import write_uvarint

_I32 = struct.Struct(">i")
_PARTITION = struct.Struct(">ihqq")  # index, error, base offset, log append time
_I64 = struct.Struct(">q")
_STR_LEN = struct.Struct(">h")


def _string(value: str | None, flexible: bool) -> bytes:
    if value is None:
        return b"\x00" if flexible else b"\xff\xff"
    raw = value.encode()
    return (write_uvarint(len(raw) + 1) if flexible else _STR_LEN.pack(len(raw))) + raw


def encode(version: int, correlation_id: int,
           topics: list[tuple[str, list[tuple[int, int, int, int, str | None]]]], throttle_ms: int = 0) -> bytes:
    """``topics``: (name, [(partition, error code, base offset, log start offset, error message[, log append
    time])]); the log append time is -1 (CreateTime) unless given. ``throttle_ms``: a client quota's."""
    if not throttle_ms and len(topics) == 1 and len(topics[0][1]) == 1 and topics[0][1][0][4] is None:
        return _encode_one(version, correlation_id, topics[0][0], topics[0][1][0])
    flexible = version >= 9
    out = bytearray(b"\x00\x00\x00\x00")
    out += _I32.pack(correlation_id)
    if flexible:
        out += b"\x00"
    out += write_uvarint(len(topics) + 1) if flexible else _I32.pack(len(topics))
    for name, partitions in topics:
        out += _string(name, flexible)
        out += write_uvarint(len(partitions) + 1) if flexible else _I32.pack(len(partitions))
        for index, error, base, start, message, *append_time in partitions:
            out += _PARTITION.pack(index, error, base, append_time[0] if append_time else -1)
            if version >= 5:
                out += _I64.pack(start)
            if version >= 8:
                out += b"\x01" if flexible else b"\x00\x00\x00\x00"  # no record errors
                out += _string(message, flexible)
            if flexible:
                out += b"\x00"
        if flexible:
            out += b"\x00"
    out += _I32.pack(throttle_ms)
    if flexible:
        out += b"\x00"
    _I32.pack_into(out, 0, len(out) - 4)
    return bytes(out)


def raise_throttle(frame: bytes, version: int, throttle_ms: int) -> bytes:
    """An encoded answer whose ``throttle_time_ms`` (its last field) is at least ``throttle_ms`` (a request quota's)."""
    at = len(frame) - (5 if version >= 9 else 4)
    if _I32.unpack_from(frame, at)[0] >= throttle_ms:
        return frame
    return frame[:at] + _I32.pack(throttle_ms) + frame[at + 4:]


_templates: dict[tuple[int, str], tuple[bytes, bytes, int]] = {}
_SIZE_CORRELATION = struct.Struct(">ii")
_PARTITION_V5 = struct.Struct(">ihqqq")  # index, error, base offset, log append time, log start offset


def _one_template(version: int, name: str) -> tuple[bytes, bytes, int]:
    """The constant bytes of a response to one partition of topic ``name`` without an error message: after the
    correlation id up to the partition's fields, and after them (log start offset between, v5+); and the frame's
    size (after the size prefix)."""
    flexible = version >= 9
    head = (b"\x00" if flexible else b"") + (write_uvarint(2) if flexible else _I32.pack(1)) + _string(name, flexible)
    head += write_uvarint(2) if flexible else _I32.pack(1)
    tail = b""
    if version >= 8:
        tail += b"\x01\x00" if flexible else b"\x00\x00\x00\x00\xff\xff"  # no record errors, null message
    if flexible:
        tail += b"\x00\x00"  # the partition's and the topic's tagged fields
    tail += _I32.pack(0) + (b"\x00" if flexible else b"")  # throttle time, the body's tagged fields
    fields = _PARTITION_V5.size if version >= 5 else _PARTITION.size
    return head, tail, 4 + len(head) + fields + len(tail)


def _encode_one(version: int, correlation_id: int, name: str, entry) -> bytes:
    """:func:`encode` of the hot path's answer: one topic, one partition, no error message (same bytes)."""
    template = _templates.get((version, name))
    if template is None:
        template = _one_template(version, name)
        if len(_templates) < 4096:  # bounded: topic names come from clients
            _templates[(version, name)] = template
    head, tail, size = template
    append_time = entry[5] if len(entry) > 5 else -1
    if version >= 5:
        fields = _PARTITION_V5.pack(entry[0], entry[1], entry[2], append_time, entry[3])
    else:
        fields = _PARTITION.pack(entry[0], entry[1], entry[2], append_time)
    return b"".join((_SIZE_CORRELATION.pack(size, correlation_id), head, fields, tail))


_run_packs: dict[tuple[int, str], tuple] = {}


def encode_run(version: int, correlations: list[int], name: str, index: int, bases: list[int],
               log_start_offset: int) -> list[bytes]:
    """:func:`encode` of the answers to a run of requests for one partition (``produce_run``; v5+), all without an
    error: the i-th to ``correlations[i]`` with base offset ``bases[i]``. Same bytes, one pack each."""
    cached = _run_packs.get((version, name))
    if cached is None:
        head, tail, size = _one_template(version, name)
        cached = (struct.Struct(f">ii{len(head)}sihqqq{len(tail)}s").pack, head, tail, size)
        if len(_run_packs) < 4096:  # bounded: topic names come from clients
            _run_packs[(version, name)] = cached
    pack, head, tail, size = cached
    return [pack(size, c, head, index, 0, b, -1, log_start_offset, tail) for c, b in zip(correlations, bases)]
