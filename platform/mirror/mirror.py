"""The mirror: embedded consumers in the offline datacenter that pull from a live cluster and republish (paper §4).

Each stream is a consumer in the mirror's group (subscribed to ``^(whitelist)$`` minus the blacklist, so new
matching topics are picked up within ``topic.metadata.refresh.interval.ms``) feeding one shared idempotent
``acks=all`` producer. A batch is produced, flushed until every record is acknowledged by the target, and only
then are its source offsets committed: at-least-once, nothing lost, duplicates only around a crash. Records
keep key, value, headers, timestamp and (when the target topic has the same partition count) partition; each
gets provenance headers, and records that already carry them are never mirrored again (no loops when clusters
mirror each other). Missing target topics are created with the source's partition count and configs.
Checkpoints (source offset -> target offset per partition) go to a compacted topic on the target
(:mod:`mirror.checkpoints`).

The mirror only stops when told to (SIGTERM). Each stream owns its consumer and producer; any error in a stream
(a target that refuses records, a fatal producer error, a source that cannot be read) is logged, counted, and the
stream restarts with fresh clients after a bounded exponential backoff, from the source offsets last committed,
so nothing is lost and at most the uncommitted batch is copied twice. A refused commit (a rebalance, a
coordinator moving) is not an error of the copy: the records are on the target, and the offsets are committed
with the next batch. An unreachable target only pauses the copy: records wait in the producer without a
delivery timeout (``message.timeout.ms=0``, as Kafka's mirror tools default to an unbounded delivery timeout).
"""

from __future__ import annotations

import json
import logging
import re
import threading
import time
from dataclasses import dataclass, field

