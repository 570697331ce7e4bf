"""The exactly-once mirror (``logbus mirror --exactly-once``): each batch is copied in one transaction on the
target, together with the source offsets it consumed.

The offsets live in the *target* cluster, committed by the transaction (TxnOffsetCommit) under the mirror's
consumer group's name (``group.id``: a target that mirrors several sources needs one group per source) with
generation -1: a consumer on the target that never subscribes supplies that group metadata, and reads the
committed offsets back (read_committed: an open transaction's offsets are waited for, UNSTABLE_OFFSET_COMMIT). The source group only spreads partitions over the streams; on
every assignment a stream starts each partition from the target's committed offset (else from the source
group's committed offset, so a mirror switched from at-least-once continues where it was, else
``auto.offset.reset``). Readers of the offline cluster with ``isolation.level=read_committed`` (librdkafka's
default) then see every source record once: a batch either committed with its offsets or left nothing visible.

Fencing: the transactional id is ``logbus-mirror.<source>.<instance>.<stream>``; a restarted process (after
``kill -9``) re-initialises the same ids, which aborts its predecessor's open transactions at once. A stream
hands partitions over only between batches (a revocation is handled inside ``consume()``, after the previous
batch's transaction ended), so two streams never hold open transactions for one partition. Not covered (Kafka
needs KIP-447's group-bound fencing for it): a process paused past the source group's session timeout whose
stream resumes a transaction after its partitions moved; its commit could duplicate one batch.
"""

from __future__ import annotations

import logging

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from mirror.mirror import source_event

log = logging.getLogger(__name__)
TXN_TIMEOUT_MS = 30000
API_TIMEOUT_S = 60


def transactional_id(source_name: str, instance_id: str, index: int) -> str:
    return f"logbus-mirror.{source_name}.{instance_id}.{index}"


class ExactlyOnceStream:
    """One stream's clients and loop; :class:`mirror.mirror.Mirror` runs it in a thread and restarts it (fresh
    clients, backoff) on any exception."""

    def __init__(self, mirror, index: int, backoff):
        self.mirror = mirror
        self.index = index
        self.backoff = backoff
        producer_config = {k: v for k, v in mirror.producer_config.items() if k != "message.timeout.ms"}
        self.producer = Producer({**producer_config, "transactional.id": transactional_id(
            mirror.source_name, mirror.instance_id, index), "transaction.timeout.ms": TXN_TIMEOUT_MS,
            "error_cb": lambda err: log.warning("target: %s", err)})
        self.offsets = Consumer({**mirror.target, "group.id": mirror.consumer_config["group.id"],
                                 "enable.auto.commit": False, "isolation.level": "read_committed"})
        self.consumer = None
        self.next_offsets: dict[tuple[str, int], int] = {}  # for the lag while librdkafka's position is unknown

    def close(self) -> None:
        for client, closer in ((self.consumer, "close"), (self.offsets, "close")):
            try:
                if client is not None:
                    getattr(client, closer)()
            except Exception as exc:  # noqa: BLE001 - closing after a failure
                log.warning("closing a mirror client: %s", exc)

    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        """Start every newly assigned partition where the target's transactions left it."""
        if not partitions:
            consumer.assign(partitions)
            return
        target = self.offsets.committed([TopicPartition(tp.topic, tp.partition) for tp in partitions],
                                        API_TIMEOUT_S)
        source = consumer.committed(partitions, API_TIMEOUT_S)
        start = []
        for t, s in zip(target, source):
            offset = t.offset if t.offset >= 0 else s.offset  # negative: OFFSET_INVALID, auto.offset.reset
            start.append(TopicPartition(t.topic, t.partition, offset))
        log.info("mirror stream %d assigned %s", self.index, ", ".join(f"{tp.topic}-{tp.partition}@{tp.offset}"
                                                                       for tp in start))
        self.next_offsets.update({(tp.topic, tp.partition): tp.offset for tp in start if tp.offset >= 0})
        consumer.assign(start)

    def run(self) -> None:
        m = self.mirror
        self.producer.init_transactions(API_TIMEOUT_S)  # aborts what this id's previous incarnation left open
        self.consumer = m.new_consumer()
        self.consumer.subscribe([f"^({m.whitelist.pattern})$"], on_assign=self._on_assign)
        while not m.stop_event.is_set():
            # one transaction per interval (fewer markers and coordinator round trips than one per fetch)
            msgs = self.consumer.consume(m.batch_size, timeout=m.transaction_interval_s)
            if msgs:
                self.copy(msgs)
                self.backoff.reset()
            m.update_lag(self.consumer, self.next_offsets)

    def copy(self, msgs: list) -> None:
        m = self.mirror
        positions: dict[tuple[str, int], int] = {}
        delivered: list[tuple] = []
        failures: list = []
        records = []
        for msg in msgs:
            if source_event(msg):
                continue
            positions[(msg.topic(), msg.partition())] = msg.offset() + 1
            if m.wanted(msg.topic()):
                records.append(msg)
        if not positions:
            return
        self.producer.begin_transaction()
        try:
            skipped = 0
            nbytes = 0
            for msg in records:
                copy = m.prepare(self.consumer, msg)
                if copy is None:
                    skipped += 1
                    continue
                topic, value, key, headers, timestamp, kwargs, src = copy
                nbytes += len(value or b"") + len(key or b"")
                while True:
                    try:
                        self.producer.produce(topic, value, key, headers=headers, timestamp=timestamp,
                                              on_delivery=lambda err, out, s=src: failures.append(err)
                                              if err is not None else delivered.append((*s, out.offset())),
                                              **kwargs)
                        break
                    except BufferError:
                        self.producer.poll(0.05)
            self.producer.flush(API_TIMEOUT_S)  # serves the delivery reports: target offsets, refusals
            if failures:
                raise KafkaException(KafkaError(KafkaError._STATE, f"target refused {len(failures)} record(s): "
                                                f"{failures[0]}", txn_requires_abort=True))
            self.producer.send_offsets_to_transaction(
                [TopicPartition(t, p, o) for (t, p), o in positions.items()],
                self.offsets.consumer_group_metadata(), API_TIMEOUT_S)
            self.producer.commit_transaction(API_TIMEOUT_S)
            self.next_offsets.update(positions)
        except KafkaException as exc:
            error = exc.args[0]
            with m.counters.lock:
                m.counters.aborted_transactions += 1
            if error.txn_requires_abort():
                self._abort()
            raise  # the stream restarts from the target's committed offsets
        for topic, partition, source_offset, target_offset in delivered:
            m.checkpoints.record(topic, partition, source_offset, target_offset)
        m.checkpoints.maybe_flush()
        with m.counters.lock:
            m.counters.records += len(delivered)
            m.counters.bytes += nbytes
            m.counters.skipped_loops += skipped
            m.counters.batches += 1
            m.counters.transactions += 1

    def _abort(self) -> None:
        try:
            self.producer.abort_transaction(API_TIMEOUT_S)
        except KafkaException as exc:
            log.warning("aborting a mirror transaction: %s", exc.args[0])


def run_stream(mirror, index: int, backoff) -> None:
    stream = ExactlyOnceStream(mirror, index, backoff)
    try:
        stream.run()
    finally:
        stream.close()
