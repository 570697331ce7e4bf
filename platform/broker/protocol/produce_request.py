"""Produce request decoding by hand (v3–9), the counterpart of :mod:`broker.protocol.produce_response`: an
unbatched producer sends one small Produce request per message, and the generic path (:func:`guard.check`'s
schema walk, then kio's reader) cost more than the rest of the request's decoding put together.

Layout per ProduceRequest.json: ``transactional_id`` (nullable string), ``acks`` (int16), ``timeout_ms``
(int32), ``topic_data`` [``name``, ``partition_data`` [``index`` (int32), ``records`` (nullable records)]]; v9
is flexible (compact lengths, tagged fields after each partition, topic and the body). The rules are the
guard's: a count or a length the frame cannot hold, a null where the schema allows none (a topic name, an
array), a truncated varint or a name that is not UTF-8 is :class:`MalformedRequest`, before anything is
allocated for it; tagged fields are skipped (ProduceRequest defines none); bytes after the body are ignored,
as kio's reader ignores them. The unit tests check it against guard + kio on valid and broken requests.

The result quacks like kio's ``ProduceRequest`` for the produce handler: ``timeout`` is milliseconds (an int;
:func:`broker.protocol.messages.ms` takes both), and ``records`` is ``bytes`` for a ``bytes`` frame and a
zero-copy slice for a ``memoryview`` frame (the listener's large frames). No I/O here.

:func:`encode_parts` is the other direction, for the mirror's requests (v3–8): the frame as a list of buffers, so
the record batches go out as the caller holds them (``socket.sendmsg``), not copied into one frame; the unit tests
check it byte for byte against kio's encoder.
"""

from __future__ import annotations

import struct

from broker.protocol.guard import MalformedRequest
from broker.protocol.guard import read_uvarint as _uvarint
from broker.protocol.guard import skip_tags as _skip_tags

VERSIONS = range(3, 10)
_I16 = struct.Struct(">h").unpack_from
_I32 = struct.Struct(">i").unpack_from
_ACKS_TIMEOUT = struct.Struct(">hi").unpack_from
_REQUEST_HEADER = struct.Struct(">hhih")  # api key, version, correlation id, client id length (header v1)
_ACKS_TIMEOUT_COUNT = struct.Struct(">hii")
_INDEX_LENGTH = struct.Struct(">ii")
_STRING = struct.Struct(">h")
_COUNT = struct.Struct(">i")


class ProduceRequest:
    __slots__ = ("transactional_id", "acks", "timeout", "topic_data")

    def __init__(self, transactional_id, acks: int, timeout: int, topic_data: tuple):
        self.transactional_id, self.acks, self.timeout, self.topic_data = transactional_id, acks, timeout, topic_data

    def __repr__(self) -> str:
        return (f"ProduceRequest(transactional_id={self.transactional_id!r}, acks={self.acks}, "
                f"timeout={self.timeout}, topic_data={self.topic_data!r})")


class TopicProduceData:
    __slots__ = ("name", "partition_data")

    def __init__(self, name: str, partition_data: tuple):
        self.name, self.partition_data = name, partition_data

    def __repr__(self) -> str:
        return f"TopicProduceData(name={self.name!r}, partition_data={self.partition_data!r})"


class PartitionProduceData:
    __slots__ = ("index", "records")

    def __init__(self, index: int, records):
        self.index, self.records = index, records

    def __repr__(self) -> str:
        return f"PartitionProduceData(index={self.index}, records=<{None if self.records is None else len(self.records)} bytes>)"


def _bad_count(name: str, count: int, remaining: int) -> MalformedRequest:
    if count < 0:
        return MalformedRequest(f"{name}: null or negative array where the schema allows none")
    return MalformedRequest(f"{name}: tried to allocate a collection of size {count}, "
                            f"but there are only {remaining} bytes remaining")


def _bad_length(name: str, length: int, remaining: int) -> MalformedRequest:
    if length < 0:
        return MalformedRequest(f"{name}: null or negative length {length} where the schema allows none")
    return MalformedRequest(f"{name}: length {length} but only {remaining} bytes remain")


