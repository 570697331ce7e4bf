"""The transaction coordinator: InitProducerId with transactional ids, AddPartitionsToTxn, AddOffsetsToTxn,
EndTxn, timeouts and failover, with its state in the compacted, replicated topic ``__transaction_state``.

A transactional id belongs to partition ``partition_for(id)`` of ``__transaction_state``; the leader of that
partition is its coordinator, and the partition's leader epoch is the *coordinator epoch* its markers carry
(a deposed coordinator's late markers are refused: TRANSACTION_COORDINATOR_FENCED). A broker loads a partition
(reads it to the high watermark, last record per id wins) the first time it finds itself its leader with a new
leader epoch — on a request or on the periodic tick —, then finishes the transactions it finds prepared (their
markers are sent again) and keeps timing the open ones.

Every change is a record written to the partition and committed (the high watermark passes it) before memory
changes and before the client is answered: a coordinator killed at any point leaves either the old or the new
state in the log. EndTxn answers once PrepareCommit/PrepareAbort is committed (the decision); markers are
written in the background, then CompleteCommit/CompleteAbort. See docs/design/transactions.md.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field

from broker.metadata.topics import TopicError
from broker.protocol import records
from broker.protocol.batch_builder import build_batch, encode_record
from broker.protocol.messages import ErrorCode
from broker.protocol.txn_log import TxnRecord, decode_key, decode_value, encode_key, encode_value, partition_for
from broker.txn import metadata as m
from broker.txn.markers import MarkerSender
from broker.txn.offsets import TxnOffsets
from broker.txn.txn_log_reader import read_batches

log = logging.getLogger(__name__)
TOPIC = "__transaction_state"
WRITE_TIMEOUT_S = 10
_APPEND_TO_COORDINATOR_ERROR = {
    ErrorCode.unknown_topic_or_partition: ErrorCode.coordinator_not_available,
    ErrorCode.not_enough_replicas: ErrorCode.coordinator_not_available,
    ErrorCode.not_enough_replicas_after_append: ErrorCode.coordinator_not_available,
    ErrorCode.request_timed_out: ErrorCode.coordinator_not_available,
}


def now_ms() -> int:
    return int(time.time() * 1000)


@dataclass
class OwnedPartition:
    epoch: int  # coordinator epoch: the leader epoch of the __transaction_state partition
    ids: dict[str, m.TxnMetadata] = field(default_factory=dict)
    loaded: bool = False


class TransactionCoordinator:
    def __init__(self, broker):
        self.broker = broker
        c = broker.config
        self.num_partitions = c["transaction.state.log.num.partitions"]
        self.max_timeout_ms = c["transaction.max.timeout.ms"]
        self.owned: dict[int, OwnedPartition] = {}
        self.markers = MarkerSender(broker)
        self.offsets = TxnOffsets(broker)
        self._tasks: set[asyncio.Task] = set()
        self._ticker: asyncio.Task | None = None
        self._creating: asyncio.Task | None = None
        self._last_expiry_ms = 0
        self._warned_replication = False

    # ---- life cycle ---------------------------------------------------------------------------------------
    def start(self) -> None:
        interval = self.broker.config["transaction.abort.timed.out.transaction.cleanup.interval.ms"] / 1000
        self._ticker = asyncio.get_running_loop().create_task(self._tick_forever(interval))

    async def stop(self, timeout: float) -> None:
        tasks = [t for t in [self._ticker, self._creating, *self._tasks] if t is not None and not t.done()]
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=timeout)
        self.markers.close()

    def _spawn(self, coro) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # ---- where a transactional id lives ----------------------------------------------------------------------
    @property
    def partition_count(self) -> int:
        """The partitions of ``__transaction_state`` once it exists, else ``transaction.state.log.num.partitions``
        (as Kafka: a setting changed later must not move transactional ids away from their state)."""
        info = self.broker.topics.get(TOPIC)
        return info.partitions if info is not None else self.num_partitions

    def partition_of(self, transactional_id: str) -> int:
        return partition_for(transactional_id, self.partition_count)

    async def ensure_topic(self) -> ErrorCode:
        """Create ``__transaction_state`` on first need (COORDINATOR_NOT_AVAILABLE meanwhile)."""
        if self.broker.topics.get(TOPIC) is not None:
            return ErrorCode.none
        c = self.broker.config
        standalone = self.broker.cluster is None
        replication = 1 if standalone else c["transaction.state.log.replication.factor"]
        if len(self.broker.live_brokers()) < replication:
            if not self._warned_replication:  # once: clients retry this every few hundred ms
                self._warned_replication = True
                log.warning("%s needs %d live brokers (transaction.state.log.replication.factor): transactions "
                            "wait with COORDINATOR_NOT_AVAILABLE", TOPIC, replication)
            return ErrorCode.coordinator_not_available
        configs = {"cleanup.policy": "compact", "segment.bytes": str(c["transaction.state.log.segment.bytes"]),
                   "min.insync.replicas": str(1 if standalone else min(c["transaction.state.log.min.isr"],
                                                                       replication))}
        if self._creating is None or self._creating.done():
            self._creating = asyncio.get_running_loop().create_task(
                self.broker.create_topic(TOPIC, self.num_partitions, replication, configs))
        try:
            await asyncio.shield(self._creating)
        except TopicError as exc:
            if exc.error != "topic_already_exists":
                log.warning("creating %s: %s", TOPIC, exc)
                return ErrorCode.coordinator_not_available
        return ErrorCode.none if standalone else ErrorCode.coordinator_not_available  # leaders are elected next

    async def locate(self, transactional_id: str) -> tuple[ErrorCode, int]:
        """FindCoordinator key_type 1: (error, node id of the coordinator)."""
        if not transactional_id:
            return ErrorCode.invalid_request, -1
        error = await self.ensure_topic()
        if self.broker.topics.get(TOPIC) is None:
            return error, -1
        p = self.partition_of(transactional_id)
        if self.broker.cluster is None:
            return ErrorCode.none, self.broker.node_id
        state = self.broker.cluster.metadata.state(TOPIC, p)
        if state is None or state.leader < 0:
            return ErrorCode.coordinator_not_available, -1
        return ErrorCode.none, state.leader

    # ---- owning partitions ------------------------------------------------------------------------------------
    def _leader_epoch(self, p: int) -> int | None:
        """The leader epoch of ``__transaction_state-p`` if this broker leads it, else None."""
        if self.broker.topics.get(TOPIC) is None:
            return None
        error, plog = self.broker.leader_log(TOPIC, p)
        if plog is None:
            return None
        return 0 if self.broker.cluster is None else self.broker.cluster.partition(TOPIC, p).leader_epoch

    async def _owned(self, p: int) -> tuple[ErrorCode, OwnedPartition | None]:
        epoch = self._leader_epoch(p)
        if epoch is None:
            self.owned.pop(p, None)
            return ErrorCode.not_coordinator, None
        owned = self.owned.get(p)
        if owned is None or owned.epoch != epoch:
            owned = self.owned[p] = OwnedPartition(epoch)
            self._spawn(self._load(p, owned))
        if not owned.loaded:
            return ErrorCode.coordinator_load_in_progress, None
        return ErrorCode.none, owned

    async def _load(self, p: int, owned: OwnedPartition) -> None:
        """Read the partition to its high watermark (committed records only), then finish what was prepared."""
        error, plog = self.broker.leader_log(TOPIC, p)
        if plog is None:
            return
        # A new leader's high watermark may lag its log until the followers fetch again; records the old
        # coordinator had committed (and answered clients for) may be above it: wait for them.
        target = plog.log_end_offset
        while plog.high_watermark < target:
            current = self.broker.leader_log(TOPIC, p)[1]
            if self.owned.get(p) is not owned or current is None:
                return
            plog = current  # the same partition's log, or the one a move to another log dir put in its place
            await asyncio.sleep(0.05)
        offset = plog.log_start_offset
        entries: dict[str, TxnRecord | None] = {}
        while offset < plog.high_watermark:
            region = plog.read(offset, 1 << 20)
            if region is None:
                break
            before = offset
            for next_offset, batch_entries in read_batches(region.read()):
                for key, value in batch_entries:
                    try:
                        entries[decode_key(key)] = None if value is None else decode_value(value)
                    except records.InvalidBatch as exc:
                        log.warning("%s-%d: skipping an unreadable record: %s", TOPIC, p, exc)
                offset = max(offset, next_offset)
            if offset == before:
                log.error("%s-%d: cannot read past offset %d", TOPIC, p, offset)
                break
            await asyncio.sleep(0)
        if self.owned.get(p) is not owned:
            return
        owned.ids = {tid: m.TxnMetadata.from_record(tid, rec) for tid, rec in entries.items() if rec is not None}
        owned.loaded = True
        prepared = [meta for meta in owned.ids.values() if meta.state in m.PREPARING]
        log.info("%s-%d loaded at coordinator epoch %d: %d transactional ids, %d to complete", TOPIC, p,
                 owned.epoch, len(owned.ids), len(prepared))
        for meta in prepared:
            self._spawn(self._finish(p, owned, meta))

    def _alive(self, p: int, owned: OwnedPartition):
        return lambda: self.owned.get(p) is owned and self._leader_epoch(p) == owned.epoch

    # ---- writing a transition ---------------------------------------------------------------------------------
    async def _write(self, p: int, owned: OwnedPartition, meta: m.TxnMetadata, rec: TxnRecord | None) -> ErrorCode:
        """Append ``rec`` for ``meta`` (None: a tombstone) and wait until it is committed; then apply it."""
        error, plog = self.broker.leader_log(TOPIC, p)
        if plog is None or self.owned.get(p) is not owned:
            return ErrorCode.not_coordinator
        batch = build_batch([encode_record(0, encode_key(meta.transactional_id),
                                           None if rec is None else encode_value(rec))], timestamp_ms=now_ms())
        meta.pending = True
        try:
            try:
                offset = plog.append(batch, records.validate(batch, 1 << 30))
            except OSError:
                return ErrorCode.not_coordinator  # KAFKA_STORAGE_ERROR on the txn log: Kafka's mapping
            self.broker.notify_append(TOPIC, p)
            if self.broker.cluster is not None:
                part = self.broker.cluster.partition(TOPIC, p)
                part.maybe_advance_high_watermark()
                error = await part.wait_committed(offset + 1, WRITE_TIMEOUT_S)
                if error == ErrorCode.none and len(part.isr) < int(
                        self.broker.topics.get(TOPIC).configs.get("min.insync.replicas", 1)):
                    error = ErrorCode.not_enough_replicas_after_append
                if error != ErrorCode.none:
                    return _APPEND_TO_COORDINATOR_ERROR.get(error, ErrorCode.not_coordinator)
            if self.owned.get(p) is not owned or self._leader_epoch(p) != owned.epoch:
                return ErrorCode.not_coordinator
        finally:
            meta.pending = False
        if rec is None:
            owned.ids.pop(meta.transactional_id, None)
        else:
            meta.apply(rec)
            owned.ids[meta.transactional_id] = meta
        return ErrorCode.none

    # ---- client operations ------------------------------------------------------------------------------------
    async def init_producer_id(self, transactional_id: str, timeout_ms: int, producer_id: int = -1,
                               producer_epoch: int = -1) -> tuple[ErrorCode, int, int]:
        if not transactional_id:
            return ErrorCode.invalid_request, -1, -1
        error = m.check_timeout(timeout_ms, self.max_timeout_ms)
        if error != ErrorCode.none:
            return error, -1, -1
        error = await self.ensure_topic()
        if self.broker.topics.get(TOPIC) is None:
            return error, -1, -1
        p = self.partition_of(transactional_id)
        error, owned = await self._owned(p)
        if owned is None:
            return error, -1, -1
        meta = owned.ids.get(transactional_id)
        outcome = m.init_producer(meta, timeout_ms, now_ms(), producer_id, producer_epoch)
        if outcome.fence:
            await self._abort(p, owned, meta, m.fence_record(meta, now_ms()))
            return ErrorCode.concurrent_transactions, -1, -1
        if outcome.error != ErrorCode.none:
            return outcome.error, -1, -1
        rec = outcome.record
        if outcome.new_producer_id:
            try:
                rec.producer_id = await self.broker.next_producer_id()
            except OSError:
                return ErrorCode.coordinator_not_available, -1, -1
        created = meta is None
        if created:
            if transactional_id in owned.ids:  # created meanwhile by a concurrent request
                return ErrorCode.concurrent_transactions, -1, -1
            meta = owned.ids[transactional_id] = m.TxnMetadata(transactional_id, rec.producer_id, rec.producer_epoch,
                                                               timeout_ms, pending=True)
        error = await self._write(p, owned, meta, rec)
        if error != ErrorCode.none:
            if created and owned.ids.get(transactional_id) is meta:
                del owned.ids[transactional_id]
            return error, -1, -1
        return ErrorCode.none, meta.producer_id, meta.producer_epoch

    async def add_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int,
                             partitions: dict[str, set[int]]) -> ErrorCode:
        p = self.partition_of(transactional_id)
        error, owned = await self._owned(p)
        if owned is None:
            return error
        meta = owned.ids.get(transactional_id)
        error, rec = m.add_partitions(meta, producer_id, producer_epoch, partitions, now_ms())
        if error != ErrorCode.none or rec is None:
            return error
        return await self._write(p, owned, meta, rec)

    async def end_txn(self, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool) -> ErrorCode:
        p = self.partition_of(transactional_id)
        error, owned = await self._owned(p)
        if owned is None:
            return error
        meta = owned.ids.get(transactional_id)
        error, rec = m.end_txn(meta, producer_id, producer_epoch, commit, now_ms())
        if error != ErrorCode.none or rec is None:
            return error
        error = await self._write(p, owned, meta, rec)
        if error == ErrorCode.none:
            self._spawn(self._finish(p, owned, meta))
        return error

    async def add_offsets(self, transactional_id: str, producer_id: int, producer_epoch: int,
                          group_id: str) -> ErrorCode:
        """AddOffsetsToTxn: the group's offsets become part of the transaction (Kafka adds the group's
        __consumer_offsets partition; here a pseudo-partition the group's coordinator answers for)."""
        if not group_id:
            return ErrorCode.invalid_group_id
        return await self.add_partitions(transactional_id, producer_id, producer_epoch,
                                         {m.GROUP_PREFIX + group_id: {0}})

    def transaction_of(self, transactional_id: str) -> m.TxnMetadata | None:
        owned = self.owned.get(self.partition_of(transactional_id))
        return owned.ids.get(transactional_id) if owned is not None and owned.loaded else None

    # ---- describing (DescribeTransactions, ListTransactions) ----------------------------------------------------
    async def _owned_soon(self, p: int, wait: float = 2.0) -> tuple[ErrorCode, OwnedPartition | None]:
        """:meth:`_owned`, waiting up to ``wait`` seconds for a load it started (a partition nobody asked about yet
        is loaded on the first request or tick that finds it; small ones take milliseconds)."""
        deadline = time.monotonic() + wait
        error, owned = await self._owned(p)
        while error == ErrorCode.coordinator_load_in_progress and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
            error, owned = await self._owned(p)
        return error, owned

    async def describe(self, transactional_id: str) -> tuple[ErrorCode, m.TxnMetadata | None]:
        """(error, state) of one transactional id, as Kafka's coordinator answers DescribeTransactions: NOT_COORDINATOR
        where this broker does not own its partition, COORDINATOR_LOAD_IN_PROGRESS, TRANSACTIONAL_ID_NOT_FOUND for an
        unknown (or Dead) id, INVALID_REQUEST for an empty one."""
        if not transactional_id:
            return ErrorCode.invalid_request, None
        error, owned = await self._owned_soon(self.partition_of(transactional_id))
        if owned is None:
            return error, None
        meta = owned.ids.get(transactional_id)
        if meta is None or meta.state == m.State.DEAD:
            return ErrorCode.transactional_id_not_found, None
        return ErrorCode.none, meta

    async def listing(self) -> tuple[ErrorCode, list[m.TxnMetadata]]:
        """Every transactional id of the partitions this broker coordinates (ListTransactions), or
        COORDINATOR_LOAD_IN_PROGRESS while one of them loads."""
        if self.broker.topics.get(TOPIC) is None:
            return ErrorCode.none, []
        out: list[m.TxnMetadata] = []
        led = [p for p in range(self.partition_count) if self._leader_epoch(p) is not None]
        for p in led:  # starts every load that is due, so that they run side by side
            await self._owned(p)
        for p in led:
            error, owned = await self._owned_soon(p)
            if error == ErrorCode.coordinator_load_in_progress:
                return error, []
            if owned is not None:  # else it stopped leading the partition a moment ago
                out.extend(owned.ids.values())
        return ErrorCode.none, out

    # ---- completing transactions --------------------------------------------------------------------------------
    async def _abort(self, p: int, owned: OwnedPartition, meta: m.TxnMetadata, rec: TxnRecord) -> None:
        if await self._write(p, owned, meta, rec) == ErrorCode.none:
            self._spawn(self._finish(p, owned, meta))

    async def _finish(self, p: int, owned: OwnedPartition, meta: m.TxnMetadata) -> None:
        """Markers for a prepared transaction, then CompleteCommit/CompleteAbort (retried until written or this
        broker stops coordinating it: the next coordinator finishes it from the log)."""
        commit = meta.state == m.State.PREPARE_COMMIT
        alive = self._alive(p, owned)
        pid, epoch = meta.producer_id, meta.producer_epoch
        if not await self.markers.send(pid, epoch, commit, owned.epoch, meta.partitions, alive):
            return
        while alive():
            if meta.state not in m.PREPARING or meta.producer_id != pid:
                return
            if not meta.pending and await self._write(p, owned, meta, m.complete_record(meta, now_ms())) \
                    == ErrorCode.none:
                return
            await asyncio.sleep(0.2)

    # ---- timeouts and expiry ----------------------------------------------------------------------------------
    async def _tick_forever(self, interval: float) -> None:
        while True:
            await asyncio.sleep(interval)
            try:
                await self._tick()
            except Exception:  # noqa: BLE001 - a tick must never end the coordinator
                log.exception("transaction coordinator tick failed")

    async def _tick(self) -> None:
        if self.broker.topics.get(TOPIC) is None:
            return
        for p in range(self.partition_count):
            if self._leader_epoch(p) is not None:
                await self._owned(p)  # loads partitions this broker leads since the last tick
            elif p in self.owned:
                del self.owned[p]
        now = now_ms()
        expiry_due = now - self._last_expiry_ms >= self.broker.config[
            "transaction.remove.expired.transaction.cleanup.interval.ms"]
        expiration = self.broker.config["transactional.id.expiration.ms"]
        for p, owned in list(self.owned.items()):
            if not owned.loaded:
                continue
            for meta in list(owned.ids.values()):
                if m.timed_out(meta, now):
                    log.info("transaction %s timed out after %d ms: aborting", meta.transactional_id, meta.timeout_ms)
                    await self._abort(p, owned, meta, m.fence_record(meta, now))
                elif expiry_due and m.expired(meta, now, expiration):
                    await self._write(p, owned, meta, None)
        if expiry_due:
            self._last_expiry_ms = now
