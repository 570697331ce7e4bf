"""One transactional id's state and Kafka's state machine for it (transaction protocol version 1). Pure: each
operation checks the request against the state and returns an error or the record to write to
``__transaction_state``; the coordinator changes the in-memory state only once that record is committed
(:meth:`TxnMetadata.apply`).

States (ids as written in the log): Empty 0, Ongoing 1, PrepareCommit 2, PrepareAbort 3, CompleteCommit 4,
CompleteAbort 5, Dead 6, PrepareEpochFence 7 (memory only: an Ongoing transaction whose producer is being fenced;
written as PrepareAbort with the bumped epoch).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum

from broker.protocol.messages import ErrorCode
from broker.protocol.txn_log import TxnRecord

MAX_EPOCH = 32767
# Kafka's __consumer_offsets partition of a group is a partitions entry with topic "__consumer_offsets:<group>" and
# no partitions here (":" never occurs in a topic name): the group's offsets are committed by ZooKeeper multi.
GROUP_PREFIX = "__consumer_offsets:"


class State(IntEnum):
    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6


# the names DescribeTransactions and ListTransactions give the states (Kafka's TransactionState.name)
STATE_NAMES = {State.EMPTY: "Empty", State.ONGOING: "Ongoing", State.PREPARE_COMMIT: "PrepareCommit",
               State.PREPARE_ABORT: "PrepareAbort", State.COMPLETE_COMMIT: "CompleteCommit",
               State.COMPLETE_ABORT: "CompleteAbort", State.DEAD: "Dead"}
PREPARING = (State.PREPARE_COMMIT, State.PREPARE_ABORT)
COMPLETE = (State.COMPLETE_COMMIT, State.COMPLETE_ABORT, State.EMPTY)


@dataclass
class TxnMetadata:
    transactional_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: State = State.EMPTY
    partitions: dict[str, set[int]] = field(default_factory=dict)
    start_ms: int = -1
    last_update_ms: int = 0
    pending: bool = False  # a record for this id is being written: other operations wait (CONCURRENT_TRANSACTIONS)

    def record(self, **changes) -> TxnRecord:
        """The log record of this state with ``changes`` (field names of TxnRecord)."""
        base = TxnRecord(self.producer_id, self.producer_epoch, self.timeout_ms, int(self.state),
                         {t: sorted(p) for t, p in self.partitions.items()}, self.last_update_ms, self.start_ms)
        for key, value in changes.items():
            setattr(base, key, value)
        return base

    def apply(self, rec: TxnRecord) -> None:
        self.producer_id, self.producer_epoch, self.timeout_ms = rec.producer_id, rec.producer_epoch, rec.timeout_ms
        self.state = State(rec.status)
        self.partitions = {t: set(p) for t, p in rec.partitions.items()}
        self.last_update_ms, self.start_ms = rec.last_update_ms, rec.start_ms

    @classmethod
    def from_record(cls, transactional_id: str, rec: TxnRecord) -> "TxnMetadata":
        meta = cls(transactional_id, rec.producer_id, rec.producer_epoch, rec.timeout_ms)
        meta.apply(rec)
        return meta


def check_timeout(timeout_ms: int, max_timeout_ms: int) -> ErrorCode:
    return ErrorCode.invalid_transaction_timeout if not 0 < timeout_ms <= max_timeout_ms else ErrorCode.none


@dataclass(frozen=True)
class InitOutcome:
    """What InitProducerId does: answer ``error``; or write ``record`` (then answer with its pid/epoch); or
    fence an Ongoing transaction first (``fence``: write the abort with the bumped epoch, answer
    CONCURRENT_TRANSACTIONS; the client retries and gets the epoch after it)."""

    error: ErrorCode = ErrorCode.none
    record: TxnRecord | None = None
    fence: bool = False
    new_producer_id: bool = False


def init_producer(meta: TxnMetadata | None, timeout_ms: int, now_ms: int, given_pid: int = -1,
                  given_epoch: int = -1) -> InitOutcome:
    """InitProducerId with a transactional id. ``meta`` None: a new id (the caller allocates the producer id and
    writes Empty with epoch 0: ``new_producer_id``)."""
    if meta is None:
        return InitOutcome(record=TxnRecord(-1, 0, timeout_ms, int(State.EMPTY), {}, now_ms, -1), new_producer_id=True)
    if meta.pending or meta.state in PREPARING:
        return InitOutcome(ErrorCode.concurrent_transactions)
    if given_pid >= 0 and (given_pid != meta.producer_id or given_epoch != meta.producer_epoch):
        return InitOutcome(ErrorCode.producer_fenced)  # KIP-360: only the current producer may bump itself
    if meta.state == State.ONGOING:
        return InitOutcome(ErrorCode.concurrent_transactions, fence=True)
    if meta.producer_epoch + 1 >= MAX_EPOCH - 1:
        return InitOutcome(record=meta.record(producer_id=-1, producer_epoch=0, timeout_ms=timeout_ms,
                                              status=int(State.EMPTY), partitions={}, last_update_ms=now_ms,
                                              start_ms=-1), new_producer_id=True)
    return InitOutcome(record=meta.record(producer_epoch=meta.producer_epoch + 1, timeout_ms=timeout_ms,
                                          status=int(State.EMPTY), partitions={}, last_update_ms=now_ms, start_ms=-1))


def fence_record(meta: TxnMetadata, now_ms: int) -> TxnRecord:
    """Abort an Ongoing transaction with the epoch bumped (a new producer instance, or a timeout): the old
    producer's next request is refused (PRODUCER_FENCED), and the markers carry the new epoch."""
    epoch = meta.producer_epoch + 1 if meta.producer_epoch + 1 < MAX_EPOCH else meta.producer_epoch
    return meta.record(producer_epoch=epoch, status=int(State.PREPARE_ABORT), last_update_ms=now_ms)


