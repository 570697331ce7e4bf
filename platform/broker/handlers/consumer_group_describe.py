"""ConsumerGroupDescribe (key 69), v0–1: a group on the "consumer" protocol (KIP-848) as its coordinator sees it:
group and assignment epochs, the assignor, and per member its epoch, subscription, current and target assignment.
A classic or unknown group is GROUP_ID_NOT_FOUND, as in Kafka (the admin clients then fall back to
DescribeGroups)."""

from broker.groups.consumer_group import HeartbeatError, partitions_by_topic
from broker.groups.group import GroupError
from broker.handlers.registry import handles
from broker.protocol.messages import ErrorCode, build, nested, response_class
from broker.security import access

KEY = 69
CONSUMER_MEMBER = 1  # v1's MemberType: a member on the consumer protocol


@handles(KEY, "ConsumerGroupDescribe", 0, 1)
async def handle(broker, header, request):
    cls = response_class(KEY, header.api_version)
    group_cls, member_cls = nested(cls, "DescribedGroup"), nested(cls, "Member")
    assignment_cls, tp_cls = nested(cls, "Assignment"), nested(cls, "TopicPartitions")
    wanted = request.include_authorized_operations

    def assignment(partitions) -> object:
        return build(assignment_cls, topic_partitions=tuple(
            build(tp_cls, topic_id=broker.topics.get(t).topic_id, topic_name=t, partitions=tuple(ps))
            for t, ps in partitions_by_topic(partitions).items() if broker.topics.get(t) is not None))

    def failed(group_id: str, error: ErrorCode, message: str | None = None):
        return build(group_cls, error_code=error, error_message=message, group_id=group_id, group_state="",
                     group_epoch=-1, assignment_epoch=-1, assignor_name="", members=(),
                     authorized_operations=access.NOT_REQUESTED)

    out = []
    for group_id in request.group_ids:
        if not access.allowed(broker, "Describe", access.GROUP, group_id):
            out.append(failed(group_id, ErrorCode.group_authorization_failed))
            continue
        try:
            broker.groups.check(group_id)
        except GroupError as exc:
            out.append(failed(group_id, exc.error))
            continue
        try:
            group = await broker.groups.consumer_group(group_id)
        except HeartbeatError as exc:
            out.append(failed(group_id, exc.error))
            continue
        if group is None or not group.members:
            out.append(failed(group_id, ErrorCode.group_id_not_found, f"Group {group_id} is not a consumer group."))
            continue
        members = tuple(build(member_cls, member_id=m.member_id, instance_id=m.instance_id, rack_id=m.rack_id,
                              member_epoch=m.epoch, client_id=m.client_id, client_host=m.client_host,
                              subscribed_topic_names=tuple(m.topics), subscribed_topic_regex=m.regex,
                              assignment=assignment(m.assigned),
                              target_assignment=assignment(group.target.get(m.member_id, ())),
                              member_type=CONSUMER_MEMBER) for m in group.members.values())
        out.append(build(group_cls, error_code=ErrorCode.none, group_id=group_id, group_state=group.state,
                         group_epoch=group.epoch, assignment_epoch=group.assignment_epoch,
                         assignor_name=group.assignor, members=members,
                         authorized_operations=access.authorized_operations(broker, access.GROUP, group_id)
                         if wanted else access.NOT_REQUESTED))
    return build(cls, throttle_time=0, groups=tuple(out))
