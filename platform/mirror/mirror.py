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

from mirror.checkpoints import CheckpointWriter

log = logging.getLogger(__name__)
SOURCE_HEADER, PARTITION_HEADER, OFFSET_HEADER = "logbus.mirror.source", "logbus.mirror.partition", \
    "logbus.mirror.offset"
COPIED_CONFIGS = ("cleanup.policy", "retention.ms", "retention.bytes", "min.insync.replicas", "max.message.bytes",
                  "segment.bytes", "delete.retention.ms", "min.cleanable.dirty.ratio")


@dataclass
class Counters:
    records: int = 0
    skipped_loops: int = 0
    errors: int = 0
    batches: int = 0
    started: float = field(default_factory=time.monotonic)
    lag: dict[str, int] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def snapshot(self) -> dict:
        with self.lock:
            elapsed = max(time.monotonic() - self.started, 1e-9)
            return {"records": self.records, "records_per_s": round(self.records / elapsed, 1),
                    "skipped_loops": self.skipped_loops, "errors": self.errors, "batches": self.batches,
                    "lag": dict(self.lag), "total_lag": sum(self.lag.values())}


class Mirror:
    def __init__(self, consumer_config: dict, producer_config: dict, whitelist: str, blacklist: str | None = None,
                 num_streams: int = 1, source_name: str = "source", checkpoint_topic: str = "_mirror_checkpoints",
                 checkpoint_interval_s: float = 5.0, batch_size: int = 2000):
        self.consumer_config = {"group.id": f"logbus-mirror-{source_name}", "auto.offset.reset": "earliest",
                                "topic.metadata.refresh.interval.ms": 5000, **consumer_config,
                                "enable.auto.commit": False}
        self.producer_config = {"linger.ms": 5, **producer_config, "acks": "all", "enable.idempotence": True}
        self.whitelist = re.compile(whitelist)
        self.blacklist = re.compile(blacklist) if blacklist else None
        self.num_streams = num_streams
        self.source_name = source_name
        self.batch_size = batch_size
        self.counters = Counters()
        self.stop_event = threading.Event()
        self.producer = Producer(self.producer_config)
        self.target_admin = AdminClient({"bootstrap.servers": self.producer_config["bootstrap.servers"]})
        self.source_admin = AdminClient({"bootstrap.servers": self.consumer_config["bootstrap.servers"]})
        self.target_partitions: dict[str, int] = {}
        self._source_partition_cache: dict[str, int] = {}
        self.topics_lock = threading.Lock()
        self.checkpoints = CheckpointWriter(self.producer_config["bootstrap.servers"], checkpoint_topic,
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
        threads = [threading.Thread(target=self._stream, args=(i,), name=f"mirror-stream-{i}", daemon=True)
                   for i in range(self.num_streams)]
        for t in threads:
            t.start()
        last = time.monotonic()
        try:
            while not self.stop_event.is_set() and any(t.is_alive() for t in threads):
                self.stop_event.wait(0.5)
                self.producer.poll(0)
                if time.monotonic() - last >= status_every_s:
                    last = time.monotonic()
                    snap = self.counters.snapshot()
                    log.info("mirrored %d records (%.0f/s), lag %d, errors %d", snap["records"],
                             snap["records_per_s"], snap["total_lag"], snap["errors"])
                    if status_callback is not None:
                        status_callback(snap)
        finally:
            self.stop_event.set()
            for t in threads:
                t.join(30)
            self.producer.flush(30)
            self.checkpoints.close()

    def stop(self) -> None:
        self.stop_event.set()

    def _stream(self, index: int) -> None:
        consumer = Consumer(self.consumer_config)
        consumer.subscribe([f"^({self.whitelist.pattern})$"])
        try:
            while not self.stop_event.is_set():
                msgs = consumer.consume(self.batch_size, timeout=0.05)  # batch: up to 50 ms of waiting
                if msgs:
                    self._copy(consumer, msgs)
                self._update_lag(consumer)
        except Exception:
            log.exception("mirror stream %d failed", index)
            with self.counters.lock:
                self.counters.errors += 1
        finally:
            consumer.close()

    def _copy(self, consumer: Consumer, msgs: list) -> None:
        positions: dict[tuple[str, int], int] = {}
        pending: list[tuple] = []
        failures: list = []
        skipped = 0

        def delivered(err, msg, src=None):
            if err is not None:
                failures.append(err)
            else:
                pending.append((src[0], src[1], src[2], msg.offset()))

        for m in msgs:
            if m.error():
                if m.error().code() != KafkaError._PARTITION_EOF:
                    log.warning("source error: %s", m.error())
                continue
            topic, partition, offset = m.topic(), m.partition(), m.offset()
            positions[(topic, partition)] = offset + 1
            if not self.wanted(topic):
                continue
            headers = m.headers() or []
            if any(name == SOURCE_HEADER for name, _ in headers):
                skipped += 1  # already a mirrored record: never mirror it again
                continue
            source_partitions = self._source_partitions(consumer, topic)
            target_partitions = self.ensure_target(topic, source_partitions)
            kwargs = {"partition": partition} if target_partitions == source_partitions else {}
            ts_type, ts = m.timestamp()
            headers = list(headers) + [(SOURCE_HEADER, self.source_name.encode()),
                                       (PARTITION_HEADER, str(partition).encode()),
                                       (OFFSET_HEADER, str(offset).encode())]
            while True:
                try:
                    self.producer.produce(topic, m.value(), m.key(), headers=headers,
                                          timestamp=ts if ts_type != 0 else 0,
                                          on_delivery=lambda err, msg, s=(topic, partition, offset):
                                          delivered(err, msg, s), **kwargs)
                    break
                except BufferError:
                    self.producer.poll(0.05)
        while self.producer.flush(5) > 0:  # every record acknowledged by the target before any commit
            if self.stop_event.is_set() and self.producer.flush(30) > 0:
                return  # shutting down without acknowledgement: do not commit
        if failures:
            with self.counters.lock:
                self.counters.errors += len(failures)
            raise RuntimeError(f"target refused {len(failures)} record(s): {failures[0]}")
        consumer.commit(offsets=[TopicPartition(t, p, o) for (t, p), o in positions.items()], asynchronous=False)
        for topic, partition, source_offset, target_offset in pending:
            self.checkpoints.record(topic, partition, source_offset, target_offset)
        self.checkpoints.maybe_flush()
        with self.counters.lock:
            self.counters.records += len(pending)
            self.counters.skipped_loops += skipped
            self.counters.batches += 1

    def _source_partitions(self, consumer: Consumer, topic: str) -> int:
        count = self._source_partition_cache.get(topic)
        if count is None:
            count = len(consumer.list_topics(topic, timeout=30).topics[topic].partitions)
            self._source_partition_cache[topic] = count
        return count

    def _update_lag(self, consumer: Consumer) -> None:
        try:
            assigned = consumer.assignment()
            if not assigned:
                return
            for tp in consumer.position(assigned):
                low, high = consumer.get_watermark_offsets(tp, cached=True) or (0, 0)
                lag = max(high - tp.offset, 0) if tp.offset >= 0 else high - low
                with self.counters.lock:
                    self.counters.lag[f"{tp.topic}-{tp.partition}"] = lag
        except KafkaException:
            pass


def status_json(snapshot: dict) -> str:
    return json.dumps(snapshot, sort_keys=True)