from confluent_kafka import (
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic, ResourceType

from logbus.retry import Backoff
from mirror.checkpoints import CheckpointWriter
from settings.security import connection

log = logging.getLogger(__name__)
SOURCE_HEADER, PARTITION_HEADER, OFFSET_HEADER = "logbus.mirror.source", "logbus.mirror.partition", \
    "logbus.mirror.offset"
COPIED_CONFIGS = ("cleanup.policy", "retention.ms", "retention.bytes", "min.insync.replicas", "max.message.bytes",
                  "segment.bytes", "delete.retention.ms", "min.cleanable.dirty.ratio")


@dataclass
class Counters:
    records: int = 0
    bytes: int = 0  # keys + values of the records copied (committed)
    skipped_loops: int = 0
    errors: int = 0
    restarts: int = 0
    commit_failures: int = 0
    batches: int = 0
    transactions: int = 0
    aborted_transactions: int = 0
    started: float = field(default_factory=time.monotonic)
    lag: dict[str, int] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def snapshot(self) -> dict:
        with self.lock:
            elapsed = max(time.monotonic() - self.started, 1e-9)
            return {"records": self.records, "records_per_s": round(self.records / elapsed, 1), "bytes": self.bytes,
                    "skipped_loops": self.skipped_loops, "errors": self.errors, "restarts": self.restarts,
                    "commit_failures": self.commit_failures, "batches": self.batches,
                    "transactions": self.transactions, "aborted_transactions": self.aborted_transactions,
                    "lag": dict(self.lag), "total_lag": sum(self.lag.values())}


class Mirror:
    def __init__(self, consumer_config: dict, producer_config: dict, whitelist: str, blacklist: str | None = None,
                 num_streams: int = 1, source_name: str = "source", checkpoint_topic: str = "_mirror_checkpoints",
                 checkpoint_interval_s: float = 5.0, batch_size: int | None = None, exactly_once: bool = False,
                 instance_id: str = "0", transaction_interval_ms: int = 100, copy: str = "batches"):
        """Raises ValueError (a bad pattern) or KafkaException (a bad client setting): fatal configuration errors.
        ``exactly_once``: copy in transactions with the consumed offsets (:mod:`mirror.exactly_once`), one per
        ``transaction_interval_ms`` at most (MirrorMaker 2's transaction.boundary.interval.ms; 100 ms, Kafka Streams'
        commit.interval.ms under exactly-once), or sooner when ``batch_size`` records are waiting (default: 2000 per
        batch on the record path, 50,000 per transaction: each transaction costs several round trips). ``copy``:
        ``batches`` moves whole record batches (:mod:`mirror.batch_stream`, :mod:`mirror.txn_stream`) when both
        clusters are PLAINTEXT; otherwise (or ``records``) records go one by one through librdkafka."""
        self.consumer_config = {"group.id": f"logbus-mirror-{source_name}", "auto.offset.reset": "earliest",
                                "topic.metadata.refresh.interval.ms": 5000, **consumer_config,
                                "enable.auto.commit": False}
        self.producer_config = {"linger.ms": 5, "message.timeout.ms": 0, **producer_config, "acks": "all",
                                "enable.idempotence": True}
        try:
            self.whitelist = re.compile(whitelist)
            self.blacklist = re.compile(blacklist) if blacklist else None
        except re.error as exc:
            raise ValueError(f"bad topic pattern: {exc}") from None
        self.num_streams = num_streams
        self.source_name = source_name
        self.exactly_once = exactly_once
        self.instance_id = instance_id
        self.batch_size = batch_size or (50_000 if exactly_once else 2000)
        if transaction_interval_ms <= 0:
            raise ValueError(f"transaction interval must be > 0 ms, not {transaction_interval_ms}")
        self.transaction_interval_s = transaction_interval_ms / 1000
        self.counters = Counters()
        self.stop_event = threading.Event()
        Producer(self.producer_config).flush(0)  # a bad setting fails here, once, not in every stream restart
        Consumer(self.consumer_config).close()
        self.target = connection(self.producer_config)  # bootstrap + security: the base of the other clients
        self.source = connection(self.consumer_config)
        if copy not in ("batches", "records"):
            raise ValueError(f"copy must be batches or records, not {copy!r}")
        plaintext = all(str(c.get("security.protocol", "plaintext")).lower() == "plaintext"
                        for c in (self.source, self.target))
        self.copy_batches = copy == "batches" and plaintext
        self.target_admin = AdminClient(self.target)
        self.source_admin = AdminClient(self.source)
        self.target_partitions: dict[str, int] = {}
        self._source_partition_cache: dict[str, int] = {}
        self.topics_lock = threading.Lock()
        self.checkpoints = CheckpointWriter(self.target, checkpoint_topic,
                                            source_name, checkpoint_interval_s)

    # ---- topics ------------------------------------------------------------------------------------------------
    def wanted(self, topic: str) -> bool:
        if topic.startswith("_") or topic.startswith("__"):
            return False
        return bool(self.whitelist.fullmatch(topic)) and not (self.blacklist and self.blacklist.fullmatch(topic))

    def ensure_target(self, topic: str, source_partitions: int) -> int:
        """The target topic's partition count, creating it like the source one if missing."""
        with self.topics_lock:
            if topic in self.target_partitions:
                return self.target_partitions[topic]
            # all topics: a Metadata request naming the topic would let the target auto-create it with its
            # own default partition count
            md = self.target_admin.list_topics(timeout=30).topics.get(topic)
            if md is None or md.error is not None or not md.partitions:
                configs = self._source_configs(topic)
                try:
                    self.target_admin.create_topics([NewTopic(topic, source_partitions, -1, config=configs)])[
                        topic].result(60)
                    log.info("created %s on the target (%d partitions, %s)", topic, source_partitions, configs)
                except KafkaException as exc:
                    if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                        raise
                md = self.target_admin.list_topics(timeout=30).topics.get(topic)
                if md is None or not md.partitions:
                    raise KafkaException(KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART,
                                                    f"{topic} not in the target's metadata yet"))
            self.target_partitions[topic] = len(md.partitions)
            return self.target_partitions[topic]

    def _source_configs(self, topic: str) -> dict[str, str]:
        try:
            resource = ConfigResource(ResourceType.TOPIC, topic)
            described = list(self.source_admin.describe_configs([resource]).values())[0].result(30)
        except KafkaException:
            return {}
        return {k: v.value for k, v in described.items() if k in COPIED_CONFIGS and not v.is_default and v.value}

    # ---- streams -------------------------------------------------------------------------------------------------
    def run(self, status_every_s: float = 5.0, status_callback=None) -> None:
        """Copy until :meth:`stop`; a stream thread that ends for any other reason is started again."""
        threads = [self._start_stream(i) for i in range(self.num_streams)]
        last = time.monotonic()
        try:
            while not self.stop_event.is_set():
                self.stop_event.wait(0.5)
                for i, t in enumerate(threads):
                    if not t.is_alive() and not self.stop_event.is_set():
                        log.error("mirror stream %d ended unexpectedly; starting it again", i)
                        threads[i] = self._start_stream(i)
                if time.monotonic() - last >= status_every_s:
                    last = time.monotonic()
                    snap = self.counters.snapshot()
                    log.info("mirrored %d records (%.0f/s), lag %d, errors %d, restarts %d", snap["records"],
                             snap["records_per_s"], snap["total_lag"], snap["errors"], snap["restarts"])
                    if status_callback is not None:
                        status_callback(snap)
        finally:
            self.stop_event.set()
            for t in threads:
                t.join(30)
            try:
                self.checkpoints.close()
            except Exception as exc:  # the target is away: the next run writes them
                log.warning("checkpoints not written at shutdown: %s", exc)

    def stop(self) -> None:
        self.stop_event.set()

    def _start_stream(self, index: int) -> threading.Thread:
        t = threading.Thread(target=self._stream, args=(index,), name=f"mirror-stream-{index}", daemon=True)
        t.start()
        return t

    def new_consumer(self) -> Consumer:
        return Consumer({**self.consumer_config, "error_cb": lambda err: log.warning("source: %s", err)})

    def new_producer(self) -> Producer:
        return Producer({**self.producer_config, "error_cb": lambda err: log.warning("target: %s", err)})

    def _stream(self, index: int) -> None:
        """One stream: copy until stopped, restarting with fresh clients after any failure."""
        backoff = Backoff(0.5, 30.0)
        while not self.stop_event.is_set():
            consumer = producer = None
            try:
                if self.exactly_once or self.copy_batches:
                    if self.copy_batches:  # at-least-once or exactly once
                        from mirror.batch_stream import run_stream
                    else:
                        from mirror.exactly_once import run_stream

                    run_stream(self, index, backoff)
                    continue
                producer = self.new_producer()
                consumer = self.new_consumer()
                consumer.subscribe([f"^({self.whitelist.pattern})$"])
                uncommitted: dict[tuple[str, int], int] = {}
                retry_commit_at = 0.0
                while not self.stop_event.is_set():
                    msgs = consumer.consume(self.batch_size, timeout=0.05)  # batch: up to 50 ms of waiting
                    if msgs:
                        if self._copy(consumer, producer, msgs, uncommitted):
                            backoff.reset()
                    elif uncommitted and time.monotonic() >= retry_commit_at:
                        retry_commit_at = time.monotonic() + 1.0
                        self._commit(consumer, uncommitted)
                    self.update_lag(consumer)
            except Exception as exc:
                delay = backoff.next()
                log.warning("mirror stream %d failed (%s: %s); restarting it in %.1f s from the committed offsets",
                            index, type(exc).__name__, exc, delay)
                with self.counters.lock:
                    self.counters.errors += 1
                    self.counters.restarts += 1
                self.stop_event.wait(delay)
            finally:
                _close(consumer, producer)

    def _copy(self, consumer: Consumer, producer: Producer, msgs: list, uncommitted: dict) -> bool:
        """Copy one batch; True once its offsets are committed. Raises when the target refused a record."""
        positions: dict[tuple[str, int], int] = {}
        pending: list[tuple] = []
        failures: list = []
        skipped = 0
        nbytes = 0

        def delivered(err, msg, src=None):
            if err is not None:
                failures.append(err)
            else:
                pending.append((src[0], src[1], src[2], msg.offset()))

        for m in msgs:
            if source_event(m):
                continue
            positions[(m.topic(), m.partition())] = m.offset() + 1
            if not self.wanted(m.topic()):
                continue
            copy = self.prepare(consumer, m)
            if copy is None:
                skipped += 1  # already a mirrored record: never mirror it again
                continue
            topic, value, key, headers, timestamp, kwargs, src = copy
            nbytes += len(value or b"") + len(key or b"")
            while True:
                try:
                    producer.produce(topic, value, key, headers=headers, timestamp=timestamp,
                                     on_delivery=lambda err, msg, s=src: delivered(err, msg, s), **kwargs)
                    break
                except BufferError:
                    producer.poll(0.05)
        while producer.flush(5) > 0:  # every record acknowledged by the target before any commit
            if self.stop_event.is_set() and producer.flush(30) > 0:
                return False  # shutting down without acknowledgement: do not commit
        if failures:
            raise RuntimeError(f"target refused {len(failures)} record(s): {failures[0]}")
        if not positions:
            return False  # only errors and end-of-partition events: nothing to commit
        uncommitted.update(positions)
        committed = self._commit(consumer, uncommitted)
        for topic, partition, source_offset, target_offset in pending:
            self.checkpoints.record(topic, partition, source_offset, target_offset)
        self.checkpoints.maybe_flush()
        with self.counters.lock:
            self.counters.records += len(pending)
            self.counters.bytes += nbytes
            self.counters.skipped_loops += skipped
            self.counters.batches += 1
        return committed

    def prepare(self, consumer: Consumer, m):
        """(topic, value, key, headers, timestamp, partition kwargs, (topic, partition, offset)) of the copy of a
        wanted source record, or None for a record that is already a mirrored copy (no loops)."""
        topic, partition, offset = m.topic(), m.partition(), m.offset()
        headers = m.headers() or []
        if any(name == SOURCE_HEADER for name, _ in headers):
            return None
        source_partitions = self._source_partitions(consumer, topic)
        target_partitions = self.ensure_target(topic, source_partitions)
        kwargs = {"partition": partition} if target_partitions == source_partitions else {}
        ts_type, ts = m.timestamp()
        headers = list(headers) + [(SOURCE_HEADER, self.source_name.encode()),
                                   (PARTITION_HEADER, str(partition).encode()),
                                   (OFFSET_HEADER, str(offset).encode())]
        return topic, m.value(), m.key(), headers, ts if ts_type != 0 else 0, kwargs, (topic, partition, offset)

    def _commit(self, consumer: Consumer, uncommitted: dict) -> bool:
        """Commit the copied positions still owned; a refused commit keeps them for the next try."""
        assigned = {(tp.topic, tp.partition) for tp in consumer.assignment()}
        for tp in [tp for tp in uncommitted if tp not in assigned]:
            del uncommitted[tp]  # revoked: its new owner resumes from the last commit (duplicates, never loss)
        if not uncommitted:
            return False
        try:
            consumer.commit(offsets=[TopicPartition(t, p, o) for (t, p), o in uncommitted.items()],
                            asynchronous=False)
        except KafkaException as exc:
            log.warning("commit of %d offset(s) refused (%s); the records are on the target, the offsets go "
                        "with the next commit", len(uncommitted), exc.args[0])
            with self.counters.lock:
                self.counters.commit_failures += 1
            return False
        uncommitted.clear()
        return True

    def _source_partitions(self, consumer: Consumer, topic: str) -> int:
        count = self._source_partition_cache.get(topic)
        if count is None:
            count = len(consumer.list_topics(topic, timeout=30).topics[topic].partitions)
            self._source_partition_cache[topic] = count
        return count

    def update_lag(self, consumer: Consumer, known: dict[tuple[str, int], int] | None = None) -> None:
        """Lag per assigned partition; ``known``: next offsets the caller knows for partitions the consumer has
        not fetched from yet since their assignment (librdkafka's position is invalid until then)."""
        try:
            assigned = consumer.assignment()
            if not assigned:
                return
            for tp in consumer.position(assigned):
                low, high = consumer.get_watermark_offsets(tp, cached=True) or (0, 0)
                offset = tp.offset if tp.offset >= 0 else (known or {}).get((tp.topic, tp.partition), -1)
                lag = max(high - offset, 0) if offset >= 0 else high - low
                with self.counters.lock:
                    self.counters.lag[f"{tp.topic}-{tp.partition}"] = lag
        except KafkaException:
            pass


