"""ListOffsets (key 2), v1–7: earliest (-2), latest (-1), max timestamp (-3), or the first offset whose
timestamp is at or after a given time (time index, then the records of one batch).

A timestamp lookup decompresses and walks the records of a batch (bounded: ``record_reader``), so that scan
runs in a worker thread; the index lookups and the read of the batch (``PartitionLog.timestamp_batches``) stay
on the event loop, which owns the log (its indexes are not thread-safe). A batch in
the log that cannot be read answers CORRUPT_MESSAGE for that partition (what Kafka answers when a read throws
CorruptRecordException), a failed read KAFKA_STORAGE_ERROR; the other partitions are answered normally.
"""

import asyncio
import logging

from broker.handlers.registry import handles
from broker.protocol.messages import ErrorCode, build, nested, response_class
from broker.security import access
from broker.protocol.record_reader import first_at_or_after
from broker.protocol.records import InvalidBatch

KEY = 2
LATEST, EARLIEST, MAX_TIMESTAMP = -1, -2, -3
log = logging.getLogger(__name__)


async def offset_for_timestamp(plog, timestamp: int) -> tuple[int, int] | None:
    """``PartitionLog.offset_for_timestamp`` with the record scans in a worker thread."""
    for batch in plog.timestamp_batches(timestamp):
        hit = await asyncio.to_thread(first_at_or_after, batch, timestamp, plog.log_start_offset)
        if hit is not None:
            return hit
    return None


async def lookup(plog, timestamp: int, read_committed: bool = False) -> tuple[ErrorCode, int, int]:
    """(error, timestamp, offset) answering one partition's query; (-1, -1) when no record is that recent.
    ``latest`` is the last stable offset for read_committed consumers (isolation level 1)."""
    if timestamp == LATEST:
        return ErrorCode.none, -1, plog.last_stable_offset if read_committed else plog.high_watermark
    if timestamp == EARLIEST:
        return ErrorCode.none, -1, plog.log_start_offset
    if timestamp == MAX_TIMESTAMP:
        timestamp = plog.max_timestamp
        if timestamp < 0:
            return ErrorCode.none, -1, -1
    try:
        found = await offset_for_timestamp(plog, timestamp)
    except InvalidBatch as exc:
        log.warning("ListOffsets %s-%d at %d: unreadable batch: %s", plog.topic, plog.partition, timestamp, exc)
        return ErrorCode.corrupt_message, -1, -1
    except OSError as exc:
        log.warning("ListOffsets %s-%d at %d: %s", plog.topic, plog.partition, timestamp, exc)
        return ErrorCode.kafka_storage_error, -1, -1
    return (ErrorCode.none, *found) if found is not None else (ErrorCode.none, -1, -1)


@handles(KEY, "ListOffsets", 1, 7)
async def handle(broker, header, request):
    cls = response_class(KEY, header.api_version)
    topic_cls = nested(cls, "ListOffsetsTopicResponse")
    partition_cls = nested(cls, "ListOffsetsPartitionResponse")
    topics = []
    read_committed = int(getattr(request, "isolation_level", 0)) == 1
    for topic in request.topics:
        info = broker.topics.get(topic.name)
        results = []
        describable = access.allowed(broker, "Describe", access.TOPIC, topic.name)
        for p in topic.partitions:
            if not describable:
                results.append(build(partition_cls, partition_index=p.partition_index,
                                     error_code=ErrorCode.topic_authorization_failed, timestamp=-1, offset=-1))
                continue
            if info is None or not 0 <= p.partition_index < info.partitions:
                results.append(build(partition_cls, partition_index=p.partition_index,
                                     error_code=ErrorCode.unknown_topic_or_partition, timestamp=-1, offset=-1))
                continue
            error, plog = broker.leader_log(topic.name, p.partition_index,
                                            getattr(p, "current_leader_epoch", -1))
            if plog is None:
                results.append(build(partition_cls, partition_index=p.partition_index, error_code=error,
                                     timestamp=-1, offset=-1))
                continue
            error, timestamp, offset = await lookup(plog, p.timestamp, read_committed)
            results.append(build(partition_cls, partition_index=p.partition_index, error_code=error,
                                 timestamp=timestamp, offset=offset, leader_epoch=plog.leader_epoch))
        topics.append(build(topic_cls, name=topic.name, partitions=tuple(results)))
    return build(cls, throttle_time=0, topics=tuple(topics))
