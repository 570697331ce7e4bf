"""Control batches: the commit and abort markers that end a transaction in a partition (Kafka's
``EndTransactionMarker``), and the attribute bits of transactional and control batches.

A marker is a batch with attributes ``TRANSACTIONAL | CONTROL``, the transaction's producer id and epoch, base
sequence -1 and one record: key = int16 version 0 + int16 type (0 ABORT, 1 COMMIT), value = int16 version 0 +
int32 coordinator epoch. No I/O.
"""

from __future__ import annotations

import struct

from broker.protocol.batch_builder import build_batch, encode_record, varint
from broker.protocol.record_reader import STORED_BATCH_CAP, iter_records, records_body
from broker.protocol.records import InvalidRecord, read_header

TIMESTAMP_TYPE = 0x08  # LogAppendTime
TRANSACTIONAL = 0x10
CONTROL = 0x20
ABORT, COMMIT = 0, 1
_KEY = struct.Struct(">hh")
_VALUE = struct.Struct(">hi")


def is_transactional(attributes: int) -> bool:
    return bool(attributes & TRANSACTIONAL)


def is_control(attributes: int) -> bool:
    return bool(attributes & CONTROL)


def marker_batch(producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int,
                 timestamp_ms: int) -> bytes:
    record = encode_record(0, _KEY.pack(0, COMMIT if commit else ABORT), _VALUE.pack(0, coordinator_epoch))
    return build_batch([record], timestamp_ms=timestamp_ms, attributes=TRANSACTIONAL | CONTROL,
                       producer_id=producer_id, producer_epoch=producer_epoch)


def read_marker(batch) -> tuple[int, int]:
    """(type, coordinator epoch) of a whole control batch. Raises InvalidRecord for anything else."""
    header = read_header(batch)
    if header.record_count != 1:
        raise InvalidRecord("a control batch holds one record")
    body = records_body(batch, header, STORED_BATCH_CAP)
    (_s, _e, _ts, _delta, key_start, key_length, value_length), = iter_records(body, 1)
    if key_length < _KEY.size or value_length < _VALUE.size:
        raise InvalidRecord("control record without a valid key and value")
    _version, kind = _KEY.unpack_from(body, key_start)
    if kind not in (ABORT, COMMIT):
        raise InvalidRecord(f"unknown control record type {kind}")
    value_start = key_start + key_length + len(varint(value_length))
    return kind, _VALUE.unpack_from(body, value_start)[1]