def source_event(m) -> bool:
    """True for a consumed error event rather than a record: logged (end of partition silently), or raised when
    fatal."""
    error = m.error()
    if error is None:
        return False
    if error.fatal():
        raise KafkaException(error)
    if error.code() != KafkaError._PARTITION_EOF:
        log.warning("source: %s", error)
    return True


# What a librdkafka look-up answers while what it needs is being found, not a fault of the copy: a slice that timed
# out or a connection that dropped; a partition whose leader the client does not know yet (_UNKNOWN_PARTITION: a
# topic created a moment ago, whose partitions a Metadata answer shows without a leader until the controller has
# elected them; a leader that moved or died) or whose broker handle went with the metadata (_DESTROY_BROKER); a
# group coordinator being found or loading. Asked again (:func:`stoppable`), not raised: a stream that failed on
# them restarted for nothing and counted an error.
TRANSIENT = frozenset({KafkaError._TIMED_OUT, KafkaError._TRANSPORT, KafkaError._UNKNOWN_PARTITION,
                       KafkaError._DESTROY_BROKER, KafkaError._WAIT_COORD, KafkaError.LEADER_NOT_AVAILABLE,
                       KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.UNKNOWN_TOPIC_OR_PART,
                       KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_NOT_AVAILABLE,
                       KafkaError.COORDINATOR_LOAD_IN_PROGRESS})
