"""DescribeGroups (key 15), v0–5: state, protocol and members (with their metadata and assignment). A group known
only by its committed offsets is Empty, an unknown one Dead (no error), as in Kafka. v3+ with
``include_authorized_operations``: the principal's operations on each group it may Describe, as a bit field."""

from broker.groups.consumer_group import ConsumerGroup
from broker.groups.stores import encode_assignment
from broker.handlers.registry import handles
from broker.protocol.messages import ErrorCode, build, nested, response_class
from broker.security import access

KEY = 15


@handles(KEY, "DescribeGroups", 0, 5)
async def handle(broker, header, request):
    cls = response_class(KEY, header.api_version)
    group_cls = nested(cls, "DescribedGroup")
    member_cls = nested(cls, "DescribedGroupMember")
    out = []
    wanted = getattr(request, "include_authorized_operations", False)
    for group_id in request.groups:
        if not access.allowed(broker, "Describe", access.GROUP, group_id):
            error, group = ErrorCode.group_authorization_failed, None
        else:
            error, group = broker.groups.describe(group_id)
        if group is None:
            state = ""
            if error == ErrorCode.none:
                state = "Empty" if await broker.groups.has_offsets(group_id) else "Dead"
            out.append(build(group_cls, error_code=error, group_id=group_id, group_state=state,
                             protocol_type="consumer" if state == "Empty" else "",
                             protocol_data="", members=(), authorized_operations=_operations(
                                 broker, group_id, wanted and error == ErrorCode.none)))
            continue
        if isinstance(group, ConsumerGroup):  # the "consumer" protocol: assignments in the classic encoding
            members = tuple(build(member_cls, member_id=m.member_id, group_instance_id=m.instance_id,
                                  client_id=m.client_id, client_host=m.client_host, member_metadata=b"",
                                  member_assignment=encode_assignment(m.assigned)) for m in group.members.values())
            protocol_type, protocol = "consumer", group.assignor
        else:
            members = tuple(build(member_cls, member_id=m.member_id, group_instance_id=m.group_instance_id,
                                  client_id=m.client_id, client_host=m.client_host,
                                  member_metadata=m.metadata_for(group.protocol) if group.protocol else b"",
                                  member_assignment=m.assignment) for m in group.members.values())
            protocol_type, protocol = group.protocol_type or "", group.protocol or ""
        out.append(build(group_cls, error_code=0, group_id=group_id, group_state=group.state,
                         protocol_type=protocol_type, protocol_data=protocol,
                         members=members, authorized_operations=_operations(broker, group_id, wanted)))
    return build(cls, throttle_time=0, groups=tuple(out))


def _operations(broker, group_id: str, wanted: bool) -> int:
    return access.authorized_operations(broker, access.GROUP, group_id) if wanted else access.NOT_REQUESTED
