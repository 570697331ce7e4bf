"""AlterPartitionReassignments (key 45, v0) and ListPartitionReassignments (key 46, v0): reassigning partitions
through the Kafka API (``kafka-reassign-partitions.sh`` with ``--bootstrap-server``, kafka-python's
``alter_partition_reassignments`` / ``list_partition_reassignments``). The active controller answers (NOT_CONTROLLER
elsewhere); Alter on the Cluster to alter, Describe to list, when ACLs are on. The work is
``broker.cluster.reassignments``'."""

from broker.cluster import reassignments
from broker.handlers.registry import handles
from broker.protocol.messages import ErrorCode, build, nested, response_class
from broker.security import access

ALTER, LIST = 45, 46
NOT_CONTROLLER = "This is not the correct controller for this cluster."
STANDALONE = "A standalone broker has no reassignments: its partitions have one replica."


def _refusal(broker, operation: str) -> tuple[ErrorCode, str] | None:
    if not access.allowed(broker, operation, access.CLUSTER):
        return ErrorCode.cluster_authorization_failed, "Not authorized to access the cluster."
    if broker.cluster is None:
        return ErrorCode.invalid_request, STANDALONE
    if not broker.cluster.controller.active:
        return ErrorCode.not_controller, NOT_CONTROLLER
    return None


@handles(ALTER, "AlterPartitionReassignments", 0, 0)
async def alter(broker, header, request):
    cls = response_class(ALTER, header.api_version)
    topic_cls = nested(cls, "ReassignableTopicResponse")
    partition_cls = nested(cls, "ReassignablePartitionResponse")
    refused = _refusal(broker, "Alter")
    if refused is not None:
        return build(cls, throttle_time=0, error_code=refused[0], error_message=refused[1], responses=())
    changes = {(t.name, p.partition_index): (None if p.replicas is None else [int(r) for r in p.replicas])
               for t in request.topics for p in t.partitions}
    outcomes = await reassignments.alter(broker.cluster.controller, changes)
    return build(cls, throttle_time=0, error_code=ErrorCode.none, error_message=None, responses=tuple(
        build(topic_cls, name=t.name, partitions=tuple(
            build(partition_cls, partition_index=p.partition_index,
                  error_code=ErrorCode[outcomes[(t.name, p.partition_index)][0]],
                  error_message=outcomes[(t.name, p.partition_index)][1]) for p in t.partitions))
        for t in request.topics))


@handles(LIST, "ListPartitionReassignments", 0, 0)
async def listing(broker, header, request):
    cls = response_class(LIST, header.api_version)
    topic_cls = nested(cls, "OngoingTopicReassignment")
    partition_cls = nested(cls, "OngoingPartitionReassignment")
    refused = _refusal(broker, "Describe")
    if refused is not None:
        return build(cls, throttle_time=0, error_code=refused[0], error_message=refused[1], topics=())
    wanted = None if request.topics is None else [(t.name, p) for t in request.topics for p in t.partition_indexes]
    found = await reassignments.ongoing(broker.cluster.controller, wanted)
    by_topic: dict[str, list] = {}
    for (topic, p), (replicas, adding, removing) in found.items():
        by_topic.setdefault(topic, []).append(build(partition_cls, partition_index=p, replicas=tuple(replicas),
                                                    adding_replicas=tuple(adding), removing_replicas=tuple(removing)))
    return build(cls, throttle_time=0, error_code=ErrorCode.none, error_message=None, topics=tuple(
        build(topic_cls, name=topic, partitions=tuple(parts)) for topic, parts in by_topic.items()))
