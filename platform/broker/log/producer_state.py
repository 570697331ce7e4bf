"""Idempotent and transactional producer state of one partition: per producer id, its epoch, its last five
batches, the first offset of its open transaction and the last coordinator epoch whose marker it saw.

A batch whose (producer id, epoch, first and last sequence) matches one of the last five is a retry: it is
answered with the offset it got the first time and not appended again. A gap in the sequence is refused with
OUT_OF_ORDER_SEQUENCE_NUMBER, an older epoch with INVALID_PRODUCER_EPOCH. Per batch work only.

A producer unknown to the partition may start at any sequence, as in Kafka (its earlier batches may have been
deleted by retention), unless this broker refused an earlier sequence of it here a moment ago
(:mod:`broker.log.refused_sequences`): then its first batch past that one is OUT_OF_ORDER_SEQUENCE_NUMBER.
The partition log snapshots this state (``producer.snapshot``: JSON, with the offset it covers) at every roll,
checkpoint and clean shutdown, and after a restart or a truncation rebuilds it from the snapshot plus the batch
headers written after it, so retries are recognised across restarts and leader changes.

Transactions: a producer's first transactional batch in the partition opens its transaction there, its marker
(a control batch written by the transaction coordinator, :mod:`broker.protocol.control`) closes it. While open,
a non-transactional batch of that producer is INVALID_TXN_STATE. The first offset of every open transaction, and
of every closed one whose marker the high watermark has not passed yet, holds back the last stable offset
(:meth:`first_unstable_offset`): ``read_committed`` consumers read up to it.
"""

from __future__ import annotations

import json
from collections import deque
from dataclasses import dataclass, field

from broker.log.storage_errors import replace_file

MAX_CACHED_BATCHES = 5


class DuplicateSequence(Exception):
    """The batch is stored already: at ``base_offset`` .. ``last_offset`` (one offset per sequence number)."""

    def __init__(self, base_offset: int, last_offset: int):
        super().__init__(base_offset)
        self.base_offset, self.last_offset = base_offset, last_offset


class OutOfOrderSequence(Exception):
    pass


class InvalidProducerEpoch(Exception):
    pass


class InvalidTxnState(Exception):
    """A non-transactional batch from a producer whose transaction is open in the partition."""


class CoordinatorFenced(Exception):
    """A marker from a transaction coordinator older than the last one this producer's markers came from."""


@dataclass
class _Producer:
    epoch: int
    batches: deque = field(default_factory=lambda: deque(maxlen=MAX_CACHED_BATCHES))  # (first, last, offset)
    txn_first: int = -1  # first offset of the open transaction, -1: none
    coordinator_epoch: int = -1
    last_timestamp: int = -1  # max timestamp of its last batch (DescribeProducers)


