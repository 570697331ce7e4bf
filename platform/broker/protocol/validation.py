"""What a Produce request's record batches must satisfy before they are appended: Kafka's ``LogValidator`` rules
for batches from clients, on top of the framing, size and CRC checks of :func:`records.validate`.

Per batch, in this order (the first failure decides; nothing of the partition is written):

- framing, magic 2, batch size over ``message.max.bytes``, CRC-32C (:func:`records.validate`): CORRUPT_MESSAGE
  (2); MESSAGE_TOO_LARGE (10) for the size;
- ``recordCount <= 0``, ``lastOffsetDelta + 1 != recordCount``, a control batch: INVALID_RECORD (87), Kafka's
  InvalidRecordException;
- ``recordCount`` x 7 bytes (the smallest record) more than an uncompressed batch holds: INVALID_RECORD; more
  than ``message.max.bytes``, compressed: MESSAGE_TOO_LARGE, before anything is decompressed;
- an unknown codec (5, 6, 7), or a payload that does not decompress: CORRUPT_MESSAGE (2);
- a payload that decompresses to more than ``message.max.bytes``: MESSAGE_TOO_LARGE (10), Kafka's
  RecordTooLargeException; decompression stops right there;
- fewer or more records than declared, a record or one of its fields running past its bounds, bytes after the
  last record, offset deltas other than 0..n-1 in order: INVALID_RECORD (87);
- a record without a key on a compacted topic: INVALID_RECORD (87).

Kafka rebuilds a compressed batch whose inner offsets are not 0..n-1 instead of rejecting it; logbus never
rewrites a batch (it stores the bytes it was sent), so it rejects one. Kafka does not bound what a payload
decompresses to; logbus caps it at the topic's ``message.max.bytes`` (the batch as a producer built it must
have fit, uncompressed: librdkafka's ``batch.size`` counts uncompressed bytes), and the Java producer answers
MESSAGE_TOO_LARGE by splitting the batch. A payload that does not decompress is CORRUPT_MESSAGE: the bytes
under a valid CRC are not records (Kafka throws a plain KafkaException there: UNKNOWN_SERVER_ERROR).

Cost: the framing checks and the CRC are C-speed; the record walk is Python, about a microsecond per record.
Given a ``budget`` (bytes of records), :func:`check_records` stops with :class:`OverBudget` as soon as it knows
the record set holds more than that, decompressed, before doing that work: the produce handler checks small
record sets on the event loop with a budget (a thread hand-off costs more than they do) and hands the others
to a worker thread without one. This module does no I/O.
"""

from __future__ import annotations

import struct

from broker.protocol import compression, records
from broker.protocol.record_reader import MIN_RECORD_SIZE, iter_records
from broker.protocol.records import HEADER_SIZE, LOG_OVERHEAD, BatchSummary, InvalidRecord

CONTROL_FLAG = 0x20
# Records checked on the event loop at most: ~4,700 of the smallest kind, a few ms; a batch of 50 x 200 B fits.
INLINE_BUDGET = 32 << 10
# From byte 8 of a batch: length, then attributes (byte 21), lastOffsetDelta (23) and recordCount (57).
_FIELDS = struct.Struct(">i9xhi30xi")


class OverBudget(Exception):
    """The records hold more than the budget: check them again without one, off the event loop."""


def validate(buf, max_message_bytes: int, compacted: bool = False) -> BatchSummary:
    """Check every batch of a Produce request's record set; return their summary for the log.

    ``max_message_bytes`` is the topic's ``message.max.bytes``: the most a batch may take on the wire and the
    most its records may decompress to. ``compacted``: every record must have a key. Raises the
    :class:`records.InvalidBatch` subclasses listed in the module docstring.
    """
    summary = records.validate(buf, max_message_bytes + LOG_OVERHEAD)  # framing: every batch is whole
    check_records(buf, max_message_bytes, compacted)
    return summary


def check_records(buf, max_message_bytes: int, compacted: bool = False, budget: int | None = None) -> None:
    """The record-level rules for every batch of ``buf``, whose framing :func:`records.validate` has checked.
    With a ``budget``, raises OverBudget rather than decompress or walk more than that many bytes of records."""
    view = memoryview(buf)
    pos = 0
    while pos < len(view):
        size = _FIELDS.unpack_from(view, pos + 8)[0] + LOG_OVERHEAD
        used = check_batch(view[pos: pos + size], max_message_bytes, compacted, budget)
        if budget is not None:
            budget -= used
        pos += size


def check_batch(batch, cap: int, compacted: bool, budget: int | None = None) -> int:
    """The record-level rules for one whole batch; returns the bytes of records it holds, decompressed."""
    _, attributes, last_offset_delta, count = _FIELDS.unpack_from(batch, 8)
    if count <= 0:
        raise InvalidRecord(f"invalid record count {count}")
    if last_offset_delta + 1 != count:
        raise InvalidRecord(f"lastOffsetDelta {last_offset_delta} does not match {count} record(s)")
    if attributes & CONTROL_FLAG:
        raise InvalidRecord("clients may not write control batches")
    codec = attributes & 0x07
    limit = cap if budget is None else min(cap, budget)
    smallest = count * MIN_RECORD_SIZE
    if codec == compression.NONE:
        if smallest > len(batch) - HEADER_SIZE:
            raise InvalidRecord(f"{count} records cannot fit in {len(batch) - HEADER_SIZE} bytes")
        if len(batch) - HEADER_SIZE > limit:
            raise OverBudget()  # never over the cap here: records.validate checked the batch size
    elif smallest > limit:
        if smallest > cap:
            raise compression.DecompressedTooLarge(cap)
        raise OverBudget()
    try:
        body = compression.decompress(codec, batch[HEADER_SIZE:], limit)
    except compression.DecompressedTooLarge:
        if limit < cap:
            raise OverBudget() from None
        raise
    if smallest > len(body):
        raise InvalidRecord(f"{count} records cannot fit in {len(body)} decompressed bytes")
    expected = 0
    for _start, _end, _ts, offset_delta, _key_start, key_length, _value_length in iter_records(body, count):
        if offset_delta != expected:
            raise InvalidRecord(f"record {expected} has offset delta {offset_delta}")
        if compacted and key_length < 0:
            raise InvalidRecord("compacted topic: every record needs a key")
        expected += 1
    return len(body)
