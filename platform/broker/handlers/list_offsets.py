"""ListOffsets (key 2), v1–7: earliest (-2), latest (-1), max timestamp (-3), or the first offset whose
timestamp is at or after a given time (time index, then the records of one batch)."""

from broker.handlers.registry import handles
from broker.protocol.messages import ErrorCode, build, nested, response_class

KEY = 2
LATEST, EARLIEST, MAX_TIMESTAMP = -1, -2, -3


def lookup(plog, timestamp: int) -> tuple[int, int]:
    """(timestamp, offset) answering one partition's query; (-1, -1) when no record is that recent."""
    if timestamp == LATEST:
        return -1, plog.high_watermark
    if timestamp == EARLIEST:
        return -1, plog.log_start_offset
    if timestamp == MAX_TIMESTAMP:
        found = plog.offset_of_max_timestamp()
        return found if found is not None else (-1, -1)
    found = plog.offset_for_timestamp(timestamp)
    return found if found is not None else (-1, -1)


@handles(KEY, "ListOffsets", 1, 7)
def handle(broker, header, request):
    cls = response_class(KEY, header.api_version)
    topic_cls = nested(cls, "ListOffsetsTopicResponse")
    partition_cls = nested(cls, "ListOffsetsPartitionResponse")
    topics = []
    for topic in request.topics:
        info = broker.topics.get(topic.name)
        results = []
        for p in topic.partitions:
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
            timestamp, offset = lookup(plog, p.timestamp)
            results.append(build(partition_cls, partition_index=p.partition_index, error_code=0,
                                 timestamp=timestamp, offset=offset, leader_epoch=plog.leader_epoch))
        topics.append(build(topic_cls, name=topic.name, partitions=tuple(results)))
    return build(cls, throttle_time=0, topics=tuple(topics))