def _text(buf, start: int, stop: int, what: str) -> str:
    try:
        return str(buf[start:stop], "utf-8")
    except UnicodeDecodeError as exc:
        raise MalformedRequest(f"{what} is not UTF-8: {exc}") from None


def decode(version: int, buf, pos: int):
    """The body of a Produce request of ``version`` (3–9) in ``buf`` from ``pos`` (after the header)."""
    end = len(buf)
    if version >= 9:
        return _decode_one(buf, pos, end) or _decode_flexible(buf, pos, end)
    if pos + 2 > end:
        raise MalformedRequest("request truncated")
    length = _I16(buf, pos)[0]
    pos += 2
    txn_id = None
    if length >= 0:
        if length > end - pos:
            raise _bad_length("transactional_id", length, end - pos)
        txn_id = _text(buf, pos, pos + length, "transactional_id")
        pos += length
    elif length != -1:
        raise _bad_length("transactional_id", length, end - pos)
    if pos + 10 > end:
        raise MalformedRequest("request truncated")
    acks, timeout = _ACKS_TIMEOUT(buf, pos)
    topic_count = _I32(buf, pos + 6)[0]
    pos += 10
    if topic_count < 0 or topic_count > end - pos:
        raise _bad_count("topic_data", topic_count, end - pos)
    topics = []
    for _ in range(topic_count):
        if pos + 2 > end:
            raise MalformedRequest("request truncated")
        length = _I16(buf, pos)[0]
        pos += 2
        if length < 0 or length > end - pos:
            raise _bad_length("name", length, end - pos)
        name = _text(buf, pos, pos + length, "topic name")
        pos += length
        if pos + 4 > end:
            raise MalformedRequest("request truncated")
        count = _I32(buf, pos)[0]
        pos += 4
        if count < 0 or count > end - pos:
            raise _bad_count("partition_data", count, end - pos)
        partitions = []
        for _ in range(count):
            if pos + 8 > end:
                raise MalformedRequest("request truncated")
            index, length = _I32(buf, pos)[0], _I32(buf, pos + 4)[0]
            pos += 8
            data = None
            if length >= 0:
                if length > end - pos:
                    raise _bad_length("records", length, end - pos)
                data = buf[pos:pos + length]
                pos += length
            elif length != -1:
                raise _bad_length("records", length, end - pos)
            partitions.append(PartitionProduceData(index, data))
        topics.append(TopicProduceData(name, tuple(partitions)))
    return ProduceRequest(txn_id, acks, timeout, tuple(topics))


_ONE_HEAD = struct.Struct(">bhib")  # null transactional id, acks, timeout, one topic (compact array: 2)


def _decode_one(buf, pos: int, end: int):
    """v9's commonest request, decoded straight: no transactional id, one topic of one partition, a topic name
    under 127 bytes, a record set under 16 KiB, no tagged fields. None for anything else (the general decoder
    then reads it, with its exact error)."""
    if pos + 9 > end:
        return None
    txn, acks, timeout, topics = _ONE_HEAD.unpack_from(buf, pos)
    name_length = buf[pos + 8] - 1  # from the name's compact length, if it is one byte
    name_end = pos + 9 + name_length
    if txn != 0 or topics != 2 or name_length not in _SHORT or name_end + 7 > end or buf[name_end] != 2:
        return None
    index = _I32(buf, name_end + 1)[0]
    length = buf[name_end + 5]
    at = name_end + 6
    if length >= 0x80:  # two-byte compact length
        length = (length & 0x7F) | buf[at] << 7
        at += 1
        if length >= 0x4000:
            return None
    length -= 1
    if length < 0 or at + length + 3 != end or buf[end - 3] or buf[end - 2] or buf[end - 1]:
        return None  # null records, or anything after the record set but the three empty tag sections
    try:
        name = str(buf[pos + 9:name_end], "utf-8")
    except UnicodeDecodeError:
        return None
    return ProduceRequest(None, acks, timeout,
                          (TopicProduceData(name, (PartitionProduceData(index, buf[at:at + length]),)),))


_SHORT = range(1, 127)  # topic name lengths whose compact length is one byte


