"""Produce (key 0), v3–9: validate each partition's batches (magic 2, CRC-32C, sizes) and append them.

Per batch work only: headers are read with one struct call, the CRC is checked in C, and the bytes are written
as received with base offset and leader epoch patched. A partition whose bytes are invalid gets an error and
nothing of it is written; the other partitions of the request are unaffected.

In cluster mode only the leader accepts writes (NOT_LEADER_OR_FOLLOWER otherwise). ``acks=all`` first checks
``min.insync.replicas`` against the ISR (NOT_ENOUGH_REPLICAS, nothing appended), then waits in the partition's
purgatory until the ISR has the batch (the high watermark passes it) or ``timeout_ms`` passes
(REQUEST_TIMED_OUT).
"""

import asyncio

from broker.handlers.registry import NO_RESPONSE, RawResponse, handles
from broker.log.log import PartitionLog
from broker.log.producer_state import (
    DuplicateSequence,
    InvalidProducerEpoch,
    OutOfOrderSequence,
)
from broker.protocol import produce_response, record_reader, records
from broker.protocol.messages import ErrorCode, ms

KEY = 0
ACKS_ALL = -1


def append_partition(broker, topic: str, partition: int, data, acks: int) -> tuple[ErrorCode, int, int, str | None,
                                                                                   int]:
    """(error, base offset, log start offset, message, offset to wait for) for one partition's record set."""
    info = broker.topics.get(topic)
    if info is None or not 0 <= partition < info.partitions:
        return ErrorCode.unknown_topic_or_partition, -1, -1, None, -1
    if data is None:
        return ErrorCode.invalid_record, -1, -1, "null record set", -1
    error, plog = broker.leader_log(topic, partition)
    if plog is None:
        return error, -1, -1, None, -1
    plog: PartitionLog
    if acks == ACKS_ALL and broker.cluster is not None:
        part = broker.cluster.partition(topic, partition)
        needed = int(info.configs.get("min.insync.replicas", broker.config["min.insync.replicas"]))
        if len(part.isr) < needed:
            return (ErrorCode.not_enough_replicas, -1, plog.log_start_offset,
                    f"ISR {list(part.isr)} is smaller than min.insync.replicas={needed}", -1)
    try:
        summary = records.validate(data, plog.config.max_message_bytes + records.LOG_OVERHEAD)
    except records.BatchTooLarge as exc:
        return ErrorCode.message_too_large, -1, plog.log_start_offset, str(exc), -1
    except records.InvalidBatch as exc:
        return ErrorCode.corrupt_message, -1, plog.log_start_offset, str(exc), -1
    if broker.cleaner.compacted(topic) and not record_reader.keys_present(data):
        return (ErrorCode.invalid_record, -1, plog.log_start_offset,
                "compacted topic: every record needs a key", -1)
    try:
        base = plog.append(data, summary)
    except DuplicateSequence as dup:
        return ErrorCode.none, dup.base_offset, plog.log_start_offset, None, dup.base_offset + 1
    except OutOfOrderSequence as exc:
        return ErrorCode.out_of_order_sequence_number, -1, plog.log_start_offset, str(exc), -1
    except InvalidProducerEpoch as exc:
        return ErrorCode.invalid_producer_epoch, -1, plog.log_start_offset, str(exc), -1
    except OSError as exc:
        return ErrorCode.kafka_storage_error, -1, plog.log_start_offset, str(exc), -1
    if broker.cluster is not None:
        broker.cluster.partition(topic, partition).maybe_advance_high_watermark()
    broker.notify_append(topic, partition)
    return ErrorCode.none, base, plog.log_start_offset, None, plog.log_end_offset


async def wait_committed(broker, topic: str, partition: int, offset: int, timeout: float) -> ErrorCode:
    part = broker.cluster.partition(topic, partition)
    if part is None:
        return ErrorCode.not_leader_or_follower
    error = await part.wait_committed(offset, timeout)
    if error == ErrorCode.none:
        info = broker.topics.get(topic)
        needed = int(info.configs.get("min.insync.replicas", broker.config["min.insync.replicas"])) if info else 1
        if len(part.isr) < needed:
            return ErrorCode.not_enough_replicas_after_append
    return error


@handles(KEY, "Produce", 3, 9)
async def handle(broker, header, request):
    acks = request.acks
    topics = []
    waits = []
    for topic in request.topic_data:
        results = []
        for pdata in topic.partition_data:
            if acks not in (0, 1, ACKS_ALL):
                error, base, start, message, end = ErrorCode.invalid_required_acks, -1, -1, None, -1
            else:
                error, base, start, message, end = append_partition(broker, topic.name, pdata.index, pdata.records,
                                                                    acks)
            result = [pdata.index, error.value, base, start, message]
            results.append(result)
            if acks == ACKS_ALL and broker.cluster is not None and error == ErrorCode.none:
                waits.append((result, topic.name, pdata.index, end))
        topics.append((topic.name, results))
    if waits:
        timeout = max(ms(request.timeout), 0) / 1000
        outcomes = await asyncio.gather(*(wait_committed(broker, t, p, end, timeout) for _, t, p, end in waits))
        for (result, _, _, _), outcome in zip(waits, outcomes):
            if outcome != ErrorCode.none:
                result[1], result[2] = outcome.value, -1
    if acks == 0:
        return NO_RESPONSE
    return RawResponse([produce_response.encode(header.api_version, header.correlation_id, topics)])
