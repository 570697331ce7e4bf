"""JoinGroup (key 11), v0–9: join a group's next generation; the answer waits for the rebalance
(see :mod:`broker.groups.group`). From v4 a new member first gets MEMBER_ID_REQUIRED and its id (KIP-394); from v5
a static member (``group_instance_id``, KIP-345) gets its id at once and, rejoining, its old place; v9 tells a
static leader that rejoined a stable group to skip the assignment."""

from broker.handlers.registry import handles
from broker.network.session import current_session
from broker.protocol.messages import ErrorCode, build, ms, nested, response_class
from broker.security import access

KEY = 11


def client_host() -> str:
    """The member's host as Kafka reports it (DescribeGroups, kafka-consumer-groups.sh's HOST): ``/`` + address."""
    session = current_session.get()
    return f"/{session.host}" if session is not None and session.host else "unknown"


@handles(KEY, "JoinGroup", 0, 9)
async def handle(broker, header, request):
    version = header.api_version
    cls = response_class(KEY, version)
    member_cls = nested(cls, "JoinGroupResponseMember")
    if not access.allowed(broker, "Read", access.GROUP, request.group_id):
        return build(cls, throttle_time=0, error_code=ErrorCode.group_authorization_failed, generation_id=-1,
                     protocol_type=None, protocol_name="" if version < 7 else None, leader="", skip_assignment=False,
                     member_id=request.member_id, members=())
    session_ms = ms(request.session_timeout)
    rebalance_ms = ms(request.rebalance_timeout) if hasattr(request, "rebalance_timeout") else session_ms
    result = await broker.groups.join(
        request.group_id, request.member_id, getattr(request, "group_instance_id", None), header.client_id or "",
        client_host(), session_ms, rebalance_ms, request.protocol_type,
        [(p.name, p.metadata) for p in request.protocols], require_known_member_id=version >= 4,
        supports_skip_assignment=version >= 9)
    members = tuple(build(member_cls, member_id=m, group_instance_id=i, metadata=meta)
                    for m, i, meta in result.members)
    return build(cls, throttle_time=0, error_code=result.error, generation_id=result.generation,
                 protocol_type=result.protocol_type, protocol_name=result.protocol or ("" if version < 7 else None),
                 leader=result.leader, skip_assignment=result.skip_assignment, member_id=result.member_id, members=members)
