"""Produce (key 0), v3–9: validate each partition's batches and append them.

Validation is Kafka's (see :mod:`broker.protocol.validation` for every rule and its error code): framing, size
and CRC-32C of each batch, then its records — count and offsets, structure, compressed payloads decompressed
with a cap of ``message.max.bytes``, keys on compacted topics. A partition whose bytes are invalid gets an error
and nothing of it is written; the other partitions of the request are unaffected. Valid bytes are written as
received with base offset and leader epoch patched.

No request may hold the event loop for long. Framing and CRC (C-speed) are checked inline; the records too when
they hold at most ``validation.INLINE_BUDGET`` bytes, decompressed (a thread hand-off costs more than checking
them, and a producer's connection waits for it: batch-1 and batch-50 producers stay inline, compressed or not),
and uncompressed batches of 16+ records, up to ``validation.COMPILED_INLINE_BUDGET`` a request, once the compiled
record check is loaded (kcat's batches of thousands of records: about 0.03 µs a record; not for topics whose
configs rewrite batches).
Decompression stops at that budget, so a bomb costs the loop microseconds; every record set over it goes, with
the others of the request, in one hop to a small worker pool. Appends run on the event loop (the log is not
thread-safe), in request order, after the partition's leadership is checked again; a connection's requests are
handled one at a time, so its order is kept.

A topic's configs may ask for more (:class:`validation.RecordPolicy`, Kafka's LogValidator): CreateTime timestamps
outside ``message.timestamp.before/after.max.ms`` are INVALID_TIMESTAMP, checked with the records; then
``compression.type`` recompresses batches of another codec and ``LogAppendTime`` stamps them with the broker's
time (:func:`validation.conform`, in the same place as the check: inline or in the worker pool), and the result
is framed again (a recompressed batch over ``max.message.bytes`` is MESSAGE_TOO_LARGE). The response carries the
append time (``log_append_time_ms``; -1 for CreateTime).

In cluster mode only the leader accepts writes (NOT_LEADER_OR_FOLLOWER otherwise). ``acks=all`` first checks
``min.insync.replicas`` against the ISR (NOT_ENOUGH_REPLICAS, nothing appended), then waits in the partition's
purgatory until the ISR has the batch (the high watermark passes it) or ``timeout_ms`` passes
(REQUEST_TIMED_OUT).

A write the disk refuses (a full log dir: ENOSPC; EDQUOT, EIO) is KAFKA_STORAGE_ERROR for that partition, which
producers retry; the log keeps nothing of it (see PartitionLog), the connection stays open, and the incident is
reported once per log dir, not per request (:mod:`broker.log.storage_errors`).
"""

from __future__ import annotations

import asyncio
import time
from concurrent.futures import ThreadPoolExecutor

from broker.client_quotas.entities import PRODUCER_BYTE_RATE
from broker.client_quotas.manager import requester
from broker.handlers.registry import NO_RESPONSE, RawResponse, handles
from broker.log.log import PartitionLog
from broker.log.producer_state import (
    DuplicateSequence,
    InvalidProducerEpoch,
    InvalidTxnState,
    OutOfOrderSequence,
)
from broker.log.storage_errors import incidents, log_dir_of
from broker.protocol import produce_response, records, validation
from broker.protocol.messages import ErrorCode, ms
from broker.security import access

KEY = 0
ACKS_ALL = -1
_OK = ErrorCode.none.value
# Validation is CPU work under the GIL: two threads are enough to keep it off the loop, and bound how much of
# it runs at once however many producers send compressed batches.
_VALIDATORS = ThreadPoolExecutor(max_workers=2, thread_name_prefix="produce-validation")


class _Partition:
    """One partition of a request on its way through admission, validation and append."""

    __slots__ = ("result", "topic", "index", "data", "plog", "cap", "compacted", "outcome", "policy", "now")

    def __init__(self, result: list, topic: str, index: int, data):
        self.result = result  # [index, error, base offset, log start offset, message]: the response entry
        self.topic, self.index, self.data = topic, index, data
        self.plog: PartitionLog | None = None
        self.cap = 0  # the topic's message.max.bytes, read on the loop at admission
        self.compacted = False
        self.outcome = None  # a BatchSummary, or the InvalidBatch that rejected the data
        self.policy = validation.KEEP  # what the topic's configs ask of the batches
        self.now = -1  # the broker's time at validation (ms): the append time of LogAppendTime topics

    def fail(self, error: ErrorCode, message: str | None = None, start: int = -1) -> None:
        self.result[1:] = [error.value, -1, start, message]


