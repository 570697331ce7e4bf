"""Reads the ``_audit`` topic of one or more clusters into memory for the audit service.

Each cluster gets a thread with a plain consumer assigned to every ``_audit`` partition from the beginning. A
record is decoded from Confluent's wire format (magic byte 0, 4-byte schema id, Avro body) with the writer schema
fetched from the registry by id and resolved against our reader schema (:data:`audit.events.SCHEMA`). Records that
cannot be decoded are counted as malformed by reason and skipped; they never stop the reader. A registry that is
unreachable is not a malformed record: the reader waits and retries the same record.

Memory stays bounded by the number of (topic, window, producer) keys: TIER snapshots are cumulative, so only the
latest per (tier, topic, window, producer) is kept, PRODUCED events are kept once each, round markers are dropped.
"""

from __future__ import annotations

import io
import json
import logging
import re
import struct
import threading
import time
from collections import Counter

import fastavro
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.error import SchemaRegistryError

from audit.events import AUDIT_TOPIC, SCHEMA
from audit.reconcile import PRODUCED, ROUND
from logbus.retry import Backoff

log = logging.getLogger(__name__)
READER_SCHEMA = fastavro.parse_schema(SCHEMA)


CLUSTER_KEY = re.compile(r"audit\.cluster\.([A-Za-z0-9_.-]+?)\.bootstrap\.servers")


