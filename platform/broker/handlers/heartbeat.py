"""Heartbeat (key 12), v0–4: keeps a member's session; REBALANCE_IN_PROGRESS tells it to rejoin; from v3 a
static member's old member id is answered FENCED_INSTANCE_ID."""

from broker.handlers.registry import handles
from broker.protocol.messages import ErrorCode, build, response_class
from broker.security import access

KEY = 12


@handles(KEY, "Heartbeat", 0, 4)
def handle(broker, header, request):
    cls = response_class(KEY, header.api_version)
    if not access.allowed(broker, "Read", access.GROUP, request.group_id):
        return build(cls, throttle_time=0, error_code=ErrorCode.group_authorization_failed)
    error = broker.groups.heartbeat(request.group_id, request.member_id, request.generation_id,
                                   getattr(request, "group_instance_id", None))
    return build(cls, throttle_time=0, error_code=error)
