"""DescribeTopicPartitions (key 75), v0 (KIP-966): topics' partitions, page by page — kafka-python's
``describe_topic_partitions``, Kafka's ``kafka-topics.sh --describe`` since 3.8. Topics are taken in name order
(every topic the principal may Describe when the request names none), from the ``cursor``'s topic and partition
on; at most ``response_partition_limit`` partitions (capped at 2,000, Kafka's ``max.request.partition.size.limit``)
are answered, and ``next_cursor`` names the first one left. Each partition as Metadata answers it (leader, epoch,
replicas, ISR, offline replicas; no eligible leader replicas: logbus has no ELR, so the lists are empty). A topic
asked for that does not exist is UNKNOWN_TOPIC_OR_PARTITION, one the principal may not Describe
TOPIC_AUTHORIZATION_FAILED; a cursor naming a topic the request does not ask for is INVALID_REQUEST."""

from broker.handlers.registry import handles
from broker.protocol.messages import ErrorCode, build, nested, response_class
from broker.security import access

KEY = 75
LIMIT = 2000
INTERNAL = ("__consumer_offsets", "__transaction_state")


@handles(KEY, "DescribeTopicPartitions", 0, 0)
async def handle(broker, header, request):
    cls = response_class(KEY, header.api_version)
    topic_cls = nested(cls, "DescribeTopicPartitionsResponseTopic")
    partition_cls = nested(cls, "DescribeTopicPartitionsResponsePartition")
    cursor_cls = nested(cls, "Cursor")
    asked = sorted({t.name for t in request.topics})
    if asked:
        names = asked
    else:
        names = [n for n in sorted(broker.topics.topics) if access.allowed(broker, "Describe", access.TOPIC, n,
                                                                           quiet=True)]
    cursor = request.cursor
    if cursor is not None:
        if asked and cursor.topic_name not in asked:  # Kafka's error response: every topic INVALID_REQUEST
            return build(cls, throttle_time=0, next_cursor=None, topics=tuple(
                build(topic_cls, error_code=ErrorCode.invalid_request, name=name, topic_id=None, is_internal=False,
                      partitions=(), topic_authorized_operations=access.NOT_REQUESTED) for name in asked))
        names = [n for n in names if n >= cursor.topic_name]
    budget = max(0, min(request.response_partition_limit, LIMIT))
    topics, next_cursor = [], None
    for name in names:
        info = broker.topics.get(name)
        error = ErrorCode.none
        if asked and not access.allowed(broker, "Describe", access.TOPIC, name):
            info, error = None, ErrorCode.topic_authorization_failed
        elif info is None:
            error = ErrorCode.unknown_topic_or_partition
        partitions = []
        if info is not None:
            first = cursor.partition_index if cursor is not None and name == cursor.topic_name else 0
            for p in range(max(first, 0), info.partitions):
                if budget == 0:
                    next_cursor = build(cursor_cls, topic_name=name, partition_index=p)
                    break
                budget -= 1
                perror, leader, epoch, replicas, isr, offline = broker.partition_view(name, p)
                partitions.append(build(partition_cls, error_code=perror, partition_index=p, leader_id=leader,
                                        leader_epoch=epoch, replica_nodes=tuple(replicas), isr_nodes=tuple(isr),
                                        eligible_leader_replicas=(), last_known_elr=(),
                                        offline_replicas=tuple(offline)))
            if next_cursor is not None and not partitions:
                break  # nothing of this topic fits: the next page starts with it
        topics.append(build(topic_cls, error_code=error, name=name, topic_id=info.topic_id if info else None,
                            is_internal=name in INTERNAL, partitions=tuple(partitions),
                            topic_authorized_operations=access.authorized_operations(broker, access.TOPIC, name)
                            if error != ErrorCode.topic_authorization_failed else access.NOT_REQUESTED))
        if next_cursor is not None:
            break
    return build(cls, throttle_time=0, topics=tuple(topics), next_cursor=next_cursor)
