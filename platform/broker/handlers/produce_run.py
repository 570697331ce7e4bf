"""A run of unbatched Produce requests handled as one (issue 20).

An unbatched producer (one message per request; librdkafka with ``batch.num.messages=1`` keeps hundreds in
flight) fills each ``recv`` with many frames that differ only in their correlation ids and records. Handled one
by one, each pays the whole request path: header, decode, admission, append, metrics. The listener offers such a
run of whole frames here first. Handled as one, the run pays admission and the write once (one ``writev`` of
every batch, base offsets patched in order) and per request only what differs: the records' checks (the same
:func:`~broker.protocol.validation.check_small` as alone), a response from the template, the request metrics.

Every request of a run gets the answer it would get alone: the same topic, partition, acks (0 or 1), client id
and principal, admitted once; batches checked one by one; offsets assigned in request order. Only what the
plainest path would accept joins a run: Produce v9 with no transactional id, one topic of one partition, one
uncompressed batch of fewer than ``validation.KERNEL_MIN_RECORDS`` records from a producer without a producer id,
on a topic whose configs rewrite or bound nothing and that sets no ``flush.messages``. The run ends before the
first frame that differs or whose records fail a check; that frame, and anything else, is handled alone (with its
exact answer or error). The log ends up as if the requests had come one by one: the run ends before a request
that would roll the segment, and every batch gets the offset and time index entries it would get alone. A run
holds at most ``RUN_MAX`` requests. One difference: the run is one write, so a write the disk refuses fails every
request of the run (KAFKA_STORAGE_ERROR, retriable), where alone the first few might have been written.
"""

from __future__ import annotations

import struct
import time

from broker.handlers.produce import _Partition, admit, records
from broker.log.log import LogConfig
from broker.log.storage_errors import incidents, log_dir_of
from broker.protocol import codec, produce_request, produce_response, validation
from broker.protocol.messages import ErrorCode
from broker.security import access

RUN_MAX = 64
FRAME_MAX = 8 * 1024  # larger frames (a batched producer's: 50 messages of 200 bytes are 11 KB) go alone
_I32 = struct.Struct(">i").unpack_from
_I16 = struct.Struct(">h").unpack_from
_TAGS = b"\x00\x00\x00"  # a v9 request's partition, topic and body tag sections, empty
_clock = time.perf_counter
_NEVER = LogConfig.flush_interval_messages  # flush.messages unset: no flush counted by messages


def _records_length(data: bytes, at: int) -> tuple[int, int]:
    """(length, bytes of its compact length) of a record set whose length varint is at ``at``; (-1, 0) if it is
    null or its varint is longer than two bytes."""
    b = data[at]
    if b < 0x80:
        return b - 1, 1
    c = data[at + 1]
    if c >= 0x80:
        return -1, 0
    return ((b & 0x7F) | c << 7) - 1, 2


def _plain(data: bytes, start: int, end: int) -> bool:
    """A cheap look at a frame (payload from ``start`` to ``end``): Produce v9, no transactional id, acks 0 or 1,
    one topic of one partition, and an uncompressed batch of fewer than KERNEL_MIN_RECORDS records without a
    producer id. Most other frames (a batched, idempotent or acks=all producer's) fail here, before anything is
    decoded."""
    if end - start > FRAME_MAX or end - start < 80 or data[start] or data[start + 1] or data[start + 2] \
            or data[start + 3] != 9:
        return False
    client = _I16(data, start + 8)[0]
    body = start + 10 + max(client, 0) + 1  # after the header's tag section
    if body + 9 > end or data[body - 1] or data[body] or data[body + 1] or data[body + 2] > 1 \
            or data[body + 7] != 2 or data[body + 8] >= 0x80:  # tags, null transactional id, acks, one topic
        return False
    at = body + 8 + data[body + 8]  # after the topic name: the partitions' count
    if at + 7 > end or data[at] != 2:
        return False
    batch = at + 5 + (1 if data[at + 5] < 0x80 else 2)  # after the record set's compact length
    # magic 2, not compressed nor control, no producer id (-1: its first byte 0xFF), a few records
    return (batch + 61 <= end and data[batch + 16] == 2 and not data[batch + 22] & 0x27 and data[batch + 43] == 0xFF
            and 0 < _I32(data, batch + 57)[0] < validation.KERNEL_MIN_RECORDS)