_TIMEOUTS = (KafkaError._TIMED_OUT, KafkaError._TRANSPORT)


def stoppable(call, stop_event: threading.Event, total_s: float, slice_s: float = 2.0, pause_s: float = 0.25):
    """``call(timeout)`` of a librdkafka API in slices of ``slice_s`` until it answers or ``total_s`` has passed:
    a slice that times out is asked again, unless the mirror is stopping. So a stop (SIGTERM) is seen within a
    slice even while both clusters are away, instead of after the whole API timeout. The other :data:`TRANSIENT`
    errors come back at once: asked again after ``pause_s`` (librdkafka refreshes its metadata meanwhile). Any
    other error, or one still there at ``total_s``, is raised."""
    deadline = time.monotonic() + total_s
    logged = False
    while True:
        try:
            return call(max(0.1, min(slice_s, deadline - time.monotonic())))
        except KafkaException as exc:
            error = exc.args[0] if exc.args else None
            code = error.code() if isinstance(error, KafkaError) else None
            if code not in TRANSIENT or stop_event.is_set() or time.monotonic() >= deadline:
                raise
            if code not in _TIMEOUTS:
                if not logged:
                    log.info("%s; asking again for up to %.0f s", error.str(), max(deadline - time.monotonic(), 0))
                    logged = True
                stop_event.wait(max(0.0, min(pause_s, deadline - time.monotonic())))


def _close(consumer: Consumer | None, producer: Producer | None) -> None:
    try:
        if producer is not None:
            producer.flush(10)
    except Exception as exc:
        log.warning("closing the target producer: %s", exc)
    try:
        if consumer is not None:
            consumer.close()
    except Exception as exc:
        log.warning("closing the source consumer: %s", exc)


def status_json(snapshot: dict) -> str:
    return json.dumps(snapshot, sort_keys=True)
