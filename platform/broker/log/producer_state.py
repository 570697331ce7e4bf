"""Idempotent-producer state of one partition: per producer id, its epoch and its last five batches.

A batch whose (producer id, epoch, first and last sequence) matches one of the last five is a retry: it is
answered with the offset it got the first time and not appended again. A gap in the sequence is refused with
OUT_OF_ORDER_SEQUENCE_NUMBER, an older epoch with INVALID_PRODUCER_EPOCH. Per batch work only.
The partition log snapshots this state (``producer.snapshot``: JSON, with the offset it covers) at every roll,
checkpoint and clean shutdown, and after a restart or a truncation rebuilds it from the snapshot plus the batch
headers written after it, so retries are recognised across restarts and leader changes.
"""

from __future__ import annotations

import json
from collections import deque
from dataclasses import dataclass, field

from broker.log.storage_errors import replace_file

MAX_CACHED_BATCHES = 5


class DuplicateSequence(Exception):
    def __init__(self, base_offset: int):
        super().__init__(base_offset)
        self.base_offset = base_offset


class OutOfOrderSequence(Exception):
    pass


class InvalidProducerEpoch(Exception):
    pass


@dataclass
class _Producer:
    epoch: int
    batches: deque = field(default_factory=lambda: deque(maxlen=MAX_CACHED_BATCHES))  # (first, last, offset)


class ProducerStateManager:
    def __init__(self) -> None:
        self._producers: dict[int, _Producer] = {}

    def check(self, producer_id: int, epoch: int, first_seq: int, last_seq: int) -> None:
        """Raise if the batch must not be appended (duplicate, gap or fenced epoch)."""
        if producer_id < 0:
            return
        state = self._producers.get(producer_id)
        if state is None:
            return
        if epoch < state.epoch:
            raise InvalidProducerEpoch(f"epoch {epoch} is older than {state.epoch}")
        if epoch > state.epoch:
            if first_seq != 0:
                raise OutOfOrderSequence(f"new epoch {epoch} must start at sequence 0, not {first_seq}")
            return
        for first, last, offset in state.batches:
            if first == first_seq and last == last_seq:
                raise DuplicateSequence(offset)
        expected = (state.batches[-1][1] + 1) % 2**31 if state.batches else 0
        if first_seq != expected:
            raise OutOfOrderSequence(f"expected sequence {expected}, got {first_seq}")

    def update(self, producer_id: int, epoch: int, first_seq: int, last_seq: int, base_offset: int) -> None:
        if producer_id < 0:
            return
        state = self._producers.get(producer_id)
        if state is None or epoch > state.epoch:
            state = self._producers[producer_id] = _Producer(epoch)
        state.batches.append((first_seq, last_seq, base_offset))

    def snapshot(self, path: str, offset: int) -> None:
        """Write the state as of log offset ``offset``: whole or not at all (OSError, the old snapshot kept).
        Not fsync'd: written at every roll and checkpoint for every partition, on the event loop; a snapshot a
        crash tore is unreadable and rebuilt from the log (:meth:`load_snapshot` returns None)."""
        data = {"offset": offset, "producers": {str(pid): {"epoch": p.epoch, "batches": list(p.batches)}
                                                for pid, p in self._producers.items()}}
        replace_file(path, json.dumps(data), fsync=False)

    @classmethod
    def load_snapshot(cls, path: str) -> tuple["ProducerStateManager", int] | None:
        """(state, offset it covers) or None when there is no readable snapshot."""
        try:
            with open(path) as f:
                data = json.load(f)
            state = cls()
            for pid, p in data["producers"].items():
                entry = state._producers[int(pid)] = _Producer(p["epoch"])
                entry.batches.extend(tuple(b) for b in p["batches"])
            return state, int(data["offset"])
        except (OSError, ValueError, KeyError, TypeError, AttributeError):  # torn or foreign: rebuilt from the log
            return None