def split_clusters(values: dict[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    """``audit.cluster.<name>.bootstrap.servers`` settings as {name: bootstrap}, and the other settings."""
    clusters, rest = {}, {}
    for key, value in values.items():
        m = CLUSTER_KEY.fullmatch(key)
        if m:
            clusters[m.group(1)] = value
        else:
            rest[key] = value
    return clusters, rest


class Malformed(Exception):
    """A record that can never be decoded; ``reason`` names why."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


class Transient(Exception):
    """The registry could not be asked; retry the same record later."""


class AuditDecoder:
    def __init__(self, registry: str | dict):
        """``registry``: the registry's URL, or SchemaRegistryClient settings (settings.registry_client)."""
        self.registry = SchemaRegistryClient(dict(registry) if isinstance(registry, dict) else {"url": registry})
        self.writers: dict[int, dict] = {}
        self.lock = threading.Lock()

    def decode(self, value: bytes | None) -> dict:
        if not value or len(value) < 5 or value[0] != 0:
            raise Malformed("not_confluent_avro")
        schema_id = struct.unpack(">I", value[1:5])[0]
        writer = self._writer(schema_id)
        try:
            return fastavro.schemaless_reader(io.BytesIO(value[5:]), writer, READER_SCHEMA)
        except Exception:  # truncated body, a schema that does not resolve against ours, ...
            raise Malformed("undecodable") from None

    def _writer(self, schema_id: int) -> dict:
        with self.lock:
            if schema_id in self.writers:
                return self.writers[schema_id]
        try:
            schema = self.registry.get_schema(schema_id)
        except SchemaRegistryError as exc:
            if exc.http_status_code == 404:
                raise Malformed("unknown_schema_id") from None
            raise Transient(str(exc)) from None
        except Exception as exc:  # connection refused, timeout
            raise Transient(str(exc)) from None
        if schema.schema_type not in (None, "AVRO"):
            raise Malformed("not_avro")
        try:
            parsed = fastavro.parse_schema(json.loads(schema.schema_str))
        except Exception:
            raise Malformed("undecodable") from None
        with self.lock:
            self.writers[schema_id] = parsed
        return parsed


class AuditStore:
    """The decoded events, compacted as described in the module docstring; thread-safe."""

    def __init__(self):
        self.lock = threading.Lock()
        self.produced: dict[tuple, dict] = {}
        self.tiers: dict[tuple, dict] = {}
        self.malformed: Counter = Counter()
        self.read = 0

    def add(self, event: dict, origin: str | None = None) -> None:
        """``origin``: the cluster whose ``_audit`` held the event; a PRODUCED event keeps it (``origin``), so the
        reconciliation knows which datacenter each producer wrote to (mirrors never copy ``_audit``)."""
        with self.lock:
            self.read += 1
            if event["kind"] == PRODUCED:
                if origin is not None:
                    event["origin"] = origin
                key = (event["producer_id"], event["topic"], event["window_start"], event["first_seq"],
                       event["last_seq"])
                self.produced[key] = event
            elif event["producer_id"] != ROUND:
                key = (event["tier"], event["topic"], event["window_start"], event["producer_id"])
                old = self.tiers.get(key)
                if old is None or event["emitted_at"] >= old["emitted_at"]:
                    self.tiers[key] = event

    def count_malformed(self, reason: str) -> None:
        with self.lock:
            self.read += 1
            self.malformed[reason] += 1

    def events(self) -> list[dict]:
        with self.lock:
            return list(self.produced.values()) + list(self.tiers.values())

    def stats(self) -> dict:
        with self.lock:
            return {"records_read": self.read, "malformed": sum(self.malformed.values()),
                    "malformed_by_reason": dict(self.malformed), "produced_events": len(self.produced),
                    "tier_snapshots": len(self.tiers)}


class ClusterReader(threading.Thread):
    """Follows ``_audit`` of one cluster into an :class:`AuditStore`."""

    def __init__(self, name: str, bootstrap: str, store: AuditStore, decoder: AuditDecoder,
                 topic: str = AUDIT_TOPIC, client_conf: dict | None = None):
        super().__init__(name=f"audit-reader-{name}", daemon=True)
        self.cluster, self.bootstrap, self.topic = name, bootstrap, topic
        self.client_conf = client_conf or {}  # security settings (librdkafka's names)
        self.store, self.decoder = store, decoder
        self.stopping = threading.Event()
        self.positions: dict[int, int] = {}
        self.error: str | None = None
        self.caught_up = False

    def stop(self) -> None:
        self.stopping.set()

    def status(self) -> dict:
        return {"bootstrap": self.bootstrap, "partitions": len(self.positions), "caught_up": self.caught_up,
                "positions": {str(p): o for p, o in sorted(self.positions.items())}, "error": self.error}

    def run(self) -> None:
        backoff = Backoff(1.0, 30.0)
        while not self.stopping.is_set():
            try:
                self._follow()
                return
            except Exception as exc:  # never fatal: the reader resumes at its positions
                delay = backoff.next()
                self.error = f"{type(exc).__name__}: {exc}"
                log.warning("%s: reader failed (%s); resuming in %.1f s", self.cluster, self.error, delay)
                self.stopping.wait(delay)

    def _follow(self) -> None:
        consumer = Consumer({**self.client_conf, "bootstrap.servers": self.bootstrap,
                             "group.id": f"logbus-audit-service-{self.cluster}",
                             "enable.auto.commit": False, "socket.timeout.ms": 10000})
        assigned: set[int] = set()
        last_refresh = 0.0
        try:
            while not self.stopping.is_set():
                if time.monotonic() - last_refresh > 5 or not assigned:
                    last_refresh = time.monotonic()
                    assigned = self._assign(consumer, assigned)
                    if not assigned:
                        self.stopping.wait(1)
                        continue
                msgs = consumer.consume(500, timeout=0.5)
                if not msgs:
                    self.caught_up = True
                for m in msgs:
                    if m.error():
                        if m.error().code() != KafkaError._PARTITION_EOF:
                            self.error = str(m.error())
                        continue
                    if not self._handle(m.value()):
                        return  # stopping while the registry was away
                    self.positions[m.partition()] = m.offset() + 1
        finally:
            consumer.close()

    def _assign(self, consumer: Consumer, assigned: set[int]) -> set[int]:
        try:
            md = consumer.list_topics(timeout=10).topics.get(self.topic)  # no topic named: never auto-creates
        except Exception as exc:
            self.error = f"metadata: {exc}"
            return assigned
        self.error = None
        wanted = set(md.partitions) if md is not None else set()
        if wanted != assigned:
            consumer.assign([TopicPartition(self.topic, p, self.positions.get(p, OFFSET_BEGINNING))
                             for p in sorted(wanted)])
        return wanted

    def _handle(self, value: bytes | None) -> bool:
        while not self.stopping.is_set():
            try:
                self.store.add(self.decoder.decode(value), self.cluster)
                return True
            except Malformed as exc:
                self.store.count_malformed(exc.reason)
                return True
            except Transient as exc:
                self.error = f"schema registry: {exc}"
                log.warning("%s: schema registry unavailable (%s); retrying", self.cluster, exc)
                self.stopping.wait(1)
        return False


def read_to_end(bootstrap: str, topic: str, group_id: str, timeout_s: float = 60, client_conf: dict | None = None):
    """Every record of ``topic`` from each partition's log start to its high watermark at the time it is reached
    (a TimeoutError if the broker stops delivering before that); no topic, no records. ``client_conf``: security
    settings (librdkafka's names)."""
    consumer = Consumer({**(client_conf or {}), "bootstrap.servers": bootstrap, "group.id": group_id,
                         "enable.auto.commit": False})
    try:
        md = consumer.list_topics(timeout=20).topics.get(topic)  # naming no topic: never auto-creates it
        for p in (md.partitions if md else ()):
            deadline = time.monotonic() + timeout_s
            position, end = _watermarks(consumer, TopicPartition(topic, p), deadline)
            consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING)])
            while position < end:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{bootstrap}: {topic}[{p}] not read to {end} within {timeout_s}s")
                # never more than are left: consume() waits out its timeout for a count it cannot reach
                for m in consumer.consume(max(1, min(1000, end - position)), timeout=1):
                    if not m.error():
                        position = m.offset() + 1
                        yield m
    finally:
        consumer.close()


def _watermarks(consumer: Consumer, tp: TopicPartition, deadline: float) -> tuple[int, int]:
    """A partition's (low, high) watermarks, asked again while its leader is not known yet (a topic being
    created: the metadata can list a partition before any broker serves it)."""
    while True:
        try:
            return consumer.get_watermark_offsets(tp, timeout=max(1.0, min(20.0, deadline - time.monotonic())))
        except KafkaException as exc:
            if time.monotonic() >= deadline:
                raise
            log.info("%s[%d]: watermarks not available yet (%s); asking again", tp.topic, tp.partition,
                     exc.args[0])
            time.sleep(0.5)


def read_once(clusters: dict[str, str], registry: str | dict, topic: str = AUDIT_TOPIC,
              timeout_s: float = 60, client_conf: dict | None = None) -> AuditStore:
    """Everything in ``topic`` of each cluster up to its high watermarks now, for batch jobs (the loads'
    reconcile step); malformed records are counted in the store, never fatal."""
    store, decoder = AuditStore(), AuditDecoder(registry)
    for name, bootstrap in clusters.items():
        for m in read_to_end(bootstrap, topic, f"logbus-audit-batch-{name}", timeout_s, client_conf):
            try:
                store.add(decoder.decode(m.value()), name)
            except Malformed as exc:
                store.count_malformed(exc.reason)
    return store