def refuse(broker, part: _Partition, error: ErrorCode, message: str | None = None, start: int = -1) -> None:
    """A retriable refusal (the records were not written): remembered for an idempotent producer, whose later
    sequence must not pass for its first batch here (:mod:`broker.log.refused_sequences`)."""
    part.fail(error, message, start)
    broker.refused_sequences.refused(part.topic, part.index, part.data)


def admit(broker, part: _Partition, acks: int, shape: bool = True) -> bool:
    """The checks before validation: topic, partition, the record set's shape (``shape``), leadership, ISR. False
    (and an error) if one fails. A run (:mod:`produce_run`) checks each request's shape itself."""
    info = broker.topics.get(part.topic)
    if info is None or not 0 <= part.index < info.partitions:
        refuse(broker, part, ErrorCode.unknown_topic_or_partition)
        return False
    if part.data is None:
        part.fail(ErrorCode.invalid_record, "null record set")
        return False
    problem = validation.request_shape_problem(part.data) if shape else None  # before leadership, as Kafka
    if problem is not None:
        part.fail(ErrorCode.invalid_record, problem)
        return False
    error, plog = broker.leader_log(part.topic, part.index)
    if plog is None:
        refuse(broker, part, error)
        return False
    if acks == ACKS_ALL and broker.cluster is not None:
        isr = broker.cluster.partition(part.topic, part.index).isr
        needed = int(info.configs.get("min.insync.replicas", broker.config["min.insync.replicas"]))
        if len(isr) < needed:
            refuse(broker, part, ErrorCode.not_enough_replicas,
                   f"ISR {list(isr)} is smaller than min.insync.replicas={needed}", plog.log_start_offset)
            return False
    part.plog = plog
    config = plog.config  # a topic's log config (TopicLogConfig), refreshed whenever its configs change
    part.cap = config.max_message_bytes
    compacted = getattr(config, "compacted", None)
    part.compacted = broker.cleaner.compacted(part.topic) if compacted is None else compacted
    part.policy = getattr(config, "records", validation.KEEP)
    return True


def _conform(part: _Partition) -> None:
    """Rewrite checked batches as the topic asks (recompression, LogAppendTime) and frame the result again."""
    rewritten = validation.conform(part.data, part.policy, part.now, part.cap)
    if rewritten is not None:
        part.data = rewritten
        part.outcome = records.validate(rewritten, part.cap + records.LOG_OVERHEAD)


def validate_inline(part: _Partition, compiled_left: list[int]) -> bool:
    """Validate on the event loop within the inline budget; False if the records need a worker thread.
    ``compiled_left``: [bytes the compiled check may still take on the loop in this request] (spent here)."""
    part.now = int(time.time() * 1000)
    try:
        if part.policy.plain:  # one small uncompressed batch: every check in one pass (None: anything else)
            summary = validation.check_small(part.data, part.cap, part.compacted)
            if summary is not None:
                validation.check_sequence(summary)
                part.outcome = summary
                return True
        summary = records.validate(part.data, part.cap + records.LOG_OVERHEAD)
        validation.check_sequence(summary)
        validation.check_records(part.data, part.cap, part.compacted, budget=validation.INLINE_BUDGET,
                                 bounds=part.policy.bounds(part.now),
                                 compiled_left=None if part.policy.rewrites else compiled_left)
        part.outcome = summary
        if part.policy.rewrites:
            _conform(part)
    except validation.OverBudget:
        part.outcome = summary  # framing checked; the records are still to do
        return False
    except records.InvalidBatch as exc:
        part.outcome = exc
    return True


