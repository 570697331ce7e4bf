"""IncrementalAlterConfigs (key 44), v0–1: SET, DELETE, APPEND and SUBTRACT on a topic's configs (stored in
``/config/topics/<topic>`` in cluster mode; every broker's logs pick the change up). Dynamic broker configs are
not supported (INVALID_REQUEST)."""

from broker.handlers.registry import handles
from broker.metadata.topic_configs import TOPIC_CONFIGS
from broker.metadata.topics import TopicError
from broker.protocol.messages import ErrorCode, build, nested, response_class
from broker.security import access

KEY = 44
TOPIC, BROKER = 2, 4
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3
LIST_CONFIGS = {name for name, d in TOPIC_CONFIGS.items() if d.type == "LIST"}


def apply(current: dict[str, str], changes) -> dict[str, str]:
    out = dict(current)
    for c in changes:
        if c.config_operation == SET:
            out[c.name] = c.value
        elif c.config_operation == DELETE:
            out.pop(c.name, None)
        elif c.config_operation in (APPEND, SUBTRACT):
            if c.name not in LIST_CONFIGS:  # Kafka's words (for SUBTRACT too)
                verb = "append" if c.config_operation == APPEND else "subtract"
                raise TopicError("invalid_config", f"Config value {verb} is not allowed for config key: {c.name}")
            items = [i for i in out.get(c.name, "").split(",") if i]
            for item in (c.value or "").split(","):
                if c.config_operation == APPEND and item and item not in items:
                    items.append(item)
                elif c.config_operation == SUBTRACT and item in items:
                    items.remove(item)
            out[c.name] = ",".join(items)
        else:
            raise TopicError("invalid_request", f"unknown config operation {c.config_operation}")
    return out


@handles(KEY, "IncrementalAlterConfigs", 0, 1)
async def handle(broker, header, request):
    cls = response_class(KEY, header.api_version)
    result_cls = nested(cls, "AlterConfigsResourceResponse")
    out = []
    for res in request.resources:
        error, message = ErrorCode.none, None
        try:
            if res.resource_type == TOPIC and not access.allowed(broker, "AlterConfigs", access.TOPIC,
                                                                 res.resource_name):
                raise TopicError("topic_authorization_failed", "Authorization failed.")
            if res.resource_type != TOPIC and not access.on_cluster(broker, "AlterConfigs"):
                raise TopicError("cluster_authorization_failed", "Authorization failed.")
            if res.resource_type != TOPIC:
                raise TopicError("invalid_request", "only topic configs can be altered")
            info = broker.topics.get(res.resource_name)
            if info is None:
                raise TopicError("unknown_topic_or_partition", f"topic {res.resource_name!r} does not exist")
            await broker.alter_topic_configs(res.resource_name, apply(info.configs, res.configs),
                                             validate_only=request.validate_only)
        except TopicError as exc:
            error, message = ErrorCode[exc.error], str(exc)
        out.append(build(result_cls, error_code=error, error_message=message, resource_type=res.resource_type,
                         resource_name=res.resource_name))
    return build(cls, throttle_time=0, responses=tuple(out))
