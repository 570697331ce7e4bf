"""Records of ``__transaction_state``, the transaction coordinator's compacted log (Kafka's ``TransactionLog``
key and value, version 0), and which of its partitions owns a transactional id. No I/O.

Key: int16 version 0, string transactional id. Value: int16 version 0, producer id int64, producer epoch int16,
timeout int32, status int8, partitions (nullable array of {topic string, partitions [int32]}), last update time
int64, start time int64. A null value (tombstone) removes an expired id.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from broker.protocol.records import InvalidRecord

_I16, _I32, _I64 = struct.Struct(">h"), struct.Struct(">i"), struct.Struct(">q")
_HEAD = struct.Struct(">hqhib")  # version, producer id, epoch, timeout, status
_TIMES = struct.Struct(">qq")


def java_hash(text: str) -> int:
    """Java's ``String.hashCode``: over UTF-16 code units, 32-bit wrap-around."""
    h = 0
    data = text.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + (data[i] << 8 | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def partition_for(transactional_id: str, partitions: int) -> int:
    """Kafka's ``Utils.abs(hashCode) % partitions`` (abs(Integer.MIN_VALUE) is 0 there)."""
    h = java_hash(transactional_id)
    return (0 if h == -(1 << 31) else abs(h)) % partitions


@dataclass
class TxnRecord:
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    status: int
    partitions: dict[str, list[int]] = field(default_factory=dict)
    last_update_ms: int = 0
    start_ms: int = 0


def _string(text: str) -> bytes:
    data = text.encode()
    return _I16.pack(len(data)) + data


def encode_key(transactional_id: str) -> bytes:
    return _I16.pack(0) + _string(transactional_id)


def encode_value(rec: TxnRecord) -> bytes:
    out = bytearray(_HEAD.pack(0, rec.producer_id, rec.producer_epoch, rec.timeout_ms, rec.status))
    if not rec.partitions:
        out += _I32.pack(-1)
    else:
        out += _I32.pack(len(rec.partitions))
        for topic, parts in sorted(rec.partitions.items()):
            out += _string(topic) + _I32.pack(len(parts)) + b"".join(_I32.pack(p) for p in sorted(parts))
    out += _TIMES.pack(rec.last_update_ms, rec.start_ms)
    return bytes(out)


class _Reader:
    def __init__(self, data: bytes):
        self.data, self.pos = data, 0

    def take(self, st: struct.Struct):
        if self.pos + st.size > len(self.data):
            raise InvalidRecord("transaction log record is truncated")
        value = st.unpack_from(self.data, self.pos)
        self.pos += st.size
        return value

    def string(self) -> str:
        (length,) = self.take(_I16)
        if length < 0 or self.pos + length > len(self.data):
            raise InvalidRecord("bad string in a transaction log record")
        text = self.data[self.pos:self.pos + length].decode()
        self.pos += length
        return text


def decode_key(data: bytes) -> str:
    reader = _Reader(data)
    (version,) = reader.take(_I16)
    if version != 0:
        raise InvalidRecord(f"transaction log key version {version}")
    return reader.string()


def decode_value(data: bytes) -> TxnRecord:
    reader = _Reader(data)
    version, pid, epoch, timeout, status = reader.take(_HEAD)
    if version != 0:
        raise InvalidRecord(f"transaction log value version {version}")
    (count,) = reader.take(_I32)
    partitions: dict[str, list[int]] = {}
    for _ in range(max(count, 0)):
        topic = reader.string()
        (n,) = reader.take(_I32)
        if n < 0 or n * 4 > len(data):
            raise InvalidRecord("bad partition count in a transaction log record")
        partitions[topic] = [reader.take(_I32)[0] for _ in range(n)]
    last_update, start = reader.take(_TIMES)
    return TxnRecord(pid, epoch, timeout, status, partitions, last_update, start)