def _check_records(parts: list[_Partition]) -> None:
    """In a worker thread: the records of partitions over the inline budget (touches nothing shared)."""
    for part in parts:
        try:
            validation.check_records(part.data, part.cap, part.compacted, bounds=part.policy.bounds(part.now))
            _conform(part)
        except records.InvalidBatch as exc:
            part.outcome = exc


def rejection(exc: records.InvalidBatch) -> ErrorCode:
    if isinstance(exc, records.BatchTooLarge):
        return ErrorCode.message_too_large
    if isinstance(exc, records.InvalidRecord):
        return ErrorCode.invalid_record
    if isinstance(exc, validation.InvalidTimestamp):
        return ErrorCode.invalid_timestamp
    return ErrorCode.corrupt_message


def append(broker, part: _Partition, awaited: bool) -> int:
    """Append a validated partition's bytes; sets its response entry, returns the offset to wait for (-1: none).
    ``awaited``: the loop ran other work since admission, so leadership is checked again first."""
    plog = part.plog
    if isinstance(part.outcome, records.InvalidBatch):
        part.fail(rejection(part.outcome), str(part.outcome), plog.log_start_offset)
        return -1
    if awaited:  # deleted, or leadership moved, while the records were checked?
        if broker.topics.get(part.topic) is None:
            refuse(broker, part, ErrorCode.unknown_topic_or_partition)
            return -1
        error, current = broker.leader_log(part.topic, part.index)
        if current is not plog:
            refuse(broker, part, error if current is None else ErrorCode.not_leader_or_follower)
            return -1
    refused = broker.refused_sequences
    try:
        summary = part.outcome
        if summary.producer_id >= 0 and refused:  # an idempotent batch, and some refused a moment ago: this one's?
            seq = refused.lowest(part.topic, part.index, summary.producer_id, summary.producer_epoch)
            base = plog.append(part.data, summary, seq)
            refused.taken(part.topic, part.index, summary.producer_id, summary.producer_epoch)
        else:
            base = plog.append(part.data, summary)
    except DuplicateSequence as dup:
        part.result[1:] = [ErrorCode.none.value, dup.base_offset, plog.log_start_offset, None]
        return dup.last_offset + 1  # acks=all: answered once the whole stored batch is committed
    except OutOfOrderSequence as exc:
        part.fail(ErrorCode.out_of_order_sequence_number, str(exc), plog.log_start_offset)
        return -1
    except InvalidProducerEpoch as exc:
        part.fail(ErrorCode.invalid_producer_epoch, str(exc), plog.log_start_offset)
        return -1
    except InvalidTxnState as exc:
        part.fail(ErrorCode.invalid_txn_state, str(exc), plog.log_start_offset)
        return -1
    except records.InvalidBatch as exc:  # a control batch from a client
        part.fail(rejection(exc), str(exc), plog.log_start_offset)
        return -1
    except OSError as exc:
        incidents.failed(f"appends to {log_dir_of(plog.dir)}", exc, f"{part.topic}-{part.index}")
        refuse(broker, part, ErrorCode.kafka_storage_error, str(exc), plog.log_start_offset)
        return -1
    if incidents.any:
        incidents.succeeded(f"appends to {log_dir_of(plog.dir)}")
    if broker.cluster is not None:
        broker.cluster.partition(part.topic, part.index).maybe_advance_high_watermark()
    broker.notify_append(part.topic, part.index)
    broker.metrics.produced(part.topic, part.outcome.records, len(part.data))
    result = part.result  # [index, error, base offset, log start offset, message]
    result[1], result[2], result[3] = _OK, base, plog.log_start_offset
    if part.policy.log_append_time:
        result.append(part.now)  # log_append_time_ms
    return plog.segments[-1].next_offset  # the log end offset


async def wait_committed(broker, topic: str, partition: int, offset: int, timeout: float,
                         leader_epoch: int | None = None) -> ErrorCode:
    """acks=all: until the ISR has ``offset``; ``leader_epoch``: the epoch this broker appended at (the wait
    starts on a later pass of the event loop, after the appends: leadership may have moved in between)."""
    part = broker.cluster.partition(topic, partition)
    if part is None:
        return ErrorCode.not_leader_or_follower
    error = await part.wait_committed(offset, timeout, leader_epoch)
    if error == ErrorCode.none:
        info = broker.topics.get(topic)
        needed = int(info.configs.get("min.insync.replicas", broker.config["min.insync.replicas"])) if info else 1
        if len(part.isr) < needed:
            return ErrorCode.not_enough_replicas_after_append
    return error


