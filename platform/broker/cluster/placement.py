"""Replica placement for a new topic (Kafka's rack-unaware assignment): the leaders of consecutive partitions
go round-robin over the brokers from a random start; each partition's followers go on the next brokers at a
shift that grows by one after every full round, so the followers of one broker's partitions spread over all
the others. Pure."""

from __future__ import annotations

import random


class PlacementError(ValueError):
    pass


def assign_replicas(brokers: list[int], partitions: int, replication_factor: int,
                    rng: random.Random | None = None, start_index: int | None = None,
                    start_shift: int | None = None) -> dict[int, list[int]]:
    """partition -> replicas (the first is the preferred leader)."""
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
    for p in range(partitions):
        if p > 0 and p % n == 0:
            shift += 1
        first = (p + start) % n
        replicas = [ids[first]]
        for j in range(replication_factor - 1):
            replicas.append(ids[(first + 1 + (shift + j) % (n - 1)) % n])
        out[p] = replicas
    return out