class ProducerStateManager:
    def __init__(self) -> None:
        self._producers: dict[int, _Producer] = {}
        self._open: dict[int, int] = {}  # producer id -> first offset of its open transaction
        self._closing: list[tuple[int, int]] = []  # (marker offset, first offset) of closed txns above the HW

    def check(self, producer_id: int, epoch: int, first_seq: int, last_seq: int, transactional: bool = False,
              refused_seq: int = -1) -> None:
        """Raise if the batch must not be appended (duplicate, gap, fenced epoch, outside its transaction).
        ``refused_seq``: the lowest sequence of this producer and epoch the broker refused here a moment ago with a
        retriable error (-1: none); a producer the partition does not know cannot start past it."""
        if producer_id < 0:
            return
        state = self._producers.get(producer_id)
        if state is None:
            if 0 <= refused_seq < first_seq:
                raise OutOfOrderSequence(f"producer {producer_id} has nothing here and its batch at sequence "
                                         f"{refused_seq} was refused here: its first batch cannot start at {first_seq}")
            return
        if epoch < state.epoch:
            raise InvalidProducerEpoch(f"epoch {epoch} is older than {state.epoch}")
        if not transactional and state.txn_first >= 0:
            raise InvalidTxnState(f"producer {producer_id} has an open transaction: its batches must be transactional")
        if epoch > state.epoch:
            if first_seq != 0:
                raise OutOfOrderSequence(f"new epoch {epoch} must start at sequence 0, not {first_seq}")
            return
        for first, last, offset in state.batches:
            if first == first_seq and last == last_seq:
                raise DuplicateSequence(offset, offset + last - first)
        expected = (state.batches[-1][1] + 1) % 2**31 if state.batches else 0
        if first_seq != expected:
            raise OutOfOrderSequence(f"expected sequence {expected}, got {first_seq}")

    def update(self, producer_id: int, epoch: int, first_seq: int, last_seq: int, base_offset: int,
               transactional: bool = False, timestamp: int = -1) -> None:
        if producer_id < 0:
            return
        state = self._producers.get(producer_id)
        if state is None or epoch > state.epoch:
            previous = state
            state = self._producers[producer_id] = _Producer(epoch)
            if previous is not None:
                state.txn_first, state.coordinator_epoch = previous.txn_first, previous.coordinator_epoch
        state.batches.append((first_seq, last_seq, base_offset))
        state.last_timestamp = timestamp
        if transactional and state.txn_first < 0:
            state.txn_first = self._open[producer_id] = base_offset

    # ---- transactions ---------------------------------------------------------------------------------------
    def check_marker(self, producer_id: int, epoch: int, coordinator_epoch: int) -> None:
        state = self._producers.get(producer_id)
        if state is None:
            return
        if epoch < state.epoch:
            raise InvalidProducerEpoch(f"marker epoch {epoch} is older than the producer's {state.epoch}")
        if coordinator_epoch < state.coordinator_epoch:
            raise CoordinatorFenced(f"coordinator epoch {coordinator_epoch} is older than {state.coordinator_epoch}")

    def apply_marker(self, producer_id: int, epoch: int, coordinator_epoch: int, offset: int,
                     timestamp: int = -1) -> int:
        """A marker for this producer was written at ``offset`` (with ``timestamp``, the producer's last one now, as
        in Kafka): its transaction closes. Returns the first offset of the transaction (-1: it wrote nothing
        here)."""
        state = self._producers.get(producer_id)
        if state is None or epoch > state.epoch:
            previous = state
            state = self._producers[producer_id] = _Producer(epoch)  # a bumped epoch starts at sequence 0
            if previous is not None:
                state.txn_first = previous.txn_first
        first = state.txn_first
        state.txn_first = -1
        state.coordinator_epoch = max(state.coordinator_epoch, coordinator_epoch)
        state.last_timestamp = timestamp
        self._open.pop(producer_id, None)
        if first >= 0:
            self._closing.append((offset, first))
        return first

    def first_unstable_offset(self, high_watermark: int) -> int | None:
        """The first offset of an open transaction, or of a closed one whose marker is not below
        ``high_watermark`` yet; None: everything below the high watermark is stable."""
        if self._closing:
            self._closing = [(marker, first) for marker, first in self._closing if marker >= high_watermark]
        firsts = [first for _marker, first in self._closing]
        if self._open:
            firsts.append(min(self._open.values()))
        return min(firsts) if firsts else None

    def open_transactions(self) -> dict[int, int]:
        return dict(self._open)

    def active_producers(self) -> list[tuple[int, int, int, int, int, int]]:
        """DescribeProducers' rows, by producer id: (producer id, epoch, last sequence, last timestamp, coordinator
        epoch, first offset of its open transaction); -1 where there is none."""
        return [(pid, p.epoch, p.batches[-1][1] if p.batches else -1, p.last_timestamp, p.coordinator_epoch,
                 p.txn_first) for pid, p in sorted(self._producers.items())]

    def last_batch_offsets(self) -> dict[int, int]:
        """Each known producer's last batch's last offset (a batch's sequences map one to one to its offsets)."""
        return {pid: offset + (last - first) % 2**31 for pid, p in self._producers.items() if p.batches
                for first, last, offset in (p.batches[-1],)}

    def snapshot(self, path: str, offset: int) -> None:
        """Write the state as of log offset ``offset``: whole or not at all (OSError, the old snapshot kept).
        Not fsync'd: written at every roll and checkpoint for every partition, on the event loop; a snapshot a
        crash tore is unreadable and rebuilt from the log (:meth:`load_snapshot` returns None)."""
        data = {"offset": offset,
                "producers": {str(pid): {"epoch": p.epoch, "batches": list(p.batches), "txn_first": p.txn_first,
                                         "coordinator_epoch": p.coordinator_epoch, "last_timestamp": p.last_timestamp}
                              for pid, p in self._producers.items()},
                "closing": self._closing}
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
                entry.txn_first = int(p.get("txn_first", -1))  # snapshots of older versions: no transactions
                entry.coordinator_epoch = int(p.get("coordinator_epoch", -1))
                entry.last_timestamp = int(p.get("last_timestamp", -1))
                if entry.txn_first >= 0:
                    state._open[int(pid)] = entry.txn_first
            state._closing = [(int(m), int(f)) for m, f in data.get("closing", [])]
            return state, int(data["offset"])
        except (OSError, ValueError, KeyError, TypeError, AttributeError):  # torn or foreign: rebuilt from the log
            return None
