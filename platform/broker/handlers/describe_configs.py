"""DescribeConfigs (key 32), v1–4: effective topic configs (override or broker default: every topic config of
Kafka 3.x, see :mod:`broker.metadata.topic_configs`) with their source, type and, on request, synonyms; and
broker configs."""

from broker.config import SENSITIVE_KEYS
from broker.handlers.registry import handles
from broker.metadata.topic_configs import TOPIC_CONFIGS, TYPE_IDS, synonyms
from broker.protocol.messages import ErrorCode, build, nested, response_class
from broker.security import access

KEY = 32
TOPIC, BROKER = 2, 4


@handles(KEY, "DescribeConfigs", 1, 4)
def handle(broker, header, request):
    cls = response_class(KEY, header.api_version)
    result_cls = nested(cls, "DescribeConfigsResult")
    entry_cls = nested(cls, "DescribeConfigsResourceResult")
    synonym_cls = nested(cls, "DescribeConfigsSynonym")
    results = []
    for resource in request.resources:
        error, message, values, info = ErrorCode.none, None, {}, None
        if resource.resource_type == TOPIC and not access.allowed(broker, "DescribeConfigs", access.TOPIC,
                                                                  resource.resource_name):
            error, message = ErrorCode.topic_authorization_failed, "Authorization failed."
        elif resource.resource_type == BROKER and not access.on_cluster(broker, "DescribeConfigs"):
            error, message = ErrorCode.cluster_authorization_failed, "Authorization failed."
        elif resource.resource_type == TOPIC:
            info = broker.topics.get(resource.resource_name)
            if info is None:
                error, message = ErrorCode.unknown_topic_or_partition, f"topic {resource.resource_name!r} not found"
            else:
                values = broker.topic_config_values(info)
        elif resource.resource_type == BROKER:
            if resource.resource_name not in ("", str(broker.node_id)):
                error, message = ErrorCode.invalid_request, f"this is broker {broker.node_id}"
            else:
                values = broker.broker_config_values()
        else:
            error, message = ErrorCode.invalid_request, f"resource type {resource.resource_type} is not supported"
        wanted = resource.configuration_keys
        topic = resource.resource_type == TOPIC
        entries = tuple(
            build(entry_cls, name=k, value=None if k in SENSITIVE_KEYS else v, read_only=not topic,
                  config_source=source, is_sensitive=k in SENSITIVE_KEYS,
                  synonyms=tuple(build(synonym_cls, name=n, value=sv, source=ss)
                                 for n, sv, ss in synonyms(k, info.configs, broker.config))
                  if topic and request.include_synonyms else (),
                  config_type=TYPE_IDS[TOPIC_CONFIGS[k].type] if topic else 0, documentation=None)
            for k, (v, source) in values.items() if wanted is None or k in wanted)
        results.append(build(result_cls, error_code=error, error_message=message,
                             resource_type=resource.resource_type, resource_name=resource.resource_name,
                             configs=entries))
    return build(cls, throttle_time=0, results=tuple(results))
