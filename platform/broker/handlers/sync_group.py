"""SyncGroup (key 14), v0–5: the leader hands in the assignment; every member gets its part. From v3 a static
member's old member id is answered FENCED_INSTANCE_ID."""

from broker.handlers.registry import handles
from broker.protocol.messages import ErrorCode, build, response_class
from broker.security import access

KEY = 14


@handles(KEY, "SyncGroup", 0, 5)
async def handle(broker, header, request):
    cls = response_class(KEY, header.api_version)
    if not access.allowed(broker, "Read", access.GROUP, request.group_id):
        return build(cls, throttle_time=0, error_code=ErrorCode.group_authorization_failed, assignment=b"",
                     protocol_type=None, protocol_name=None)
    error, assignment = await broker.groups.sync(request.group_id, request.member_id, request.generation_id,
                                                 {a.member_id: a.assignment for a in request.assignments},
                                                 getattr(request, "group_instance_id", None))
    group = broker.groups.groups.get(request.group_id)
    return build(cls, throttle_time=0, error_code=error, assignment=assignment,
                 protocol_type=group.protocol_type if group else None, protocol_name=group.protocol if group else None)
