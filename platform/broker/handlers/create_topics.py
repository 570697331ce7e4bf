"""CreateTopics (key 19), v2–7, with per-topic configs (every Kafka 3.x topic config, checked as Kafka does: see
:mod:`broker.metadata.topic_configs`) and ``validate_only``; a client's ``controller_mutation_rate`` quota counts
the partitions created (:class:`broker.client_quotas.manager.MutationQuota`)."""

from broker.client_quotas.manager import mutation_quota, mutations_throttle
from broker.handlers.registry import handles
from broker.metadata.topics import TopicError
from broker.protocol.messages import ErrorCode, build, nested, response_class
from broker.security import access

KEY = 19
STRICT_SINCE = 6  # KIP-599: from v6 a request over the controller mutation quota is refused, below throttled


@handles(KEY, "CreateTopics", 2, 7)
async def handle(broker, header, request):
    cls = response_class(KEY, header.api_version)
    result_cls = nested(cls, "CreatableTopicResult")
    config_cls = nested(cls, "CreatableTopicConfigs") if header.api_version >= 5 else None
    quota = mutation_quota(broker, header, STRICT_SINCE)
    counts = {}
    for topic in request.topics:
        counts[topic.name] = counts.get(topic.name, 0) + 1
    results = []
    for topic in request.topics:
        error, message, info = ErrorCode.none, None, None
        partitions = topic.num_partitions
        replication = topic.replication_factor
        if partitions == -1:
            partitions = len(topic.assignments) or broker.config["num.partitions"]
        if replication == -1:
            replication = broker.config["default.replication.factor"]
        try:
            if not (access.on_cluster(broker, "Create", quiet=True)
                    or access.allowed(broker, "Create", access.TOPIC, topic.name)):
                raise TopicError("topic_authorization_failed", "Authorization failed.")
            if counts[topic.name] > 1:
                raise TopicError("invalid_request", f"topic {topic.name!r} appears more than once")
            assignment = None
            if topic.assignments:
                assignment = {a.partition_index: list(a.broker_ids) for a in topic.assignments}
                live = {b[0] for b in broker.live_brokers()}
                if (sorted(assignment) != list(range(len(assignment)))
                        or any(not r or len(set(r)) != len(r) or set(r) - live for r in assignment.values())
                        or len({len(r) for r in assignment.values()}) != 1):
                    raise TopicError("invalid_replica_assignment",
                                     "assignment must name partitions 0..n-1, each with distinct live brokers")
            nulls = [c.name for c in topic.configs if c.value is None]
            if nulls:  # Kafka's ZooKeeper-mode admin manager, same words
                raise TopicError("invalid_config", f"Null value not supported for topic configs: {','.join(nulls)}")
            configs = {c.name: c.value for c in topic.configs}
            if quota is not None and not request.validate_only and quota.exceeded():
                raise TopicError("throttling_quota_exceeded", "The throttling quota has been exceeded.")
            info = await broker.create_topic(topic.name, partitions, replication, configs,
                                             validate_only=request.validate_only, assignment=assignment)
            if quota is not None and not request.validate_only:
                quota.record(info.partitions)
        except TopicError as exc:
            error, message = ErrorCode[exc.error], str(exc)
        described = None
        if config_cls is not None and info is not None:
            described = tuple(build(config_cls, name=k, value=v, read_only=False, config_source=source,
                                    is_sensitive=False)
                              for k, (v, source) in broker.topic_config_values(info).items())
        results.append(build(result_cls, name=topic.name, topic_id=info.topic_id if info else None,
                             error_code=error, error_message=message,
                             num_partitions=info.partitions if info else -1,
                             replication_factor=info.replication_factor if info else -1, configs=described))
    return build(cls, throttle_time=mutations_throttle(broker, quota), topics=tuple(results))
