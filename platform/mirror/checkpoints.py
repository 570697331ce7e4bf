"""Offset checkpoints: which target offset holds the copy of which source offset, per partition, in a compacted
topic on the target (key: source cluster, topic, partition; value: the latest source offset mirrored and its
target offset). With them a consumer group can move from a live cluster to the offline one:
:func:`translate` turns the group's committed source offsets into target offsets that lose nothing (at-least-once:
a group that committed past the last checkpoint resumes right after the checkpointed record; one that has not
reached it resumes at the start of the target partition)."""

from __future__ import annotations

import json
import logging
import threading
import time

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, NewTopic
from settings.security import client_base

log = logging.getLogger(__name__)


class CheckpointWriter:
    """Shared by the mirror's streams (thread-safe). A flush that the target does not acknowledge keeps the
    checkpoints for the next one; it never fails the copy."""

    def __init__(self, bootstrap: str | dict, topic: str, source: str, interval_s: float):
        """``bootstrap``: the target's bootstrap servers, or a settings.security.connection() dict."""
        self.bootstrap, self.topic, self.source, self.interval = bootstrap, topic, source, interval_s
        self.latest: dict[tuple[str, int], tuple[int, int]] = {}
        self.dirty: set[tuple[str, int]] = set()
        self.last_flush = 0.0
        self.producer: Producer | None = None
        self.lock = threading.Lock()

    def record(self, topic: str, partition: int, source_offset: int, target_offset: int) -> None:
        with self.lock:
            current = self.latest.get((topic, partition))
            if current is None or source_offset > current[0]:
                self.latest[(topic, partition)] = (source_offset, target_offset)
                self.dirty.add((topic, partition))

    def maybe_flush(self, force: bool = False, timeout_s: float = 30.0) -> bool:
        """Write the changed checkpoints when due; False when the target did not take them (kept for later)."""
        with self.lock:
            if not self.dirty or (not force and time.monotonic() - self.last_flush < self.interval):
                return True
            self.last_flush = time.monotonic()
            try:
                return self._flush(timeout_s)
            except Exception as exc:  # the target is away: the checkpoints stay dirty
                log.warning("checkpoints not written (%s); kept for the next flush", exc)
                return False

    def _flush(self, timeout_s: float) -> bool:
        if self.producer is None:
            ensure_topic(self.bootstrap, self.topic, timeout_s)
            self.producer = Producer({**client_base(self.bootstrap), "acks": "all"})
        failed: list = []
        sent = sorted(self.dirty)
        for topic, partition in sent:
            source_offset, target_offset = self.latest[(topic, partition)]
            self.producer.produce(self.topic, json.dumps({"source_offset": source_offset,
                                                          "target_offset": target_offset}).encode(),
                                  json.dumps({"source": self.source, "topic": topic, "partition": partition}).encode(),
                                  on_delivery=lambda err, _msg: failed.append(err) if err else None)
        if self.producer.flush(timeout_s) > 0 or failed:
            log.warning("checkpoints not acknowledged by the target (%s); kept for the next flush",
                        failed[0] if failed else "timed out")
            return False
        self.dirty.difference_update(sent)
        return True

    def close(self, timeout_s: float = 5.0) -> None:
        """The last flush, at shutdown: bounded, since a target that is away would otherwise hold the stop (the
        checkpoints are written again by the next run)."""
        self.maybe_flush(force=True, timeout_s=timeout_s)


def ensure_topic(bootstrap: str | dict, topic: str, timeout_s: float = 30.0) -> None:
    admin = AdminClient(client_base(bootstrap))
    try:
        admin.create_topics([NewTopic(topic, 1, -1, config={"cleanup.policy": "compact"})])[topic].result(timeout_s)
    except KafkaException as exc:
        if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
            raise


def read_checkpoints(bootstrap: str, topic: str, source: str) -> dict[tuple[str, int], tuple[int, int]]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "logbus-mirror-translate",
                         "enable.auto.commit": False})
    try:
        end = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=15)[1]
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        out: dict[tuple[str, int], tuple[int, int]] = {}
        position = 0
        while position < end:
            # at most what is left (compaction leaves gaps, so maybe fewer): consume() waits out its timeout
            # for a count it cannot reach
            msgs = consumer.consume(max(1, min(1000, end - position)), timeout=5)
            if not msgs:
                break
            for msg in msgs:
                if msg.error():
                    continue
                position = msg.offset() + 1
                key = json.loads(msg.key())
                if key.get("source") == source and msg.value() is not None:
                    value = json.loads(msg.value())
                    out[(key["topic"], int(key["partition"]))] = (value["source_offset"], value["target_offset"])
        return out
    finally:
        consumer.close()


def translate(committed: dict[tuple[str, int], int], checkpoints: dict[tuple[str, int], tuple[int, int]]
              ) -> dict[tuple[str, int], int]:
    """Target offsets for a group's committed source offsets (pure)."""
    out = {}
    for tp, committed_offset in committed.items():
        checkpoint = checkpoints.get(tp)
        if checkpoint is not None and committed_offset > checkpoint[0]:
            out[tp] = checkpoint[1] + 1
        else:
            out[tp] = 0
    return out


def translate_group(source_bootstrap: str, target_bootstrap: str, group: str, source: str, topic: str,
                    apply: bool = False) -> dict[tuple[str, int], int]:
    checkpoints = read_checkpoints(target_bootstrap, topic, source)
    partitions = [TopicPartition(t, p) for t, p in checkpoints]
    consumer = Consumer({"bootstrap.servers": source_bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        committed = {(tp.topic, tp.partition): tp.offset for tp in consumer.committed(partitions, timeout=30)
                     if tp.offset >= 0}
    finally:
        consumer.close()
    result = translate(committed, checkpoints)
    if apply and result:
        target = Consumer({"bootstrap.servers": target_bootstrap, "group.id": group, "enable.auto.commit": False})
        try:
            target.commit(offsets=[TopicPartition(t, p, o) for (t, p), o in result.items()], asynchronous=False)
        finally:
            target.close()
    return result
