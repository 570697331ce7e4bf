"""The exactly-once mirror on the whole-batch path (``--exactly-once`` on PLAINTEXT clusters; the librdkafka
record path of :mod:`mirror.exactly_once` otherwise, or with ``--copy records``).

The same guarantees as the record path, with the client side of Kafka's transaction protocol spoken directly:
the stream's transactional id (``logbus-mirror.<source>.<instance>.<stream>``) gets its producer id and epoch
from InitProducerId on the transaction coordinator, which fences and aborts whatever a previous incarnation
left open. A transaction spans the fetch cycles of ``--transaction-interval-ms`` (it ends sooner when the stream
stops or hands partitions over): AddPartitionsToTxn for each target partition it writes, the rewritten batches
produced as transactional batches with the producer's id, epoch and per-partition sequence numbers (a resent
batch is a duplicate the broker drops), then AddOffsetsToTxn + TxnOffsetCommit of the consumed source positions
under the mirror's group on the *target* (generation -1), and EndTxn. Starting offsets come from the target's committed
offsets (``require_stable``: an open transaction's offsets are waited for), else the source group's, else
``auto.offset.reset``. Any failure aborts the open transaction (best effort: a new epoch aborts it anyway) and the
stream restarts from the target's committed offsets.
"""

from __future__ import annotations

import datetime
import logging
import time

from confluent_kafka import Consumer, KafkaException, TopicPartition

from broker.protocol.messages import ErrorCode
from mirror.batch_stream import API_TIMEOUT_S, BatchStream, Key
from mirror.exactly_once import TXN_TIMEOUT_MS, transactional_id
from mirror.wire import request_module

log = logging.getLogger(__name__)
FIND_COORDINATOR, INIT_PRODUCER_ID, ADD_PARTITIONS, ADD_OFFSETS, END_TXN, TXN_OFFSET_COMMIT = 10, 22, 24, 25, 26, 28
RETRIABLE_COORDINATOR = {ErrorCode.coordinator_load_in_progress, ErrorCode.coordinator_not_available,
                         ErrorCode.not_coordinator, ErrorCode.concurrent_transactions}


