"""OffsetDelete's work on the group coordinator (``GroupCoordinator``): deleting a group's committed offsets for some
partitions, with Kafka's rules (``GroupCoordinator.handleDeleteOffsets``)."""

from __future__ import annotations

from broker.groups.consumer_group import HeartbeatError
from broker.groups.group import DEAD, GroupError
from broker.groups.stores import subscription_topics
from broker.log.storage_errors import incidents
from broker.protocol.messages import ErrorCode


async def delete_offsets(coord, group_id: str, partitions: list[tuple[str, int]]
                         ) -> tuple[ErrorCode, dict[tuple[str, int], ErrorCode]]:
    """OffsetDelete, Kafka's rules: a partition of a topic the group's live members subscribe to is
    GROUP_SUBSCRIBED_TO_TOPIC, the others' committed offsets go; a live group of another protocol type than
    "consumer" is NON_EMPTY_GROUP, a group that does not exist GROUP_ID_NOT_FOUND."""
    try:
        coord.check(group_id)
        modern = await coord.consumer_group(group_id)
    except (GroupError, HeartbeatError) as exc:
        return exc.error, {}
    group = coord.groups.get(group_id)
    committed = await coord._offsets(group_id)  # (the coordinator's cache, loaded from the store)
    if modern is not None and modern.members:
        subscribed = set(modern.topics)
    elif group is not None and group.members:
        if group.protocol_type != "consumer":
            return ErrorCode.non_empty_group, {}
        subscribed = {t for m in group.members.values()
                      for t in subscription_topics(m.metadata_for(group.protocol) if group.protocol
                                                   else m.protocols[0][1])}
    elif committed or (group is not None and group.state != DEAD):
        subscribed = set()
    else:
        return ErrorCode.group_id_not_found, {}
    results = {tp: ErrorCode.group_subscribed_to_topic if tp[0] in subscribed else ErrorCode.none
               for tp in partitions}
    gone = [tp for tp, error in results.items() if error == ErrorCode.none and tp in committed]
    if gone:
        try:
            await coord.store.delete_offsets(group_id, gone)
        except OSError as exc:  # standalone: the offsets file on a full disk
            incidents.failed(f"offset deletions in {getattr(coord.store, 'path', 'ZooKeeper')}", exc, group_id)
            return ErrorCode.not_coordinator, {}
        for tp in gone:
            committed.pop(tp, None)
    return ErrorCode.none, results
