"""FindCoordinator (key 10), v0–4: the broker coordinating a consumer group (rendezvous hash over live brokers,
see :mod:`broker.groups.coordinator`). Transaction coordinators are not supported."""

from broker.handlers.registry import handles
from broker.protocol.messages import ErrorCode, build, nested, response_class

KEY = 10
GROUP, TRANSACTION = 0, 1


def locate(broker, key: str, key_type: int) -> tuple[ErrorCode, int, str, int]:
    if key_type != GROUP:
        return ErrorCode.coordinator_not_available, -1, "", -1
    if not key:
        return ErrorCode.invalid_group_id, -1, "", -1
    node = broker.groups.coordinator_id(key)
    for node_id, host, port, _rack in broker.live_brokers():
        if node_id == node:
            return ErrorCode.none, node_id, host, port
    return ErrorCode.coordinator_not_available, -1, "", -1


@handles(KEY, "FindCoordinator", 0, 4)
def handle(broker, header, request):
    cls = response_class(KEY, header.api_version)
    key_type = getattr(request, "key_type", GROUP)
    if header.api_version >= 4:
        coordinator_cls = nested(cls, "Coordinator")
        found = []
        for key in request.coordinator_keys:
            error, node, host, port = locate(broker, key, key_type)
            found.append(build(coordinator_cls, key=key, node_id=node, host=host, port=port, error_code=error,
                               error_message=None))
        return build(cls, throttle_time=0, coordinators=tuple(found))
    error, node, host, port = locate(broker, request.key, key_type)
    return build(cls, throttle_time=0, error_code=error, error_message=None, node_id=node, host=host, port=port)