class TransactionalBatchStream(BatchStream):
    def __init__(self, mirror, index: int, backoff):
        super().__init__(mirror, index, backoff)
        self.txn_id = transactional_id(mirror.source_name, mirror.instance_id, index)
        self.group = mirror.consumer_config["group.id"]
        self.producer_id = self.producer_epoch = -1
        self.sequences: dict[tuple[str, int], int] = {}
        self.in_txn: set[tuple[str, int]] = set()  # target partitions added to the open transaction
        self.txn_started = 0.0
        self.coordinators: dict[tuple[str, int], int] = {}  # (key, key type) -> node id
        self.offsets = Consumer({**mirror.target, "group.id": self.group, "enable.auto.commit": False,
                                 "isolation.level": "read_committed"})

    # ---- coordinators ------------------------------------------------------------------------------------------
    def _coordinator(self, key: str, key_type: int) -> int:
        """The coordinator's node id, asked once and kept until it answers NOT_COORDINATOR or the like."""
        node = self.coordinators.get((key, key_type))
        if node is None:
            node = self.coordinators[(key, key_type)] = self._find_coordinator(key, key_type)
        return node

    def _find_coordinator(self, key: str, key_type: int) -> int:
        cls, _ = request_module(FIND_COORDINATOR, 1)
        deadline = time.monotonic() + API_TIMEOUT_S
        while True:
            node = next(iter(self.target.addresses))
            response = self.target.get(node).call(FIND_COORDINATOR, 1, cls(key=key, key_type=key_type))
            error = ErrorCode(response.error_code)
            if error == ErrorCode.none:
                self.target.addresses[int(response.node_id)] = (response.host, int(response.port))
                return int(response.node_id)
            if error not in RETRIABLE_COORDINATOR or time.monotonic() > deadline:
                raise KafkaException(f"FindCoordinator {key}: {error.name}")
            self.m.stop_event.wait(0.1)

    def _txn_call(self, api_key: int, version: int, body, error_of, key: str | None = None, key_type: int = 1):
        """A request to the transaction (or group) coordinator, retried while it answers with a retriable error."""
        deadline = time.monotonic() + API_TIMEOUT_S
        delay = 0.02
        while True:
            node = self._coordinator(key or self.txn_id, key_type)
            response = self.target.get(node).call(api_key, version, body)
            error = error_of(response)
            if error == ErrorCode.none:
                return response
            if error not in RETRIABLE_COORDINATOR or time.monotonic() > deadline or self.m.stop_event.is_set():
                raise KafkaException(f"{self.txn_id}: api {api_key} refused: {error.name}")
            if error != ErrorCode.concurrent_transactions:  # the coordinator moved or is loading: ask again
                self.coordinators.pop((key or self.txn_id, key_type), None)
            self.m.stop_event.wait(delay)
            delay = min(delay * 2, 0.5)

    def _init_producer(self) -> None:
        cls, _ = request_module(INIT_PRODUCER_ID, 1)
        response = self._txn_call(INIT_PRODUCER_ID, 1, cls(
            transactional_id=self.txn_id, transaction_timeout=datetime.timedelta(milliseconds=TXN_TIMEOUT_MS)),
            lambda r: ErrorCode(r.error_code))
        self.producer_id, self.producer_epoch = int(response.producer_id), int(response.producer_epoch)
        self.sequences.clear()
        log.info("mirror stream %d: transactional id %s, producer id %d epoch %d", self.index, self.txn_id,
                 self.producer_id, self.producer_epoch)

    # ---- hooks of the batch stream -------------------------------------------------------------------------------
    def run(self) -> None:
        self._refresh_target()
        self._init_producer()  # aborts what this id's previous incarnation left open
        super().run()

    def _starting_offsets(self, fresh: list[TopicPartition]) -> list[TopicPartition]:
        target = self.offsets.committed([TopicPartition(tp.topic, tp.partition) for tp in fresh], API_TIMEOUT_S)
        source = self.consumer.committed(fresh, API_TIMEOUT_S)
        return [TopicPartition(t.topic, t.partition, t.offset if t.offset >= 0 else s.offset)
                for t, s in zip(target, source)]

    def _before_produce(self, plan: dict) -> None:
        new = {(key[0], self.target_of[key]) for key in plan} - self.in_txn
        if not self.in_txn:
            self.txn_started = time.monotonic()
        if not new:
            return
        cls, module = request_module(ADD_PARTITIONS, 1)
        by_topic: dict[str, list[int]] = {}
        for topic, partition in sorted(new):
            by_topic.setdefault(topic, []).append(partition)
        body = cls(v3_and_below_transactional_id=self.txn_id, v3_and_below_producer_id=self.producer_id,
                   v3_and_below_producer_epoch=self.producer_epoch,
                   v3_and_below_topics=tuple(module.AddPartitionsToTxnTopic(name=t, partitions=tuple(ps))
                                             for t, ps in by_topic.items()))

        def error_of(response):
            errors = {ErrorCode(p.partition_error_code) for t in response.results_by_topic_v3_and_below
                      for p in t.results_by_partition} - {ErrorCode.none, ErrorCode.operation_not_attempted}
            return next(iter(errors), ErrorCode.none)

        self._txn_call(ADD_PARTITIONS, 1, body, error_of)
        self.in_txn |= new

    def _encode(self, key: Key, batch) -> list:
        target = (key[0], self.target_of[key])
        sequence = self.sequences.get(target, 0)
        self.sequences[target] = (sequence + batch.count) % (1 << 31)
        return batch.encode_parts(self.producer_id, self.producer_epoch, sequence, transactional=True)

    def _round_done(self) -> None:
        """Nothing: the transaction ends between cycles, with the positions of its last one."""

    def _transactional_id(self) -> str | None:
        return self.txn_id

    def _commit(self) -> None:
        """End the open transaction once its interval is over (or at once when stopping or handing over), with
        the source positions it consumed."""
        if not self.uncommitted or self.consumer is None:
            return
        if self.in_txn and time.monotonic() - self.txn_started < self.m.transaction_interval_s \
                and not self.m.stop_event.is_set() and not self._handing_over:
            return
        if self.failed:
            self._end(commit=False)
            return
        if not self.in_txn:  # only markers or aborted records consumed: positions go with the next transaction
            return
        cls, _ = request_module(ADD_OFFSETS, 1)
        self._txn_call(ADD_OFFSETS, 1, cls(transactional_id=self.txn_id, producer_id=self.producer_id,
                                           producer_epoch=self.producer_epoch, group_id=self.group),
                       lambda r: ErrorCode(r.error_code))
        cls, module = request_module(TXN_OFFSET_COMMIT, 2)
        by_topic: dict[str, list] = {}
        for (topic, partition), offset in sorted(self.uncommitted.items()):
            by_topic.setdefault(topic, []).append(module.TxnOffsetCommitRequestPartition(
                partition_index=partition, committed_offset=offset, committed_leader_epoch=-1,
                committed_metadata=""))
        body = cls(transactional_id=self.txn_id, group_id=self.group, producer_id=self.producer_id,
                   producer_epoch=self.producer_epoch,
                   topics=tuple(module.TxnOffsetCommitRequestTopic(name=t, partitions=tuple(ps))
                                for t, ps in by_topic.items()))

        def error_of(response):
            errors = {ErrorCode(p.error_code) for t in response.topics for p in t.partitions} - {ErrorCode.none}
            return next(iter(errors), ErrorCode.none)

        self._txn_call(TXN_OFFSET_COMMIT, 2, body, error_of, key=self.group, key_type=0)
        self._end(commit=True)
        self.uncommitted.clear()
        with self.m.counters.lock:
            self.m.counters.transactions += 1

    def _end(self, commit: bool) -> None:
        if not self.in_txn:
            return
        cls, _ = request_module(END_TXN, 1)
        try:
            self._txn_call(END_TXN, 1, cls(transactional_id=self.txn_id, producer_id=self.producer_id,
                                           producer_epoch=self.producer_epoch, committed=commit),
                           lambda r: ErrorCode(r.error_code))
        except (KafkaException, OSError, ConnectionError):
            if commit:
                raise
            log.warning("mirror stream %d: abort of %s not acknowledged (the next InitProducerId aborts it)",
                        self.index, self.txn_id)
        finally:
            self.in_txn = set()
        if not commit:
            with self.m.counters.lock:
                self.m.counters.aborted_transactions += 1

    _handing_over = False

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self._handing_over = True  # the next owner starts from what this transaction commits
        try:
            super()._on_revoke(consumer, partitions)
        finally:
            self._handing_over = False

    def close(self) -> None:
        try:
            if self.failed:
                self._end(commit=False)
        except Exception as exc:  # noqa: BLE001 - closing after a failure
            log.warning("mirror stream %d: abort: %s", self.index, exc)
        if self.failed:
            self.uncommitted.clear()  # nothing to commit: the aborted transaction's offsets go nowhere
        super().close()
        try:
            self.offsets.close()
        except Exception as exc:  # noqa: BLE001
            log.warning("closing the offsets reader: %s", exc)
