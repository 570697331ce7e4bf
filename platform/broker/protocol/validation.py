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

Per partition of a request, first of all (:func:`request_shape_problem`, Kafka's ``ProduceRequest.validateRecords``):
no whole batch, more than one (Produce v3+ carries exactly one) or a magic other than 2: INVALID_RECORD (87). After
framing and CRC, before the records (:func:`check_sequence`, Kafka's ``LogValidator``): a batch with a producer id
and a base sequence below 0: INVALID_RECORD (87).

Kafka rebuilds a compressed batch whose inner offsets are not 0..n-1 instead of rejecting it; logbus never
rewrites a batch (it stores the bytes it was sent), so it rejects one. Kafka does not bound what a payload
decompresses to; logbus caps it at the topic's ``message.max.bytes`` (the batch as a producer built it must
have fit, uncompressed: librdkafka's ``batch.size`` counts uncompressed bytes), and the Java producer answers
MESSAGE_TOO_LARGE by splitting the batch. A payload that does not decompress is CORRUPT_MESSAGE: the bytes
under a valid CRC are not records (Kafka throws a plain KafkaException there: UNKNOWN_SERVER_ERROR).

Cost: the framing checks and the CRC are C-speed. The record rules of a batch of ``KERNEL_MIN_RECORDS`` records or
more are checked by a compiled kernel (:func:`broker.protocol.kernels.records_pass`, numba: about 0.04 µs a
record); with numba off (``LOGBUS_JIT=0``), column-wise with numpy from ``columnar.COLUMNAR_MIN_RECORDS`` records
on (about 0.5 µs a record); smaller batches record by record in Python (about a microsecond a record). Whenever
a fast path finds anything wrong, the record walk runs and raises the exact error of the first bad record.
Given a ``budget`` (bytes of records), :func:`check_records` stops with :class:`OverBudget` as soon as it knows
the record set holds more than that, decompressed, before doing that work: the produce handler checks small
record sets on the event loop with a budget (a thread hand-off costs more than they do) and hands the others
to a worker thread without one. Once the kernel is loaded (:func:`_load_kernels`: a broker loads it in a
background thread as it starts), uncompressed batches of ``KERNEL_MIN_RECORDS`` records or more stay on the loop
too, up to ``COMPILED_INLINE_BUDGET`` bytes a request (``compiled_left``). This module does no I/O.

What a topic's configs ask of the batches (:class:`RecordPolicy`, Kafka's ``LogValidator`` inputs):

- ``message.timestamp.type=CreateTime`` with ``message.timestamp.before.max.ms`` / ``after.max.ms`` (or the
  deprecated ``difference.max.ms``): a record whose timestamp is outside ``[now - before, now + after]`` is
  INVALID_TIMESTAMP (32), checked during the record walk ("Timestamp t of message with offset o is out of
  range. The timestamp should be within [lo, hi]"); records without a timestamp (-1) pass;
- :func:`conform` then rewrites the batches the topic wants otherwise: ``compression.type`` other than
  ``producer`` recompresses a batch whose codec differs (same records, offsets, producer fields; CRC recomputed),
  ``LogAppendTime`` sets the timestamp-type bit (0x08) and the batch's max timestamp to the broker's time (what
  every record then reads as). Kafka checks the rebuilt batch's size again: the caller re-frames the result.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from types import SimpleNamespace

import numpy as np
from crc32c import crc32c as _crc32c

from broker.protocol import columnar, compression, records
from broker.protocol.record_reader import MIN_RECORD_SIZE, encode_batch, iter_records
from broker.protocol.records import HEADER_SIZE, LOG_OVERHEAD, BatchSummary, InvalidRecord

CONTROL_FLAG = 0x20
LOG_APPEND_TIME_FLAG = 0x08  # the batch's timestamp type: its max timestamp is every record's timestamp
LONG_MAX = 2**63 - 1
NO_TIMESTAMP = -1
# Records checked on the event loop at most: ~4,700 of the smallest kind, a few ms; a batch of 50 x 200 B fits.
INLINE_BUDGET = 32 << 10
# With the compiled record check (broker.protocol.kernels, about 0.03 µs a record) uncompressed batches of
# KERNEL_MIN_RECORDS+ records, up to this many bytes in a request, are checked on the loop too: a worker thread's
# hand-off costs more (kcat's 1 MB batches). Not for topics that rewrite batches (recompression stays off the loop).
COMPILED_INLINE_BUDGET = 1 << 20
KERNEL_MIN_RECORDS = 16  # from this many records in a batch on, the compiled check replaces the record walk
_kernels = None  # broker.protocol.kernels, once loaded (_load_kernels)
# From byte 8 of a batch: length, then attributes (byte 21), lastOffsetDelta (23) and recordCount (57).
_FIELDS = struct.Struct(">i9xhi30xi")
_BASE = struct.Struct(">q")  # base offset (0); base timestamp at 27
_HEADER = records._HEADER  # a whole batch header, as records.read_header reads it


@dataclass(frozen=True)
class RecordPolicy:
    """What a topic's configs ask of incoming batches: ``codec`` None keeps the producer's (compression.type
    ``producer``), ``level`` is the codec's compression.<codec>.level, ``log_append_time`` stamps batches with
    the broker's time, ``before_max_ms`` / ``after_max_ms`` bound CreateTime timestamps."""

    codec: int | None = None
    level: int | None = None
    log_append_time: bool = False
    before_max_ms: int = LONG_MAX
    after_max_ms: int = LONG_MAX

    def __post_init__(self) -> None:
        # nothing to check of timestamps, nothing to rewrite: the produce path's common case (check_small)
        object.__setattr__(self, "plain", self.codec is None and not self.log_append_time
                           and self.before_max_ms == LONG_MAX and self.after_max_ms == LONG_MAX)

    def bounds(self, now_ms: int) -> tuple[int, int] | None:
        """The CreateTime timestamps allowed at ``now_ms``, or None when nothing is checked."""
        if self.log_append_time or (self.before_max_ms == LONG_MAX and self.after_max_ms == LONG_MAX):
            return None
        return now_ms - self.before_max_ms, now_ms + self.after_max_ms

    @property
    def rewrites(self) -> bool:
        return self.codec is not None or self.log_append_time


KEEP = RecordPolicy()


class InvalidTimestamp(records.InvalidBatch):
    """A CreateTime record outside the topic's timestamp bounds (INVALID_TIMESTAMP)."""


class OverBudget(Exception):
    """The records hold more than the budget: check them again without one, off the event loop."""


_LENGTH = struct.Struct(">i")
HEADER_MIN = 17  # a batch's bytes up to and including its magic (Kafka's HEADER_SIZE_UP_TO_MAGIC)
RECORD_OVERHEAD_V0 = 14  # the smallest length Kafka's batch iterator takes (LegacyRecord.RECORD_OVERHEAD_V0)


def request_shape_problem(buf) -> str | None:
    """Kafka's ``ProduceRequest.validateRecords`` for Produce v3+, on one partition's record set before anything
    else is checked (before leadership, CRC and size): exactly one whole batch, of magic 2. Kafka's message when
    it fails (INVALID_RECORD), else None. As Kafka's batch iterator: a cut-off batch is no batch (so a record set
    of one cut-off batch has none: INVALID_RECORD), a length below 14 or a magic above 2 is left to the framing
    check (CORRUPT_MESSAGE, Kafka's CorruptRecordException). One length read and a comparison for the usual
    single batch."""
    total = len(buf)
    if total >= HEADER_MIN and _LENGTH.unpack_from(buf, 8)[0] + records.LOG_OVERHEAD == total and buf[16] == 2:
        return None
    pos = count = 0
    while total - pos >= records.LOG_OVERHEAD:  # Kafka's batch iterator: a partial batch at the end is not one
        length = _LENGTH.unpack_from(buf, pos + 8)[0]
        if length < RECORD_OVERHEAD_V0:
            return None  # Kafka's iterator: CorruptRecordException (CORRUPT_MESSAGE), as the framing check says
        if total - pos < HEADER_MIN:
            break
        magic = buf[pos + 16]
        if magic > 2:  # a negative or unknown magic: CorruptRecordException too
            return None
        if pos + records.LOG_OVERHEAD + length > total:
            break
        if magic != 2:
            return "Produce requests with version 3 or later are only allowed to contain record batches with magic " \
                   "version 2"
        count += 1
        if count > 1:
            return "Produce requests with version 3 or later are only allowed to contain exactly one record batch " \
                   "per partition"
        pos += records.LOG_OVERHEAD + length
    if count == 0:
        return "Produce requests with version 3 or later must have at least one record batch per partition"
    return None


def check_sequence(summary: records.BatchSummary) -> None:
    """Kafka's LogValidator rule, after framing and CRC and before the records: a batch with a producer id has a
    base sequence >= 0; else :class:`records.InvalidRecord` (INVALID_RECORD) with Kafka's message."""
    if summary.producer_id >= 0 and summary.base_sequence < 0:
        raise records.InvalidRecord(f"Invalid sequence number {summary.base_sequence} in record batch with "
                                    f"producerId {summary.producer_id}")


def validate(buf, max_message_bytes: int, compacted: bool = False) -> BatchSummary:
    """Check every batch of a Produce request's record set; return their summary for the log.

    ``max_message_bytes`` is the topic's ``message.max.bytes``: the most a batch may take on the wire and the
    most its records may decompress to. ``compacted``: every record must have a key. Raises the
    :class:`records.InvalidBatch` subclasses listed in the module docstring.
    """
    summary = records.validate(buf, max_message_bytes + LOG_OVERHEAD)  # framing: every batch is whole
    check_records(buf, max_message_bytes, compacted)
    return summary


def check_small(buf, max_message_bytes: int, compacted: bool) -> BatchSummary | None:
    """:func:`validate` of the produce path's commonest record set in one pass: a single uncompressed batch of
    fewer than ``KERNEL_MIN_RECORDS`` records, at most ``INLINE_BUDGET`` bytes of them (an unbatched or lightly
    batched producer; the caller checks no timestamps and rewrites nothing). Its summary; None when ``buf`` is
    anything else or breaks a batch-level rule, so that the general path decides, with its exact error. A
    record that breaks a rule raises here what the general path raises (the same walk, after the same checks).
    """
    total = len(buf)
    if total < HEADER_SIZE:
        return None
    (_, length, _, magic, crc, attributes, last_delta, _, max_ts, producer_id, producer_epoch, base_sequence,
     count) = _HEADER.unpack_from(buf, 0)
    if (magic != 2 or length + LOG_OVERHEAD != total or total > max_message_bytes + LOG_OVERHEAD
            or attributes & 0x27 or count != last_delta + 1 or not 0 < count < KERNEL_MIN_RECORDS
            or count * MIN_RECORD_SIZE > total - HEADER_SIZE or total - HEADER_SIZE > INLINE_BUDGET):
        return None  # compressed (0x07), control (0x20), too many, too few or too large records, bad framing
    view = memoryview(buf)
    if _crc32c(view[21:]) != crc:
        return None
    if count != 1 or not _plain_single_record(buf, total, compacted):
        _walk(buf, view[HEADER_SIZE:], count, compacted, 0, None)
    return BatchSummary(1, count, count, max_ts if max_ts > -1 else -1, producer_id, producer_epoch, base_sequence,
                        base_sequence + last_delta if base_sequence >= 0 else -1, attributes, False)


def _plain_single_record(buf, end: int, compacted: bool) -> bool:
    """True when the one record of a batch (from ``HEADER_SIZE`` to ``end``) passes the record walk's rules in
    its plainest encoding (an unbatched producer's): one- or two-byte lengths, a one-byte timestamp delta,
    offset delta 0, no headers. False for anything else, valid or not: the walk then decides."""
    pos = HEADER_SIZE
    b = buf[pos]
    if b < 0x80:
        raw, pos = b, pos + 1
    else:
        c = buf[pos + 1]
        if c >= 0x80:
            return False
        raw, pos = (b & 0x7F) | c << 7, pos + 2
    if pos + ((raw >> 1) ^ -(raw & 1)) != end or pos + 6 > end:  # the record fills the batch exactly
        return False
    if buf[pos + 1] >= 0x80 or buf[pos + 2] != 0:  # a longer timestamp delta; offset delta other than 0
        return False
    b = buf[pos + 3]  # key length
    if b >= 0x80:
        return False
    key_length = (b >> 1) ^ -(b & 1)
    if key_length < 0:
        if compacted:
            return False
        pos += 4
    else:
        pos += 4 + key_length
    if pos + 2 > end:
        return False
    b = buf[pos]  # value length
    if b < 0x80:
        raw, pos = b, pos + 1
    else:
        c = buf[pos + 1]
        if c >= 0x80:
            return False
        raw, pos = (b & 0x7F) | c << 7, pos + 2
    value_length = (raw >> 1) ^ -(raw & 1)
    if value_length > 0:
        pos += value_length
    return pos + 1 == end and buf[pos] == 0  # no headers, and nothing after them


def check_records(buf, max_message_bytes: int, compacted: bool = False, budget: int | None = None,
                  bounds: tuple[int, int] | None = None, compiled_left: list[int] | None = None) -> None:
    """The record-level rules for every batch of ``buf``, whose framing :func:`records.validate` has checked.
    With a ``budget``, raises OverBudget rather than decompress or walk more than that many bytes of records;
    ``compiled_left``: besides, [bytes of uncompressed batches of ``KERNEL_MIN_RECORDS`` records or more that the
    loaded compiled check may still take] (a whole request's, spent in place, also by batches that turn out
    invalid; OverBudget when the kernel cannot vouch for a batch: the walk is left to a worker).
    ``bounds``: the timestamps allowed (:meth:`RecordPolicy.bounds`), else InvalidTimestamp."""
    view = memoryview(buf)
    pos = 0
    while pos < len(view):
        size = _FIELDS.unpack_from(view, pos + 8)[0] + LOG_OVERHEAD
        used = check_batch(view[pos: pos + size], max_message_bytes, compacted, budget, bounds, compiled_left)
        if budget is not None and used >= 0:
            budget -= used
        pos += size


def check_batch(batch, cap: int, compacted: bool, budget: int | None = None,
                bounds: tuple[int, int] | None = None, compiled_left: list[int] | None = None) -> int:
    """The record-level rules for one whole batch; returns the bytes of records it holds, decompressed (-1 when
    they were taken on ``compiled_left``, not on ``budget``)."""
    _, attributes, last_offset_delta, count = _FIELDS.unpack_from(batch, 8)
    if count <= 0:
        raise InvalidRecord(f"invalid record count {count}")
    if last_offset_delta + 1 != count:
        raise InvalidRecord(f"lastOffsetDelta {last_offset_delta} does not match {count} record(s)")
    if attributes & CONTROL_FLAG:
        raise InvalidRecord("clients may not write control batches")
    codec = attributes & 0x07
    compiled = False
    limit = cap if budget is None else min(cap, budget)
    smallest = count * MIN_RECORD_SIZE
    if codec == compression.NONE:
        if smallest > len(batch) - HEADER_SIZE:
            raise InvalidRecord(f"{count} records cannot fit in {len(batch) - HEADER_SIZE} bytes")
        if len(batch) - HEADER_SIZE > limit:  # never over the cap here: records.validate checked the batch size
            if not (count >= KERNEL_MIN_RECORDS and _kernels is not None and _kernels.ENABLED
                    and compiled_left is not None and len(batch) - HEADER_SIZE <= compiled_left[0]):
                raise OverBudget()
            compiled_left[0] -= len(batch) - HEADER_SIZE
            limit, compiled = cap, True
    elif smallest > limit:
        if smallest > cap:
            raise compression.DecompressedTooLarge(cap)
        raise OverBudget()
    if budget is not None and count >= KERNEL_MIN_RECORDS and _kernels is None:
        raise OverBudget()  # the compiled kernel loads (numba: under a second) in a worker thread, not on the loop
    try:
        # uncompressed: the records in place (their size was checked against the limit above), not a copy
        body = batch[HEADER_SIZE:] if codec == compression.NONE else compression.decompress(codec, batch[HEADER_SIZE:],
                                                                                           limit)
    except compression.DecompressedTooLarge:
        if limit < cap:
            raise OverBudget() from None
        raise
    if smallest > len(body):
        raise InvalidRecord(f"{count} records cannot fit in {len(body)} decompressed bytes")
    base_timestamp = _BASE.unpack_from(batch, 27)[0] if bounds is not None else 0  # read once per batch
    if count >= KERNEL_MIN_RECORDS:
        kernels = _load_kernels()
        if kernels.ENABLED:
            if kernels.records_pass(body, count, compacted, base_timestamp, bounds):
                return -1 if compiled else len(body)
            if compiled:
                raise OverBudget()  # the walk of a big batch, for its exact error: in a worker
        elif count >= columnar.COLUMNAR_MIN_RECORDS and _columns_pass(body, count, compacted, base_timestamp,
                                                                      bounds):
            return len(body)
    _walk(batch, body, count, compacted, base_timestamp, bounds)
    return len(body)


def _load_kernels():
    """:mod:`broker.protocol.kernels`, its record check compiled (or loaded from numba's cache). A broker calls
    this in a background thread as it starts (numba takes about half a second to import); until it has
    returned, batches of ``KERNEL_MIN_RECORDS`` records go to a worker thread, which calls it too. When numba
    fails to load or compile, the record check runs without it (``ENABLED`` False, the error in ``failure``)."""
    global _kernels
    if _kernels is None:
        try:
            from broker.protocol import kernels

            kernels.warm_records_pass()  # compiled (or loaded from the cache) before the loop may call it inline
        except Exception as exc:  # noqa: BLE001 - numba there but unusable: the walk and numpy columns work
            kernels = SimpleNamespace(ENABLED=False, failure=exc)
        _kernels = kernels
    return _kernels


def _columns_pass(body, count: int, compacted: bool, base_timestamp: int, bounds: tuple[int, int] | None) -> bool:
    """The record rules checked column-wise (:mod:`columnar`): True when every record passes. False when any
    does not, or when a timestamp could overflow 64 bits: then the record walk decides, with its exact error."""
    try:
        f = columnar.parse(body, [count], [len(body)], headers=False)
    except InvalidRecord:
        return False
    if not np.array_equal(f.offset_delta, np.arange(count, dtype=np.int64)):
        return False
    if compacted and bool((f.key_len < 0).any()):
        return False
    if bounds is not None:
        lowest, highest = int(f.ts_delta.min()), int(f.ts_delta.max())
        if not -LONG_MAX - 1 <= base_timestamp + lowest <= base_timestamp + highest <= LONG_MAX:
            return False
        ts = base_timestamp + f.ts_delta
        if bool(((ts != NO_TIMESTAMP) & ((ts < bounds[0]) | (ts > bounds[1]))).any()):
            return False
    return True


def _walk(batch, body, count: int, compacted: bool, base_timestamp: int, bounds: tuple[int, int] | None) -> None:
    """The record rules record by record; raises at the first record that breaks one."""
    expected = 0
    for _start, _end, ts_delta, offset_delta, _key_start, key_length, _value_length in iter_records(body, count):
        if offset_delta != expected:
            raise InvalidRecord(f"record {expected} has offset delta {offset_delta}")
        if compacted and key_length < 0:
            raise InvalidRecord("compacted topic: every record needs a key")
        if bounds is not None:
            _check_timestamp(batch, base_timestamp + ts_delta, offset_delta, bounds)
        expected += 1


def _check_timestamp(batch, timestamp: int, offset_delta: int, bounds: tuple[int, int]) -> None:
    low, high = bounds
    if timestamp != NO_TIMESTAMP and not low <= timestamp <= high:
        offset = _BASE.unpack_from(batch, 0)[0] + offset_delta
        raise InvalidTimestamp(f"Timestamp {timestamp} of message with offset {offset} is out of range. The "
                               f"timestamp should be within [{low}, {high}]")


def conform(buf, policy: RecordPolicy, now_ms: int, cap: int) -> bytes | None:
    """Whole, checked batches rewritten as the topic's ``policy`` asks (recompressed to its codec, stamped with
    ``now_ms`` for LogAppendTime), or None when every batch stays as sent. CPU work: decompression capped at
    ``cap`` (the batches were checked under it), then compression."""
    if not policy.rewrites:
        return None
    view = memoryview(buf)
    out = []
    changed = False
    pos = 0
    while pos < len(view):
        header = records.read_header(view, pos)
        batch = view[pos: pos + header.size]
        pos += header.size
        attributes, max_timestamp = header.attributes, header.max_timestamp
        if policy.log_append_time:
            attributes, max_timestamp = attributes | LOG_APPEND_TIME_FLAG, now_ms
        payload = batch[HEADER_SIZE:]
        if policy.codec is not None and policy.codec != header.compression:
            body = compression.decompress(header.compression, payload, cap)
            payload = compression.compress(policy.codec, body, policy.level)
            attributes = (attributes & ~0x07) | policy.codec
        elif (attributes, max_timestamp) == (header.attributes, header.max_timestamp):
            out.append(batch)
            continue
        out.append(encode_batch(header, payload, attributes, max_timestamp))
        changed = True
    return b"".join(out) if changed else None
