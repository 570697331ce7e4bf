"""DeleteTopics (key 20), v1–6 (by name; v6 also by topic id); the partitions deleted count against a client's
``controller_mutation_rate`` quota."""

from broker.client_quotas.manager import mutation_quota, mutations_throttle
from broker.handlers.registry import handles
from broker.metadata.topics import TopicError
from broker.protocol.messages import ErrorCode, build, nested, response_class
from broker.security import access

KEY = 20
STRICT_SINCE = 5  # KIP-599 (controller_mutation_rate: the partitions deleted)


@handles(KEY, "DeleteTopics", 1, 6)
async def handle(broker, header, request):
    cls = response_class(KEY, header.api_version)
    result_cls = nested(cls, "DeletableTopicResult")
    if header.api_version >= 6:
        wanted = [(t.name, t.topic_id) for t in request.topics]
    else:
        wanted = [(name, None) for name in request.topic_names]
    quota = mutation_quota(broker, header, STRICT_SINCE)
    results = []
    for name, topic_id in wanted:
        if name is None and topic_id is not None:
            found = broker.topics.by_id(topic_id)
            name = found.name if found else None
        error, message = ErrorCode.none, None
        info = broker.topics.get(name) if name else None
        try:
            if name and not access.allowed(broker, "Delete", access.TOPIC, name):
                raise TopicError("topic_authorization_failed", "Authorization failed.")
            if info is None:
                raise TopicError("unknown_topic_or_partition", f"topic {name or topic_id} does not exist")
            if quota is not None and quota.exceeded():
                raise TopicError("throttling_quota_exceeded", "The throttling quota has been exceeded.")
            await broker.delete_topic(name)
            if quota is not None:
                quota.record(info.partitions)
        except TopicError as exc:
            error, message = ErrorCode[exc.error], str(exc)
        results.append(build(result_cls, name=name, topic_id=info.topic_id if info else topic_id,
                             error_code=error, error_message=message))
    return build(cls, throttle_time=mutations_throttle(broker, quota), responses=tuple(results))
