"""DeleteRecords (key 21), v0–2: move partitions' log start offsets forward (``AdminClient.delete_records``,
``kafka-delete-records.sh``). Each partition's leader sets its log start to the offset asked for (-1: the high
watermark), deletes the segments wholly below it and answers the new ``low_watermark``; a consumer fetching below
it gets OFFSET_OUT_OF_RANGE and ListOffsets' earliest answers it. The log start offsets are checkpointed at once.

Kafka's errors: OFFSET_OUT_OF_RANGE past the high watermark (or below -1), POLICY_VIOLATION for a topic without
``delete`` in its cleanup.policy, TOPIC_AUTHORIZATION_FAILED without Delete on the topic, NOT_LEADER_OR_FOLLOWER,
UNKNOWN_TOPIC_OR_PARTITION. One difference: Kafka answers once every replica's log start has moved (its low
watermark is the lowest of them); here the leader answers once its own has, and followers take the leader's log
start from their next fetch."""

import asyncio

from broker.handlers.registry import handles
from broker.protocol.messages import ErrorCode, build, nested, response_class
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
            results.append(build(partition_cls, partition_index=p.partition_index, low_watermark=low,
                                 error_code=error))
        topics.append(build(topic_cls, name=topic.name, partitions=tuple(results)))
    if moved:  # durable before the answer: a restart does not bring the deleted records back
        broker.logs.checkpoint_starts()
    return build(cls, throttle_time=0, topics=tuple(topics))