def answer(listener, data: bytes, pos: int, session) -> tuple[list[bytes], int] | None:
    """Handle the run of plain unbatched Produce frames in ``data`` from ``pos`` (a frame's size prefix): (the
    answers in order, the position after the run), or None when fewer than two frames form a run (nothing was
    done: the caller handles the frame alone)."""
    end = len(data)
    size = _I32(data, pos)[0]
    start = pos + 4
    after = start + size
    if after + 4 > end or not _plain(data, start, after):
        return None
    second = _I32(data, after)[0]
    if after + 4 + second > end or not _plain(data, after + 4, after + 4 + second):
        return None
    started = _clock()
    broker = listener.broker
    header = codec.read_header(memoryview(data)[start:after])
    request = produce_request._decode_one(data, start + header.body_offset, after)  # noqa: SLF001
    if request is None or request.acks not in (0, 1):
        return None
    topic = request.topic_data[0]
    name, pdata = topic.name, topic.partition_data[0]
    length = len(pdata.records)
    rs_at = after - 3 - length  # the record set: its compact length's varint ends here
    mid = rs_at - (1 if length + 1 < 0x80 else 2) - start  # the template: bytes 8 (after the correlation id) to mid
    if _records_length(data, start + mid) != (length, rs_at - start - mid):
        return None
    if getattr(broker, "authorizer", None) is not None and not access.allowed(broker, "Write", access.TOPIC, name,
                                                                              quiet=True):
        return None  # alone, it gets TOPIC_AUTHORIZATION_FAILED (and its denial is logged)
    part = _Partition([pdata.index, 0, -1, -1, None], name, pdata.index, b"")  # its batches are checked below
    if not admit(broker, part, request.acks, shape=False) or not part.policy.plain:  # check_small: one batch
        return None
    config = part.plog.config
    if config.flush_interval_messages != _NEVER:  # flush.messages set: its count is kept request by request
        return None
    used, room = part.plog.segments[-1].size, config.segment_bytes  # the active segment, as the run fills it
    head, body = data[start:start + 4], data[start + 8:start + mid]
    view = memoryview(data)
    limit = listener.max_request_bytes  # a larger frame closes the connection when it is handled alone
    batches, correlations, spans = [], [], []  # spans: the offsets each batch takes
    count = 0
    max_ts = -1
    at = pos
    while len(batches) < RUN_MAX and at + 4 <= end:
        size = _I32(data, at)[0]
        first = at + 4
        last = first + size
        if (last > end or size < mid + 4 or size > FRAME_MAX or size > limit or data[first:first + 4] != head
                or data[first + 8:first + mid] != body):
            break
        length, width = _records_length(data, first + mid)
        rs = first + mid + width
        if length < 0 or rs + length + 3 != last or data[last - 3:last] != _TAGS:
            break
        batch = view[rs:last - 3]
        try:
            summary = validation.check_small(batch, part.cap, part.compacted)
        except records.InvalidBatch:
            break
        if summary is None or summary.producer_id >= 0:
            break
        if used and used + len(batch) > room:  # alone, this request would roll the segment first
            if batches:
                break  # it starts the next run, and rolls the segment as it would alone
            used = 0
        used += len(batch)
        batches.append(batch)
        correlations.append(_I32(data, first + 4)[0])
        spans.append(summary.offset_count)
        count += summary.records
        if summary.max_timestamp > max_ts:
            max_ts = summary.max_timestamp
        at = last
    if len(batches) < 2:
        return None
    plog = part.plog
    try:
        base = plog.append(batches, records.BatchSummary(len(batches), count, sum(spans), max_ts))
    except OSError as exc:
        incidents.failed(f"appends to {log_dir_of(plog.dir)}", exc, f"{name}-{pdata.index}")
        error = [(name, [[pdata.index, ErrorCode.kafka_storage_error.value, -1, plog.log_start_offset, str(exc)]])]
        answers = [produce_response.encode(9, c, error) for c in correlations] if request.acks else []
    else:
        if incidents.any:
            incidents.succeeded(f"appends to {log_dir_of(plog.dir)}")
        if broker.cluster is not None:
            broker.cluster.partition(name, pdata.index).maybe_advance_high_watermark()
        broker.notify_append(name, pdata.index)
        broker.metrics.produced(name, count, sum(len(b) for b in batches))
        bases = []
        for span in spans:  # each batch's base offset, in request order
            bases.append(base)
            base += span
        answers = produce_response.encode_run(9, correlations, name, pdata.index, bases, plog.log_start_offset) \
            if request.acks else []
    broker.metrics.request("Produce", (_clock() - started) / len(correlations), len(correlations))
    return answers, at
