"""Metadata (key 3), v0–12: brokers, topics and partition leaders; auto-creates topics when allowed.

With an authorizer: a request for all topics lists only those the principal may Describe; a named topic it may
not Describe is TOPIC_AUTHORIZATION_FAILED, and so is a missing one it may not Create (on the cluster or the
topic) when auto-creation would make it.

``include_topic_authorized_operations`` (v8+) and ``include_cluster_authorized_operations`` (v8–10): the principal's
operations on each topic and on the cluster as bit fields (:func:`access.authorized_operations`); the cluster's is 0
for a principal that may not Describe it, a topic refused with TOPIC_AUTHORIZATION_FAILED gets none, as in Kafka."""

from broker.handlers.registry import handles
from broker.metadata.topics import TopicError
from broker.protocol.messages import ErrorCode, build, nested, response_class
from broker.security import access

KEY = 3


@handles(KEY, "Metadata", 0, 12)
async def handle(broker, header, request):
    version = header.api_version
    cls = response_class(KEY, version)
    broker_cls = nested(cls, "MetadataResponseBroker")
    topic_cls = nested(cls, "MetadataResponseTopic")
    partition_cls = nested(cls, "MetadataResponsePartition")

    unknown = []
    if request.topics is None or (version == 0 and not request.topics):
        names = sorted(broker.topics.topics)  # v0: empty list means all; v1+: null means all
        if access.enabled(broker):
            names = [n for n in names if access.allowed(broker, "Describe", access.TOPIC, n, quiet=True)]
        auto_create = False
    else:
        names = []
        unknown_ids = []  # asked for by an id this cluster does not know: UNKNOWN_TOPIC_ID, as Kafka answers
        for item in request.topics:
            name = item.name
            if name is None:
                found = broker.topics.by_id(item.topic_id) if getattr(item, "topic_id", None) else None
                if found is None:
                    unknown_ids.append(getattr(item, "topic_id", None))
                    continue
                name = found.name
            names.append(name)
        auto_create = getattr(request, "allow_auto_topic_creation", True)
        unknown = [build(topic_cls, error_code=ErrorCode.unknown_topic_id, name=None if version >= 12 else "",
                         is_internal=False, partitions=(), topic_id=topic_id) for topic_id in unknown_ids]

    topics = []
    for name in names:
        error = ErrorCode.none
        info = broker.topics.get(name)
        if request.topics is not None and not access.allowed(broker, "Describe", access.TOPIC, name):
            info, error = None, ErrorCode.topic_authorization_failed
        elif info is None and auto_create and broker.config["auto.create.topics.enable"] and not (
                access.on_cluster(broker, "Create", quiet=True)
                or access.allowed(broker, "Create", access.TOPIC, name)):
            error = ErrorCode.topic_authorization_failed
        elif info is None and auto_create and broker.config["auto.create.topics.enable"]:
            try:
                info = await broker.create_topic(name, broker.config["num.partitions"],
                                                 broker.config["default.replication.factor"], {})
            except TopicError as exc:
                error = ErrorCode[exc.error]
        elif info is None:
            error = ErrorCode.unknown_topic_or_partition
        partitions = []
        if info is not None:
            for p in range(info.partitions):
                perror, leader, epoch, replicas, isr, offline = broker.partition_view(info.name, p)
                partitions.append(build(partition_cls, error_code=perror, partition_index=p, leader_id=leader,
                                        leader_epoch=epoch, replica_nodes=tuple(replicas), isr_nodes=tuple(isr),
                                        offline_replicas=tuple(offline)))
        topics.append(build(topic_cls, error_code=error, name=name, is_internal=name == "__transaction_state",
                            partitions=tuple(partitions),
                            topic_id=info.topic_id if info else None,
                            topic_authorized_operations=access.authorized_operations(broker, access.TOPIC, name)
                            if getattr(request, "include_topic_authorized_operations", False)
                            and error != ErrorCode.topic_authorization_failed else access.NOT_REQUESTED))
    brokers = tuple(build(broker_cls, node_id=node, host=host, port=port, rack=rack)
                    for node, host, port, rack in broker.live_brokers())
    cluster_operations = access.NOT_REQUESTED
    if getattr(request, "include_cluster_authorized_operations", False):
        cluster_operations = (access.authorized_operations(broker, access.CLUSTER)
                              if access.on_cluster(broker, "Describe", quiet=True) else 0)
    return build(cls, throttle_time=0, cluster_id=broker.cluster_id, controller_id=broker.controller_id,
                 brokers=brokers, topics=(*topics, *unknown), cluster_authorized_operations=cluster_operations)