def _decode_flexible(buf, pos: int, end: int):
    # Varints and tag sections are almost always one byte (lengths under 128, no tags): read inline, else the
    # general readers.
    raw = buf[pos] if pos < end else 0x80
    raw, pos = (raw, pos + 1) if raw < 0x80 else _uvarint(buf, pos, end)
    txn_id = None
    if raw:
        length = raw - 1
        if length > end - pos:
            raise _bad_length("transactional_id", length, end - pos)
        txn_id = _text(buf, pos, pos + length, "transactional_id")
        pos += length
    if pos + 7 > end:
        raise MalformedRequest("request truncated")
    acks, timeout = _ACKS_TIMEOUT(buf, pos)
    pos += 6
    raw = buf[pos]
    raw, pos = (raw, pos + 1) if raw < 0x80 else _uvarint(buf, pos, end)
    topic_count = raw - 1
    if topic_count < 0 or topic_count > end - pos:
        raise _bad_count("topic_data", topic_count, end - pos)
    topics = []
    for _ in range(topic_count):
        raw = buf[pos] if pos < end else 0x80
        raw, pos = (raw, pos + 1) if raw < 0x80 else _uvarint(buf, pos, end)
        length = raw - 1
        if length < 0 or length > end - pos:
            raise _bad_length("name", length, end - pos)
        name = _text(buf, pos, pos + length, "topic name")
        pos += length
        raw = buf[pos] if pos < end else 0x80
        raw, pos = (raw, pos + 1) if raw < 0x80 else _uvarint(buf, pos, end)
        count = raw - 1
        if count < 0 or count > end - pos:
            raise _bad_count("partition_data", count, end - pos)
        partitions = []
        for _ in range(count):
            if pos + 5 > end:
                raise MalformedRequest("request truncated")
            index = _I32(buf, pos)[0]
            pos += 4
            raw = buf[pos]
            raw, pos = (raw, pos + 1) if raw < 0x80 else _uvarint(buf, pos, end)
            data = None
            if raw:
                length = raw - 1
                if length > end - pos:
                    raise _bad_length("records", length, end - pos)
                data = buf[pos:pos + length]
                pos += length
            pos = pos + 1 if pos < end and buf[pos] == 0 else _skip_tags(buf, pos, end)
            partitions.append(PartitionProduceData(index, data))
        pos = pos + 1 if pos < end and buf[pos] == 0 else _skip_tags(buf, pos, end)
        topics.append(TopicProduceData(name, tuple(partitions)))
    if not (pos < end and buf[pos] == 0):
        _skip_tags(buf, pos, end)
    return ProduceRequest(txn_id, acks, timeout, tuple(topics))


def encode_parts(version: int, correlation_id: int, client_id: str, transactional_id: str | None, acks: int,
                 timeout_ms: int, topics: list[tuple[str, list[tuple[int, list]]]]) -> list:
    """A whole Produce request frame, size prefix included, as buffers to send in order. ``topics``: (name,
    [(partition index, [buffers of the record set])]). Only the non-flexible versions 3–8."""
    if not 3 <= version <= 8:
        raise ValueError(f"Produce v{version} is not encoded by hand (v3-8)")
    cid = client_id.encode()
    head = bytearray(_REQUEST_HEADER.pack(0, version, correlation_id, len(cid)))
    head += cid
    if transactional_id is None:
        head += _STRING.pack(-1)
    else:
        txn = transactional_id.encode()
        head += _STRING.pack(len(txn)) + txn
    head += _ACKS_TIMEOUT_COUNT.pack(acks, timeout_ms, len(topics))
    parts: list = [b"", head]
    size = len(head)
    for name, partitions in topics:
        encoded = name.encode()
        piece = bytearray(_STRING.pack(len(encoded)))
        piece += encoded
        piece += _COUNT.pack(len(partitions))
        for index, buffers in partitions:
            length = sum(len(b) for b in buffers)
            piece += _INDEX_LENGTH.pack(index, length)
            parts.append(piece)
            parts.extend(buffers)
            size += len(piece) + length
            piece = bytearray()
        if piece:  # a topic without partitions
            parts.append(piece)
            size += len(piece)
    parts[0] = _COUNT.pack(size)
    return parts
