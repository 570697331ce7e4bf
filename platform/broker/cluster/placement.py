"""Replica placement for a new topic (Kafka's rack-unaware assignment): the leaders of consecutive partitions
go round-robin over the brokers from a random start; each partition's followers go on the next brokers at a
shift that grows by one after every full round, so the followers of one broker's partitions spread over all
the others. Partitions added to a topic (CreatePartitions) continue that round-robin from the broker of
partition 0's preferred leader, as Kafka's ``AdminZkClient.createNewPartitionsAssignment`` does. Pure."""

from __future__ import annotations

import random


class PlacementError(ValueError):
    pass


def assign_replicas(brokers: list[int], partitions: int, replication_factor: int,
                    rng: random.Random | None = None, start_index: int | None = None,
                    start_shift: int | None = None, first_partition: int = 0) -> dict[int, list[int]]:
    """partition -> replicas (the first is the preferred leader), for partitions ``first_partition`` onwards."""
    if partitions < 1:
        raise PlacementError("number of partitions must be at least 1")
    if replication_factor < 1:
        raise PlacementError("replication factor must be at least 1")
    ids = sorted(brokers)
    n = len(ids)
    if replication_factor > n:
        raise PlacementError(f"replication factor {replication_factor} is larger than the {n} available "
                             f"broker(s)")
    rng = rng or random.Random()
    start = rng.randrange(n) if start_index is None else start_index
    shift = rng.randrange(n) if start_shift is None else start_shift
    out: dict[int, list[int]] = {}
    for p in range(first_partition, first_partition + partitions):
        if p > 0 and p % n == 0:
            shift += 1
        first = (p + start) % n
        replicas = [ids[first]]
        for j in range(replication_factor - 1):
            replicas.append(ids[(first + 1 + (shift + j) % (n - 1)) % n])
        out[p] = replicas
    return out


def assign_new_partitions(brokers: list[int], existing: dict[int, list[int]], count: int) -> dict[int, list[int]]:
    """Replicas of partitions ``len(existing)``..``count``-1 of a topic whose partitions are ``existing``, at the
    topic's replication factor. The start (and the first shift) is the broker of partition 0's preferred
    leader, or the next id up when it is gone, so new leaders carry on the round-robin of the old ones."""
    ids = sorted(brokers)
    first_leader = existing[0][0]
    start = next((i for i, b in enumerate(ids) if b >= first_leader), 0)
    return assign_replicas(ids, count - len(existing), len(existing[0]), start_index=start, start_shift=start,
                           first_partition=len(existing))
