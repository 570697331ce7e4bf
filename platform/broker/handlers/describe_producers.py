"""DescribeProducers (key 61), v0: the idempotent and transactional producers a partition's log knows — epoch,
last sequence, last batch's timestamp, coordinator epoch of their last marker, first offset of their open
transaction (KIP-664: how ``kafka-transactions.sh`` finds a hanging transaction; kafka-python's
``describe_producers``).

As in Kafka (``handleDescribeProducersRequest``): an invalid topic name is INVALID_TOPIC_EXCEPTION with the reason,
before the ACL check; then Read on the topic or TOPIC_AUTHORIZATION_FAILED; UNKNOWN_TOPIC_OR_PARTITION for a
partition that does not exist; any replica with the partition's log answers (a follower from its own copy), others
NOT_LEADER_OR_FOLLOWER."""

from broker.handlers.registry import handles
from broker.metadata.topics import TopicError, validate_topic_name
from broker.protocol.messages import ErrorCode, build, nested, response_class
from broker.security import access

KEY = 61


def _local_log(broker, topic: str, partition: int):
    """(error, log) of a partition this broker holds a replica of."""
    info = broker.topics.get(topic)
    if info is None or not 0 <= partition < info.partitions:
        return ErrorCode.unknown_topic_or_partition, None
    if broker.logs.is_offline(topic, partition):
        return ErrorCode.kafka_storage_error, None
    if broker.cluster is None:
        return broker.leader_log(topic, partition)
    part = broker.cluster.partition(topic, partition)
    if part is None or part.log is None:
        return ErrorCode.not_leader_or_follower, None
    return ErrorCode.none, part.log


@handles(KEY, "DescribeProducers", 0, 0)
async def handle(broker, header, request):
    cls = response_class(KEY, header.api_version)
    topic_cls = nested(cls, "TopicResponse")
    partition_cls = nested(cls, "PartitionResponse")
    producer_cls = nested(cls, "ProducerState")
    topics = []
    for topic in request.topics:
        invalid = None
        try:
            validate_topic_name(topic.name)
        except TopicError as exc:
            invalid = str(exc)
        permitted = invalid is None and access.allowed(broker, "Read", access.TOPIC, topic.name)
        partitions = []
        for index in topic.partition_indexes:
            if invalid is not None:
                partitions.append(build(partition_cls, partition_index=index, active_producers=(),
                                        error_code=ErrorCode.invalid_topic_exception, error_message=invalid))
                continue
            error, plog = (_local_log(broker, topic.name, index) if permitted
                           else (ErrorCode.topic_authorization_failed, None))
            producers = () if plog is None else tuple(
                build(producer_cls, producer_id=pid, producer_epoch=epoch, last_sequence=last_seq,
                      last_timestamp=last_ts, coordinator_epoch=coordinator_epoch, current_txn_start_offset=first)
                for pid, epoch, last_seq, last_ts, coordinator_epoch, first in plog.producers.active_producers())
            partitions.append(build(partition_cls, partition_index=index, error_code=error, error_message=None,
                                    active_producers=producers))
        topics.append(build(topic_cls, name=topic.name, partitions=tuple(partitions)))
    return build(cls, throttle_time=0, topics=tuple(topics))
