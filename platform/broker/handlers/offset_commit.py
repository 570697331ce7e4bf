"""OffsetCommit (key 8), v2–9: a member's (or, with generation -1, a standalone consumer's) committed offsets,
kept in the offset registry (ZooKeeper ``/consumers/<group>/offsets/<topic>/<partition>``)."""

from broker.handlers.registry import handles
from broker.protocol.messages import ErrorCode, build, nested, response_class
from broker.security import access

KEY = 8


@handles(KEY, "OffsetCommit", 2, 9)
async def handle(broker, header, request):
    cls = response_class(KEY, header.api_version)
    topic_cls = nested(cls, "OffsetCommitResponseTopic")
    partition_cls = nested(cls, "OffsetCommitResponsePartition")
    offsets = {}
    bad = set()
    refused = {}  # (topic, partition) -> an authorization error
    group_ok = access.allowed(broker, "Read", access.GROUP, request.group_id)
    for topic in request.topics:
        info = broker.topics.get(topic.name)
        readable = group_ok and access.allowed(broker, "Read", access.TOPIC, topic.name)
        for p in topic.partitions:
            if not group_ok:
                refused[(topic.name, p.partition_index)] = ErrorCode.group_authorization_failed
            elif not readable:
                refused[(topic.name, p.partition_index)] = ErrorCode.topic_authorization_failed
            elif info is None or not 0 <= p.partition_index < info.partitions:
                bad.add((topic.name, p.partition_index))
            else:
                offsets[(topic.name, p.partition_index)] = (p.committed_offset, p.committed_metadata or "")
    error = ErrorCode.none
    if offsets:
        error = await broker.groups.commit(request.group_id, request.member_id,
                                           request.generation_id_or_member_epoch, offsets,
                                           getattr(request, "group_instance_id", None), header.api_version)
    topics = tuple(build(topic_cls, name=topic.name, partitions=tuple(
        build(partition_cls, partition_index=p.partition_index,
              error_code=refused.get((topic.name, p.partition_index)) or (
                  ErrorCode.unknown_topic_or_partition if (topic.name, p.partition_index) in bad else error))
        for p in topic.partitions)) for topic in request.topics)
    return build(cls, throttle_time=0, topics=topics)
