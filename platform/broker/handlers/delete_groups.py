"""DeleteGroups (key 42), v0–2: delete groups that have no members, with their committed offsets (Kafka's rules:
Delete on the Group resource or GROUP_AUTHORIZATION_FAILED, NOT_COORDINATOR from a broker that does not coordinate
the group, GROUP_ID_NOT_FOUND for an unknown group, NON_EMPTY_GROUP while it has members)."""

from broker.handlers.registry import handles
from broker.protocol.messages import ErrorCode, build, nested, response_class
from broker.security import access

KEY = 42


@handles(KEY, "DeleteGroups", 0, 2)
async def handle(broker, header, request):
    cls = response_class(KEY, header.api_version)
    result_cls = nested(cls, "DeletableGroupResult")
    results = []
    for group_id in dict.fromkeys(request.groups_names):  # a group named twice is answered once, as Kafka
        if not access.allowed(broker, "Delete", access.GROUP, group_id):
            error = ErrorCode.group_authorization_failed
        else:
            error = await broker.groups.delete(group_id)
        results.append(build(result_cls, group_id=group_id, error_code=error))
    return build(cls, throttle_time=0, results=tuple(results))
