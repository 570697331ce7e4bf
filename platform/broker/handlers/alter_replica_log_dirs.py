"""AlterReplicaLogDirs (key 34), v1–2: move replicas of this broker between its log dirs (kafka-python's
``alter_replica_log_dirs``, ``kafka-reassign-partitions.sh`` with ``log_dirs`` in its plan). Answered at once; the
move runs in the background (:mod:`broker.log.dir_mover`) and DescribeLogDirs lists the replica being built in the
destination as a future one until it takes over.

Kafka's answers per partition: LOG_DIR_NOT_FOUND for a path that is not one of ``log.dirs`` (compared as absolute
paths), KAFKA_STORAGE_ERROR for a replica whose log is offline, REPLICA_NOT_AVAILABLE for a partition this broker
holds no replica of (the destination is remembered, and the replica is created there if it comes: Kafka's
preferred log dir), CLUSTER_AUTHORIZATION_FAILED without Alter on the cluster. Asking for the dir a replica is in
gives up any move of it under way."""

import os

from broker.handlers.registry import handles
from broker.protocol.messages import ErrorCode, build, nested, response_class
from broker.security import access

KEY = 34


def _error(broker, topic: str, partition: int, destination: str) -> ErrorCode:
    if destination not in broker.log_dirs:
        return ErrorCode.log_dir_not_found
    if broker.logs.is_offline(topic, partition):
        return ErrorCode.kafka_storage_error
    if broker.logs.get(topic, partition) is None:
        broker.logs.preferred[(topic, partition)] = destination
        return ErrorCode.replica_not_available
    broker.dir_mover.request(topic, partition, destination)
    return ErrorCode.none


@handles(KEY, "AlterReplicaLogDirs", 1, 2)
async def handle(broker, header, request):
    cls = response_class(KEY, header.api_version)
    topic_cls = nested(cls, "AlterReplicaLogDirTopicResult")
    partition_cls = nested(cls, "AlterReplicaLogDirPartitionResult")
    allowed = access.allowed(broker, "Alter", access.CLUSTER)
    results: dict[str, list] = {}
    for entry in request.dirs:
        destination = os.path.abspath(entry.path)
        for topic in entry.topics:
            for partition in topic.partitions:
                error = (_error(broker, topic.name, partition, destination) if allowed
                         else ErrorCode.cluster_authorization_failed)
                results.setdefault(topic.name, []).append(
                    build(partition_cls, partition_index=partition, error_code=error))
    return build(cls, throttle_time=0, results=tuple(
        build(topic_cls, topic_name=name, partitions=tuple(parts)) for name, parts in results.items()))
