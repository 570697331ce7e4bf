"""OffsetDelete (key 47), v0: delete a group's committed offsets for some partitions (``kafka-consumer-groups.sh
--delete-offsets``, kafka-python's ``delete_group_offsets``). Kafka's checks: Delete on the group
(GROUP_AUTHORIZATION_FAILED for the whole request), Read on each topic (TOPIC_AUTHORIZATION_FAILED), a topic that
exists (UNKNOWN_TOPIC_OR_PARTITION); the group's rules are ``broker.groups.offset_deletion``'s."""

from broker.groups.offset_deletion import delete_offsets
from broker.handlers.registry import handles
from broker.protocol.messages import ErrorCode, build, nested, response_class
from broker.security import access

KEY = 47


@handles(KEY, "OffsetDelete", 0, 0)
async def handle(broker, header, request):
    cls = response_class(KEY, header.api_version)
    topic_cls = nested(cls, "OffsetDeleteResponseTopic")
    partition_cls = nested(cls, "OffsetDeleteResponsePartition")
    if not access.allowed(broker, "Delete", access.GROUP, request.group_id):
        return build(cls, error_code=ErrorCode.group_authorization_failed, throttle_time=0, topics=())
    refused: dict[tuple[str, int], ErrorCode] = {}
    wanted = []
    for topic in request.topics:
        readable = access.allowed(broker, "Read", access.TOPIC, topic.name)
        known = broker.topics.get(topic.name) is not None
        for p in topic.partitions:
            key = (topic.name, p.partition_index)
            if not readable:
                refused[key] = ErrorCode.topic_authorization_failed
            elif not known:
                refused[key] = ErrorCode.unknown_topic_or_partition
            else:
                wanted.append(key)
    error, results = await delete_offsets(broker.groups, request.group_id, wanted)
    if error != ErrorCode.none:
        return build(cls, error_code=error, throttle_time=0, topics=())
    results.update(refused)
    topics = tuple(build(topic_cls, name=topic.name, partitions=tuple(
        build(partition_cls, partition_index=p.partition_index, error_code=results[(topic.name, p.partition_index)])
        for p in topic.partitions)) for topic in request.topics)
    return build(cls, error_code=ErrorCode.none, throttle_time=0, topics=topics)
