"""FindCoordinator (key 10), v0–4: the broker coordinating a consumer group (rendezvous hash over live brokers,
see :mod:`broker.groups.coordinator`) or a transactional id (key type 1: the leader of its partition of
``__transaction_state``, created on first need; COORDINATOR_NOT_AVAILABLE, which clients retry, until it has
leaders)."""

from broker.handlers.registry import handles
from broker.protocol.messages import ErrorCode, build, nested, response_class
from broker.security import access

KEY = 10
GROUP, TRANSACTION = 0, 1


async def locate(broker, key: str, key_type: int) -> tuple[ErrorCode, int, str, int]:
    if key_type == TRANSACTION and not access.allowed(broker, "Describe", access.TRANSACTIONAL_ID, key):
        return ErrorCode.transactional_id_authorization_failed, -1, "", -1
    if key_type == GROUP and not access.allowed(broker, "Describe", access.GROUP, key):
        return ErrorCode.group_authorization_failed, -1, "", -1
    if key_type == TRANSACTION:
        error, node = await broker.txn.locate(key)
        if error != ErrorCode.none:
            return error, -1, "", -1
    elif key_type != GROUP:
        return ErrorCode.invalid_request, -1, "", -1
    elif not key:
        return ErrorCode.invalid_group_id, -1, "", -1
    else:
        node = broker.groups.coordinator_id(key)
    for node_id, host, port, _rack in broker.live_brokers():
        if node_id == node:
            return ErrorCode.none, node_id, host, port
    return ErrorCode.coordinator_not_available, -1, "", -1


@handles(KEY, "FindCoordinator", 0, 4)
async def handle(broker, header, request):
    cls = response_class(KEY, header.api_version)
    key_type = getattr(request, "key_type", GROUP)
    if header.api_version >= 4:
        coordinator_cls = nested(cls, "Coordinator")
        found = []
        for key in request.coordinator_keys:
            error, node, host, port = await locate(broker, key, key_type)
            found.append(build(coordinator_cls, key=key, node_id=node, host=host, port=port, error_code=error,
                               error_message=None))
        return build(cls, throttle_time=0, coordinators=tuple(found))
    error, node, host, port = await locate(broker, request.key, key_type)
    return build(cls, throttle_time=0, error_code=error, error_message=None, node_id=node, host=host, port=port)
