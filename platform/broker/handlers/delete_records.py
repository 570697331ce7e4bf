"""DeleteRecords (key 21), v0–2: move partitions' log start offsets forward (``AdminClient.delete_records``,
``kafka-delete-records.sh``). Each partition's leader sets its log start to the offset asked for (-1: the high
watermark), deletes the segments wholly below it and answers the new ``low_watermark``; a consumer fetching below
it gets OFFSET_OUT_OF_RANGE and ListOffsets' earliest answers it. The log start offsets are checkpointed at once.

Kafka's errors: OFFSET_OUT_OF_RANGE past the high watermark (or below -1), POLICY_VIOLATION for a topic without
``delete`` in its cleanup.policy, TOPIC_AUTHORIZATION_FAILED without Delete on the topic, NOT_LEADER_OR_FOLLOWER,
UNKNOWN_TOPIC_OR_PARTITION.

In a cluster the answer waits, as Kafka's (``DelayedDeleteRecords``), until every live replica's log starts at the
offset or later: followers take the leader's log start from their next fetch and report their own in the one after
(``log_start_offset`` of their fetch requests); the ``low_watermark`` answered is the lowest of the live replicas'
(:meth:`Partition.low_watermark`). A replica whose broker is down does not hold the answer back; one that is up but
does not catch up within the request's ``timeout_ms`` makes it REQUEST_TIMED_OUT (the leader's log start has
moved all the same)."""

import asyncio

from broker.handlers.registry import handles
from broker.protocol.messages import ErrorCode, build, ms, nested, response_class
from broker.security import access

KEY = 21
HIGH_WATERMARK = -1


@handles(KEY, "DeleteRecords", 0, 2)
async def handle(broker, header, request):
    cls = response_class(KEY, header.api_version)
    topic_cls = nested(cls, "DeleteRecordsTopicResult")
    partition_cls = nested(cls, "DeleteRecordsPartitionResult")
    loop = asyncio.get_running_loop()
    moved = False
    waits = []  # (the result list, its index, the partition, the offset) to complete once the replicas have it
    topics = []
    for topic in request.topics:
        info = broker.topics.get(topic.name)
        allowed = access.allowed(broker, "Delete", access.TOPIC, topic.name)
        results = []
        for p in topic.partitions:
            error, low = ErrorCode.none, -1
            if not allowed:
                error = ErrorCode.topic_authorization_failed
            elif info is None or not 0 <= p.partition_index < info.partitions:
                error = ErrorCode.unknown_topic_or_partition
            else:
                error, plog = broker.leader_log(topic.name, p.partition_index)
                if plog is not None:
                    offset = plog.high_watermark if p.offset == HIGH_WATERMARK else p.offset
                    if "delete" not in plog.config.cleanup_policy.split(","):
                        error = ErrorCode.policy_violation
                    elif not 0 <= offset <= plog.high_watermark:
                        error = ErrorCode.offset_out_of_range
                    else:
                        before = plog.log_start_offset
                        low = plog.advance_start(offset, loop.call_later)
                        moved = moved or low != before
                        if broker.cluster is not None:
                            waits.append((results, len(results), broker.cluster.partition(topic.name,
                                                                                         p.partition_index), offset))
            results.append((p.partition_index, low, error))
        topics.append((topic.name, results))
    if moved:  # durable before the answer: a restart does not bring the deleted records back
        broker.logs.checkpoint_starts()
    if waits:
        timeout = max(ms(request.timeout), 0) / 1000
        alive = broker.cluster.metadata.brokers.keys
        outcomes = await asyncio.gather(*(part.wait_low_watermark(offset, timeout, alive)
                                          for _, _, part, offset in waits))
        for (results, i, _, _), (error, low) in zip(waits, outcomes):
            results[i] = (results[i][0], low, error)
    return build(cls, throttle_time=0, topics=tuple(
        build(topic_cls, name=name, partitions=tuple(
            build(partition_cls, partition_index=index, low_watermark=low, error_code=error)
            for index, low, error in results)) for name, results in topics))