def check_producer(meta: TxnMetadata | None, producer_id: int, epoch: int) -> ErrorCode:
    """The checks every client operation of an ongoing transaction shares."""
    if meta is None or meta.producer_id != producer_id:
        return ErrorCode.invalid_producer_id_mapping
    if meta.producer_epoch != epoch:
        return ErrorCode.producer_fenced
    if meta.pending or meta.state in PREPARING:
        return ErrorCode.concurrent_transactions
    return ErrorCode.none


def add_partitions(meta: TxnMetadata | None, producer_id: int, epoch: int, partitions: dict[str, set[int]],
                   now_ms: int) -> tuple[ErrorCode, TxnRecord | None]:
    """AddPartitionsToTxn / AddOffsetsToTxn. (NONE, None): already in the transaction, nothing to write."""
    error = check_producer(meta, producer_id, epoch)
    if error != ErrorCode.none:
        return error, None
    if meta.state == State.ONGOING and all(t in meta.partitions and set(p) <= meta.partitions[t]
                                           for t, p in partitions.items()):
        return ErrorCode.none, None
    merged = {t: set(p) for t, p in meta.partitions.items()} if meta.state == State.ONGOING else {}
    for topic, parts in partitions.items():
        merged.setdefault(topic, set()).update(parts)
    start = meta.start_ms if meta.state == State.ONGOING else now_ms
    return ErrorCode.none, meta.record(status=int(State.ONGOING), partitions={t: sorted(p) for t, p in merged.items()},
                                       last_update_ms=now_ms, start_ms=start)


def end_txn(meta: TxnMetadata | None, producer_id: int, epoch: int, commit: bool,
            now_ms: int) -> tuple[ErrorCode, TxnRecord | None]:
    """EndTxn. (NONE, record): write PrepareCommit/PrepareAbort (the commit point); (NONE, None): a retry of a
    transaction already completed the same way."""
    if meta is None or meta.producer_id != producer_id:
        return ErrorCode.invalid_producer_id_mapping, None
    if meta.producer_epoch != epoch:
        return ErrorCode.producer_fenced, None
    if meta.pending:
        return ErrorCode.concurrent_transactions, None
    wanted_prepare = State.PREPARE_COMMIT if commit else State.PREPARE_ABORT
    wanted_complete = State.COMPLETE_COMMIT if commit else State.COMPLETE_ABORT
    if meta.state == State.ONGOING:
        return ErrorCode.none, meta.record(status=int(wanted_prepare), last_update_ms=now_ms)
    if meta.state == wanted_complete:
        return ErrorCode.none, None
    if meta.state == wanted_prepare:
        return ErrorCode.concurrent_transactions, None
    return ErrorCode.invalid_txn_state, None


def complete_record(meta: TxnMetadata, now_ms: int) -> TxnRecord:
    """After every marker of a PrepareX transaction is written: CompleteX, no partitions."""
    done = State.COMPLETE_COMMIT if meta.state == State.PREPARE_COMMIT else State.COMPLETE_ABORT
    return meta.record(status=int(done), partitions={}, last_update_ms=now_ms)


def timed_out(meta: TxnMetadata, now_ms: int) -> bool:
    return meta.state == State.ONGOING and not meta.pending and meta.start_ms + meta.timeout_ms < now_ms


def expired(meta: TxnMetadata, now_ms: int, expiration_ms: int) -> bool:
    return meta.state in COMPLETE and not meta.pending and meta.last_update_ms + expiration_ms < now_ms
