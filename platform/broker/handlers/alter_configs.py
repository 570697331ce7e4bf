"""AlterConfigs (key 33), v0–2, the non-incremental one: each resource's configs replace the whole set of its
overrides (a config left out goes back to its default). Topics as IncrementalAlterConfigs stores them (the
topic's overrides; ``/config/topics/<topic>`` in cluster mode). Errors per resource, with Kafka's codes:
an unknown topic UNKNOWN_TOPIC_OR_PARTITION, an unknown config or a bad value INVALID_CONFIG, a null value
INVALID_REQUEST. Broker configs are static in logbus: a BROKER resource that would change any is INVALID_REQUEST
(Kafka's answer for a config it cannot update dynamically), BROKER_LOGGER too (Kafka: AlterConfigs does not
support it). ``validate_only`` checks everything and changes nothing."""

from broker.handlers.registry import handles
from broker.metadata.topics import TopicError
from broker.protocol.messages import ErrorCode, build, nested, response_class
from broker.security import access

KEY = 33
TOPIC, BROKER, BROKER_LOGGER = 2, 4, 8


async def alter(broker, resource, validate_only: bool) -> None:
    """Apply one resource's new config set; raises TopicError with the Kafka error to answer."""
    configs = {c.name: c.value for c in resource.configs}
    if resource.resource_type == TOPIC and not access.allowed(broker, "AlterConfigs", access.TOPIC,
                                                              resource.resource_name):
        raise TopicError("topic_authorization_failed", "Authorization failed.")
    if resource.resource_type in (BROKER, BROKER_LOGGER) and not access.on_cluster(broker, "AlterConfigs"):
        raise TopicError("cluster_authorization_failed", "Authorization failed.")
    if resource.resource_type == TOPIC:
        nulls = sorted(name for name, value in configs.items() if value is None)
        if nulls:
            raise TopicError("invalid_request", f"Null value not supported for : {','.join(nulls)}")
        if broker.topics.get(resource.resource_name) is None:
            raise TopicError("unknown_topic_or_partition", f"Topic {resource.resource_name} does not exist")
        await broker.alter_topic_configs(resource.resource_name, configs, validate_only=validate_only)
    elif resource.resource_type == BROKER:
        if resource.resource_name not in ("", str(broker.node_id)):
            raise TopicError("invalid_request", f"Unexpected broker id, expected {broker.node_id} or empty string, "
                                                f"but received {resource.resource_name}")
        if configs:
            raise TopicError("invalid_request", "Cannot update these configs dynamically: "
                                                f"{', '.join(sorted(configs))} (logbus broker configs are static)")
    elif resource.resource_type == BROKER_LOGGER:
        raise TopicError("invalid_request", "AlterConfigs is deprecated and does not support the resource type "
                                            "BROKER_LOGGER")
    else:
        raise TopicError("invalid_request", f"Unsupported resource type {resource.resource_type}")


@handles(KEY, "AlterConfigs", 0, 2)
async def handle(broker, header, request):
    cls = response_class(KEY, header.api_version)
    result_cls = nested(cls, "AlterConfigsResourceResponse")
    out = []
    for res in request.resources:
        error, message = ErrorCode.none, None
        try:
            await alter(broker, res, request.validate_only)
        except TopicError as exc:
            error, message = ErrorCode[exc.error], str(exc)
        out.append(build(result_cls, error_code=error, error_message=message, resource_type=res.resource_type,
                         resource_name=res.resource_name))
    return build(cls, throttle_time=0, responses=tuple(out))
