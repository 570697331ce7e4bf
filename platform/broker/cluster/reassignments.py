"""Partition reassignments asked through the Kafka API (AlterPartitionReassignments, ListPartitionReassignments),
on the active controller, over the same ``/admin/reassign_partitions`` znode that ``logbus reassign-partitions``
writes and the controller carries out (``Controller.reconcile``: new replicas added, caught up, old ones dropped).

Altering sets a partition's target (replacing one under way) or, with no replicas, cancels it: the partition's
replicas go back to those it had before (the adding ones dropped), as Kafka's cancellation reverts. Kafka's
errors: UNKNOWN_TOPIC_OR_PARTITION, INVALID_REPLICA_ASSIGNMENT (an empty list, a broker twice, a broker that is
not registered), NO_REASSIGNMENT_IN_PROGRESS for a cancellation of nothing. Listing shows the ongoing ones as
Kafka does: the replicas (target first, then the original ones leaving), the adding and the removing replicas."""

from __future__ import annotations

from kazoo.exceptions import NodeExistsError, NoNodeError

from broker.cluster import znodes

Outcome = tuple[str, str | None]  # Kafka's error name, its message


async def _registered(zk) -> set[int]:
    return {int(b) for b in await zk.children(znodes.BROKER_IDS)}


async def _assignment(zk, topic: str):
    data, stat = await zk.get_or_none(znodes.topic_path(topic))
    return (znodes.decode_assignment(data), stat) if data is not None else (None, None)


async def alter(controller, changes: dict[tuple[str, int], list[int] | None]) -> dict[tuple[str, int], Outcome]:
    async with controller.lock:  # not between a reconciling pass's reading and its writing
        return await _alter(controller, changes)


async def _alter(controller, changes: dict[tuple[str, int], list[int] | None]) -> dict[tuple[str, int], Outcome]:
    zk = controller.zk
    live = await _registered(zk)
    pending = znodes.decode_reassignment((await zk.get_or_none(znodes.REASSIGN))[0])
    out: dict[tuple[str, int], Outcome] = {}
    reverted: dict[str, list[int]] = {}  # topic -> partitions whose reassignment is cancelled
    started: dict[str, list[int]] = {}  # topic -> partitions given a (new) target
    for (topic, p), target in changes.items():
        assignment, _ = await _assignment(zk, topic)
        if assignment is None or p not in assignment.partitions:
            out[(topic, p)] = ("unknown_topic_or_partition", "The partition does not exist.")
        elif target is None:
            if (topic, p) not in pending:
                out[(topic, p)] = ("no_reassignment_in_progress", f"No ongoing reassignment for {topic}-{p}.")
            else:
                del pending[(topic, p)]
                reverted.setdefault(topic, []).append(p)
                out[(topic, p)] = ("none", None)
        elif not target:
            out[(topic, p)] = ("invalid_replica_assignment", "Empty replica list specified in partition "
                                                             "reassignment.")
        elif len(set(target)) != len(target):
            out[(topic, p)] = ("invalid_replica_assignment", f"Duplicate replica ids in partition reassignment "
                                                             f"replica list: {target}")
        elif not set(target) <= live:
            out[(topic, p)] = ("invalid_replica_assignment", f"Replica assignment has brokers that are not alive. "
                                                             f"Replica list: {target}, live broker list: "
                                                             f"{sorted(live)}")
        else:
            pending[(topic, p)] = list(target)
            started.setdefault(topic, []).append(p)
            out[(topic, p)] = ("none", None)
    for topic in {*reverted, *started}:
        assignment, stat = await _assignment(zk, topic)
        for p in reverted.get(topic, ()):  # cancelled: back to the replicas before the reassignment
            assignment.settle(p, assignment.original(p))
        for p in started.get(topic, ()):  # Kafka's first phase at once: the target, then the original leaving
            assignment.move_towards(p, pending[(topic, p)])
        await zk.call(zk.client.set, znodes.topic_path(topic), znodes.encode_assignment(assignment),
                      version=stat.version)
    await _write_pending(zk, pending)
    controller._kick()
    return out


async def _write_pending(zk, pending: dict[tuple[str, int], list[int]]) -> None:
    data = znodes.encode_reassignment(pending)
    if not pending:
        try:
            await zk.call(zk.client.delete, znodes.REASSIGN)
        except NoNodeError:
            pass
        return
    try:
        await zk.call(zk.client.set, znodes.REASSIGN, data)
    except NoNodeError:
        try:
            await zk.call(zk.client.create, znodes.REASSIGN, data, makepath=True)
        except NodeExistsError:
            await zk.call(zk.client.set, znodes.REASSIGN, data)


async def ongoing(controller, wanted: list[tuple[str, int]] | None
                  ) -> dict[tuple[str, int], tuple[list[int], list[int], list[int]]]:
    """(replicas, adding, removing) of each reassignment under way (of ``wanted`` only, when given)."""
    zk = controller.zk
    pending = znodes.decode_reassignment((await zk.get_or_none(znodes.REASSIGN))[0])
    out = {}
    for (topic, p), target in sorted(pending.items()):
        if wanted is not None and (topic, p) not in wanted:
            continue
        assignment, _ = await _assignment(zk, topic)
        if assignment is None or p not in assignment.partitions:
            continue
        out[(topic, p)] = assignment.reassigning(p, target)
    return out
