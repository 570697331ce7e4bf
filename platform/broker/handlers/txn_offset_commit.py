"""TxnOffsetCommit (key 28), v0–3: offsets committed in a transaction, sent to the group's coordinator; they
count once the transaction commits (:mod:`broker.txn.offsets`). v3 carries the member id, generation and
group instance id, checked like an OffsetCommit's (KIP-447: a zombie from an older generation is refused)."""

from broker.handlers.registry import handles
from broker.handlers.txn_errors import for_version
from broker.protocol.messages import ErrorCode, build, nested, response_class
from broker.security import access

KEY = 28


@handles(KEY, "TxnOffsetCommit", 0, 3)
async def handle(broker, header, request):
    cls = response_class(KEY, header.api_version)
    topic_cls = nested(cls, "TxnOffsetCommitResponseTopic")
    partition_cls = nested(cls, "TxnOffsetCommitResponsePartition")
    offsets = {(t.name, p.partition_index): (p.committed_offset, p.committed_metadata or "")
               for t in request.topics for p in t.partitions}
    refused = None
    if not access.allowed(broker, "Write", access.TRANSACTIONAL_ID, request.transactional_id):
        refused = ErrorCode.transactional_id_authorization_failed
    elif not access.allowed(broker, "Read", access.GROUP, request.group_id):
        refused = ErrorCode.group_authorization_failed
    unreadable = {t.name for t in request.topics if not access.allowed(broker, "Read", access.TOPIC, t.name)}
    if refused is not None or unreadable:
        topics = tuple(build(topic_cls, name=t.name, partitions=tuple(
            build(partition_cls, partition_index=p.partition_index,
                  error_code=refused or (ErrorCode.topic_authorization_failed if t.name in unreadable
                                         else ErrorCode.operation_not_attempted)) for p in t.partitions))
            for t in request.topics)
        return build(cls, throttle_time=0, topics=topics)
    error = await broker.txn.offsets.commit(request.group_id, request.producer_id, request.producer_epoch,
                                            getattr(request, "generation_id", -1), getattr(request, "member_id", ""),
                                            getattr(request, "group_instance_id", None), offsets)
    error = for_version(error, header.api_version)
    topics = tuple(build(topic_cls, name=t.name, partitions=tuple(
        build(partition_cls, partition_index=p.partition_index, error_code=error) for p in t.partitions))
        for t in request.topics)
    return build(cls, throttle_time=0, topics=topics)
