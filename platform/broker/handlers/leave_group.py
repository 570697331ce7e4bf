"""LeaveGroup (key 13), v0–5 (v3+: several members at once, each a member id and/or a group instance id; an
empty member id removes a static member by instance id): the group rebalances without them."""

from broker.handlers.registry import handles
from broker.protocol.messages import ErrorCode, build, nested, response_class
from broker.security import access

KEY = 13


@handles(KEY, "LeaveGroup", 0, 5)
def handle(broker, header, request):
    cls = response_class(KEY, header.api_version)
    if not access.allowed(broker, "Read", access.GROUP, request.group_id):
        return build(cls, throttle_time=0, error_code=ErrorCode.group_authorization_failed, members=())
    if header.api_version >= 3:
        members = [(m.member_id, m.group_instance_id) for m in request.members]
    else:
        members = [(request.member_id, None)]
    error, results = broker.groups.leave(request.group_id, members)
    if header.api_version < 3:
        return build(cls, throttle_time=0, error_code=results[0] if results else error)
    member_cls = nested(cls, "MemberResponse")
    return build(cls, throttle_time=0, error_code=error, members=tuple(
        build(member_cls, member_id=m, group_instance_id=i, error_code=r) for (m, i), r in zip(members, results)))
