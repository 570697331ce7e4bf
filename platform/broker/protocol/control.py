"""Control batches: the commit and abort markers that end a transaction in a partition (Kafka's
``EndTransactionMarker``), and the attribute bits of transactional and control batches.

A marker is a batch with attributes ``TRANSACTIONAL | CONTROL``, the transaction's producer id and epoch, base
sequence -1 and one record: key = int16 version 0 + int16 type (0 ABORT, 1 COMMIT), value = int16 version 0 +
int32 coordinator epoch.

:func:`committed_batches` is what a ``read_committed`` consumer makes of a fetched partition: its data batches
without the markers and the batches of aborted transactions. No I/O.
"""

from __future__ import annotations

import struct

from broker.protocol.batch_builder import build_batch, encode_record, varint
from broker.protocol.record_reader import STORED_BATCH_CAP, iter_records, records_body
from broker.protocol.records import InvalidRecord, read_header, whole_batches_length

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


def committed_batches(data, position: int, aborted) -> tuple[list, int]:
    """``([(BatchHeader, whole batch), ...], next position)`` of the fetched records ``data`` of one partition
    (Fetch v4+, ``read_committed``) from ``position`` on: the data batches a read_committed consumer delivers,
    without control batches and without the transactional batches of a producer inside an aborted transaction
    (``aborted``: the response's ``(producer id, first offset)`` pairs; an abort marker of that producer closes
    it). A batch cut off at the end of the response is left for the next fetch; the next position is after
    everything examined. Raises InvalidRecord for bytes that do not parse."""
    view = memoryview(data)[: whole_batches_length(data)] if data else memoryview(b"")
    pending = sorted(aborted, key=lambda a: a[1])
    aborting: set[int] = set()
    out, pos = [], 0
    while pos < len(view):
        header = read_header(view, pos)
        batch = view[pos: pos + header.size]
        pos += header.size
        if header.next_offset <= position:
            continue  # wholly before the position (a fetch starts at the batch that holds it)
        position = header.next_offset
        while pending and pending[0][1] <= header.last_offset:
            aborting.add(pending.pop(0)[0])
        if header.attributes & CONTROL:
            if header.producer_id in aborting and read_marker(batch)[0] == ABORT:
                aborting.discard(header.producer_id)
        elif not (header.attributes & TRANSACTIONAL and header.producer_id in aborting):
            out.append((header, batch))
    return out, position