@handles(KEY, "Produce", 3, 9)
def handle(broker, header, request):
    """Not a coroutine: a request whose records are checked inline and that waits for no replica (every
    unbatched and batch-50 request with acks 0/1) is answered without a task switch or a coroutine; the others
    return a coroutine, which the listener awaits."""
    acks = request.acks
    topics = []
    admitted: list[_Partition] = []
    txn_id = request.transactional_id
    txn_denied = txn_id is not None and not access.allowed(broker, "Write", access.TRANSACTIONAL_ID, txn_id)
    open_to_all = getattr(broker, "authorizer", None) is None
    for topic in request.topic_data:
        results = []
        writable = open_to_all or access.allowed(broker, "Write", access.TOPIC, topic.name)
        for pdata in topic.partition_data:
            part = _Partition([pdata.index, 0, -1, -1, None], topic.name, pdata.index, pdata.records)
            results.append(part.result)
            if txn_denied:  # Kafka refuses the whole request
                part.fail(ErrorCode.transactional_id_authorization_failed)
            elif not writable:
                part.fail(ErrorCode.topic_authorization_failed)
            elif acks not in (0, 1, ACKS_ALL):
                part.fail(ErrorCode.invalid_required_acks)
            elif admit(broker, part, acks):
                admitted.append(part)
        topics.append((topic.name, results))
    compiled_left = [validation.COMPILED_INLINE_BUDGET]  # for the whole request, not per partition
    heavy = None
    for part in admitted:  # a loop, not a comprehension: no function frame for the one partition of most requests
        if not validate_inline(part, compiled_left):
            heavy = [part] if heavy is None else heavy + [part]
    if heavy:
        return _validate_then_append(broker, header, request, topics, admitted, heavy)
    return _append_all(broker, header, request, topics, admitted, awaited=False)


async def _validate_then_append(broker, header, request, topics, admitted, heavy):
    await asyncio.get_running_loop().run_in_executor(_VALIDATORS, _check_records, heavy)
    result = _append_all(broker, header, request, topics, admitted, awaited=True)
    return await result if asyncio.iscoroutine(result) else result


def _append_all(broker, header, request, topics, admitted, awaited: bool):
    """Append in request order; the response, or a coroutine that waits for the ISR first (acks=all)."""
    acks = request.acks
    waits = []
    for part in admitted:
        end = append(broker, part, awaited)
        if end >= 0 and acks == ACKS_ALL and broker.cluster is not None:
            epoch = broker.cluster.partition(part.topic, part.index).leader_epoch  # led at when appended
            waits.append((part.result, part.topic, part.index, end, epoch))
    if waits:
        return _wait_then_answer(broker, header, request, topics, waits)
    return _answer(broker, header, request, topics)


async def _wait_then_answer(broker, header, request, topics, waits):
    timeout = max(ms(request.timeout), 0) / 1000
    outcomes = await asyncio.gather(*(wait_committed(broker, t, p, end, timeout, epoch)
                                      for _, t, p, end, epoch in waits))
    for (result, *_), outcome in zip(waits, outcomes):
        if outcome != ErrorCode.none:
            result[1], result[2] = outcome.value, -1
            del result[5:]  # no log_append_time_ms
    return _answer(broker, header, request, topics)


def _answer(broker, header, request, topics):
    throttle = 0
    if broker.client_quotas.enabled:  # producer_byte_rate: the request's record bytes, whatever became of them
        session, principal = requester()
        throttle = broker.client_quotas.record(
            PRODUCER_BYTE_RATE, principal, header.client_id,
            sum(len(p.records) for t in request.topic_data for p in t.partition_data if p.records is not None))
        if throttle:
            broker.client_quotas.throttle(PRODUCER_BYTE_RATE, throttle, session)
    if request.acks == 0:
        return NO_RESPONSE
    return RawResponse([produce_response.encode(header.api_version, header.correlation_id, topics, throttle)])
