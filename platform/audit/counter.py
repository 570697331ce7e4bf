"""``logbus audit-counter``: one tier's counts (a live datacenter, the offline cluster).

It reads the whitelisted topics of its cluster (assigned partitions, not a group: its position is part of its
state) as whole record batches (:mod:`audit.batch_reader`, :mod:`audit.bulk`; librdkafka's consumer on secured
clusters or with ``--reader records``), read_committed, and counts per (topic, event-time window, producer) the
messages received and the distinct sequence numbers seen (as ranges). Every ``--emit-interval-ms`` it publishes, for every count that changed, a cumulative
TIER snapshot to ``_audit`` and then a round marker carrying its position in every partition. State and position
travel together: on restart the counter rebuilds both from its last complete round in ``_audit`` (snapshots of an
unfinished round are ignored and superseded), so a ``kill -9`` replays into exactly the same counts. The
reconciliation takes the latest snapshot per (tier, topic, window, producer). Any failure (a cluster or the
registry away, a refused snapshot) restarts the counter the same way after a bounded backoff, so it never stops
before it is told to. A round marker is a TIER event
with producer id ``__round__`` whose ``host`` lists the topics and whose ``source`` entries give, per partition,
the topic's index (``first``) and the last offset read (``last``), and whose ``sequences`` give, per ``_audit``
partition, the offset of the last snapshot the round's counts rely on (``[[partition, offset], ...]``).
Recovery refuses (and tries again after the backoff) while it cannot read that far: a broker restarted from its
high-watermark checkpoint, a follower's before it led, can expose a later round marker in one partition and
hide an earlier snapshot in another for a moment; counting on from such a view would lose those counts for good.
After ``recovery_wait_s`` (10 minutes) of that it counts on anyway, logging an error: the cluster then lost
what it had acknowledged (an unclean election), and a counter must not stop for it.
"""

from __future__ import annotations

import logging
import re
import time

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from audit import batch_reader, bulk
from audit.bulk import LONG_MAX, LONG_MIN
from audit.collector import AuditDecoder, Malformed, read_to_end
from audit.events import (
    AUDIT_TOPIC,
    HOST_HEADER,
    PRODUCER_HEADER,
    SCHEMA_STR,
    SEQUENCE_HEADER,
    TIME_HEADER,
    window_of,
)
from audit.ranges import RangeSet, runs
from audit.reconcile import ROUND
from logbus.retry import Backoff

log = logging.getLogger(__name__)


UNREACHABLE = {KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN, KafkaError._TIMED_OUT, KafkaError._RESOLVE,
               KafkaError._MSG_TIMED_OUT}


def _unreachable(exc: BaseException) -> bool:
    """A failure to reach the cluster (as librdkafka reports one), not a failure of the counting itself."""
    error = exc.args[0] if isinstance(exc, KafkaException) and exc.args else None
    return getattr(error, "code", lambda: None)() in UNREACHABLE


class IncompleteRound(RuntimeError):
    """Recovery sees the last round marker but not every snapshot it relies on (yet)."""


class TierCounter:
    def __init__(self, tier: str, consumer_config: dict, whitelist: str, registry_url: str | dict,
                 window_ms: int = 60000, emit_interval_ms: int = 5000, audit_bootstrap: str | None = None,
                 reader: str = "auto"):
        """``registry_url``: the registry's URL or SchemaRegistryClient settings (settings.registry_client).
        ``reader``: ``batches`` (:mod:`audit.batch_reader`, PLAINTEXT only), ``records`` (librdkafka) or ``auto``
        (batches where the consumer settings allow them)."""
        self.tier = tier
        self.bootstrap = consumer_config["bootstrap.servers"]
        # the tier's security settings (librdkafka's names) serve its audit producer and recovery reads too
        self.security = {k: v for k, v in consumer_config.items() if k.split(".")[0] in ("security", "sasl", "ssl")}
        # read_committed (librdkafka's default, said explicitly): records of aborted transactions (an exactly-once
        # mirror killed mid-batch) are never counted. Counting is not latency-bound (a window is reconciled after
        # its grace period), so a fetch waits for 1 MiB or 500 ms instead of returning at every produce: under
        # light traffic a counter asks each broker twice a second, not once per batch the producers send (each
        # request that arrives alone costs the broker far more than one of a stream: bench/wake_cost.py).
        # The wait is capped by the fetch sizes the config allows (a broker counts at most a partition's share
        # toward it: a 1 MiB wait with 256 KB partition fetches would stall every fetch for the whole 500 ms).
        min_bytes = min([1 << 20, *(int(consumer_config[k]) for k in ("max.partition.fetch.bytes", "fetch.max.bytes")
                                    if k in consumer_config)])
        self.consumer_config = {"isolation.level": "read_committed", "client.id": f"logbus-audit-{tier}",
                                "fetch.min.bytes": min_bytes, "fetch.wait.max.ms": 500, **consumer_config,
                                "group.id": f"logbus-audit-{tier}", "enable.auto.commit": False}
        try:
            self.whitelist = re.compile(whitelist)
        except re.error as exc:
            raise ValueError(f"bad --whitelist: {exc}") from None
        if reader not in ("auto", "batches", "records"):
            raise ValueError(f"bad reader {reader!r}: auto, batches or records")
        supported = batch_reader.supports(self.consumer_config)
        if reader == "batches" and not supported:
            raise ValueError("the batch reader serves PLAINTEXT read_committed consumers only")
        self.batches = supported and reader != "records"
        self.window_ms = window_ms
        self.emit_interval = emit_interval_ms / 1000
        self.serializer = AvroSerializer(SchemaRegistryClient(
            dict(registry_url) if isinstance(registry_url, dict) else {"url": registry_url}), SCHEMA_STR)
        self.decoder = AuditDecoder(registry_url)
        self.audit_bootstrap = audit_bootstrap or self.bootstrap
        self.producer = self._new_producer()
        Consumer(self.consumer_config).close()  # a bad setting fails here, before the first round
        self.counts: dict[tuple[str, int, str], dict] = {}
        self.positions: dict[tuple[str, int], int] = {}
        self.dirty: set[tuple[str, int, str]] = set()
        self.stored: dict[int, int] = {}  # _audit partition -> offset of the last snapshot the counts rely on
        self.recovery_wait_s = 600.0  # how long recovery waits for a round's snapshots to become readable
        self._behind_since: float | None = None
        self.malformed = 0
        self.restarts = 0
        self.counted: dict[str, int] = {}  # audited records counted, per topic (metrics)
        self.rounds = 0  # rounds published (metrics)

    # ---- recovery -----------------------------------------------------------------------------------------------
    def recover(self) -> None:
        snapshots, last_round = [], None
        read_to: dict[int, int] = {}  # _audit partition -> last offset read
        for m in read_to_end(self.audit_bootstrap, AUDIT_TOPIC, "logbus-audit-recover", client_conf=self.security):
            read_to[m.partition()] = m.offset()
            try:
                event = self.decoder.decode(m.value())
            except Malformed:  # garbage, unknown schema id, ...: counted, never fatal
                self.malformed += 1
                continue
            if event["kind"] != "TIER" or event["tier"] != self.tier:
                continue
            if event["producer_id"] == ROUND:
                if last_round is None or event["emitted_at"] >= last_round["emitted_at"]:
                    last_round = event
            else:
                snapshots.append((event, m.partition(), m.offset()))
        if last_round is None:
            return
        behind = [(p, needed) for p, needed in last_round["sequences"] if read_to.get(p, -1) < needed]
        if behind:  # a restarted broker's high watermark (its checkpoint) hides snapshots the round counted on
            what = (f"_audit[{behind[0][0]}] readable to offset {read_to.get(behind[0][0], -1)}, the last complete "
                    f"round needs {behind[0][1]}")
            if self._behind_since is None:
                self._behind_since = time.monotonic()
            if time.monotonic() - self._behind_since < self.recovery_wait_s:
                raise IncompleteRound(what)
            log.error("tier %s: %s for %.0f s (the cluster lost what it had acknowledged?): counting on from what "
                      "is readable; the report will show this tier short where counts were lost",
                      self.tier, what, time.monotonic() - self._behind_since)
        self._behind_since = None
        for e, partition, offset in sorted(snapshots, key=lambda s: s[0]["emitted_at"]):
            if e["emitted_at"] <= last_round["emitted_at"]:
                self.counts[(e["topic"], e["window_start"], e["producer_id"])] = {
                    "count": e["count"], "seqs": RangeSet(e["sequences"]), "end": e["window_end"], "host": e["host"]}
                self.stored[partition] = max(self.stored.get(partition, -1), offset)
        topics = last_round["host"].split(",") if last_round["host"] else []
        for r in last_round["source"]:  # a round marker: host lists the topics, first = topic index, last = offset
            self.positions[(topics[r["first"]], r["partition"])] = r["last"] + 1
        log.info("tier %s: recovered %d count(s) and %d position(s)", self.tier, len(self.counts),
                 len(self.positions))

    # ---- counting -------------------------------------------------------------------------------------------------
    def run(self, stop=lambda: False) -> None:
        """Count until ``stop()``; after any failure, start again from the last complete round."""
        backoff = Backoff(1.0, 30.0)
        log.info("tier %s: reading %s", self.tier, "whole record batches" if self.batches else "librdkafka's records")
        while not stop():
            try:
                self._reset()
                self.recover()
                self._count_until(stop, backoff)
                return
            except Exception as exc:
                delay = backoff.next()
                log.warning("tier %s: %s: %s; starting again from the last complete round in %.1f s", self.tier,
                            type(exc).__name__, exc, delay)
                self.restarts += 1
                self._wait(delay, stop, probe=_unreachable(exc))

    def _wait(self, delay: float, stop, probe: bool) -> None:
        """The backoff's pause; after a failure to reach the cluster, cut short once it answers again (asked
        every 2 s), so that a counter whose backoff grew during an outage counts again within seconds of its end."""
        now = time.monotonic()
        deadline, probe_at = now + delay, now + 1.0
        while not stop() and time.monotonic() < deadline:
            time.sleep(0.1)
            if probe and time.monotonic() >= probe_at:
                probe_at = time.monotonic() + 2.0
                if self._reachable():
                    log.info("tier %s: the cluster answers again; starting again now", self.tier)
                    return

    def _reachable(self) -> bool:
        try:
            return bool(self.producer.list_topics(timeout=1.0).brokers)
        except Exception:  # noqa: BLE001 (any failure to answer is "not yet")
            return False

    def _reset(self) -> None:
        self.counts.clear()
        self.positions.clear()
        self.dirty.clear()
        self.stored.clear()
        if self.restarts:  # snapshots of a failed round must not arrive after the new ones
            self.producer.purge(in_queue=True, in_flight=False)
            self.producer.flush(0)
            self.producer = self._new_producer()

    def _new_producer(self) -> Producer:
        return Producer({**self.security, "bootstrap.servers": self.audit_bootstrap, "acks": "all",
                         "enable.idempotence": True,
                         "error_cb": lambda err: log.warning("tier %s: audit cluster: %s", self.tier, err)})

    def _count_until(self, stop, backoff: Backoff) -> None:
        consumer = Consumer({**self.consumer_config,  # on the batch path, its metadata only
                             "error_cb": lambda err: log.warning("tier %s: %s", self.tier, err)})
        reader = batch_reader.BatchReader(
            self.consumer_config, self.consumer_config["client.id"],
            lambda t, p: consumer.get_watermark_offsets(TopicPartition(t, p), timeout=10)) if self.batches else None
        assigned: set[tuple[str, int]] = set()
        last_emit = last_refresh = 0.0
        try:
            while not stop():
                if time.monotonic() - last_refresh > 5 or (reader is not None and reader.stale):
                    last_refresh = time.monotonic()
                    metadata = consumer.list_topics(timeout=20)
                    wanted = self._partitions(metadata)
                    if reader is not None:
                        assigned = wanted
                        reader.refresh(metadata, assigned)
                    elif wanted != assigned:
                        assigned = wanted
                        consumer.assign([TopicPartition(t, p, self.positions.get((t, p), OFFSET_BEGINNING))
                                         for t, p in sorted(assigned)])
                if reader is None:
                    batch = consumer.consume(1000, timeout=0.2)
                    for m in batch:
                        if m.error() and m.error().fatal():
                            raise KafkaException(m.error())
                    self._count([m for m in batch if not m.error()])
                elif assigned:
                    for topic, partition, batches, after in reader.read({k: self.positions.get(k, 0)
                                                                         for k in sorted(assigned)}):
                        self._count_batches(topic, partition, batches, after)
                else:
                    time.sleep(0.2)  # nothing to count yet
                if time.monotonic() - last_emit >= self.emit_interval:
                    last_emit = time.monotonic()
                    if self.emit():
                        backoff.reset()
        finally:
            if reader is not None:
                reader.close()
            consumer.close()

    def _partitions(self, metadata) -> set[tuple[str, int]]:
        return {(t, p) for t, md in metadata.topics.items() if not t.startswith("_") and self.whitelist.fullmatch(t)
                for p in md.partitions}

    def _count_batches(self, topic: str, partition: int, batches: list, after: int) -> None:
        """Count the committed data batches of one partition read up to ``after`` (:mod:`audit.bulk`: the rule
        of :meth:`_count`, without a Python object per record); records before the partition's position (inside
        the first batch) were counted already."""
        counts = self.counts
        position = self.positions.get((topic, partition), 0)
        for start, producer, host, count, seq_runs in bulk.audit_groups(batches, self.window_ms, position):
            key = (topic, start, producer)
            entry = counts.get(key)
            if entry is None:
                counts[key] = entry = {"count": 0, "seqs": RangeSet(), "end": start + self.window_ms, "host": host}
            entry["count"] += count
            entry["seqs"].update(seq_runs)
            self.counted[topic] = self.counted.get(topic, 0) + count
            self.dirty.add(key)
        self.positions[(topic, partition)] = after

    def _count(self, messages) -> None:
        """Count a batch of messages: each message's headers are read in one loop, then each (topic, window,
        producer) of the batch takes its count and its sequence numbers' runs at once (a producer's sequences
        arrive spread over partitions, so a count's set is fragmented and one merge per batch beats one insert
        per message). The last header of a name wins; a message without the three audit headers, or with a
        sequence or time that is not an integer (within int64, a time with its window's start and end) or a
        producer id that is not UTF-8, is not audited."""
        positions, counted, counts = self.positions, self.counted, self.counts
        groups: dict[tuple[str, int, str], list] = {}
        window_ms = self.window_ms
        for m in messages:
            topic = m.topic()
            positions[(topic, m.partition())] = m.offset() + 1
            producer = seq = generated = None
            host = b""
            for name, value in m.headers() or ():
                if name == PRODUCER_HEADER:
                    producer = value
                elif name == SEQUENCE_HEADER:
                    seq = value
                elif name == TIME_HEADER:
                    generated = value
                elif name == HOST_HEADER:
                    host = value
            if producer is None or seq is None or generated is None:
                continue
            try:
                seq, generated, producer = int(seq), int(generated), producer.decode()
            except ValueError:  # UnicodeDecodeError included
                continue
            if not (LONG_MIN <= seq <= LONG_MAX and LONG_MIN + window_ms <= generated <= LONG_MAX - window_ms):
                continue  # beyond the snapshots' Avro longs (a window's start and end included): not audited
            key = (topic, generated - generated % window_ms, producer)
            group = groups.get(key)
            if group is None:
                groups[key] = group = [host, []]
            group[1].append(seq)
        for key, (host, seqs) in groups.items():
            entry = counts.get(key)
            if entry is None:
                counts[key] = entry = {"count": 0, "seqs": RangeSet(), "end": key[1] + window_ms,
                                       "host": (host or b"").decode(errors="replace")}
            entry["count"] += len(seqs)
            entry["seqs"].update(runs(seqs))
            counted[key[0]] = counted.get(key[0], 0) + len(seqs)
            self.dirty.add(key)

    def emit(self) -> bool:
        """Publish the changed counts, then the round marker; raises unless the audit cluster took them all
        (the round then stays unfinished and the caller starts again from the last complete one)."""
        if not self.dirty:
            return False
        now = int(time.time() * 1000)
        failed: list = []
        for topic, start, producer_id in sorted(self.dirty):
            e = self.counts[(topic, start, producer_id)]
            seqs = e["seqs"].as_list()
            self._send({"kind": "TIER", "tier": self.tier, "producer_id": producer_id, "host": e["host"],
                        "topic": topic, "window_start": start, "window_end": e["end"], "count": e["count"],
                        "first_seq": seqs[0][0], "last_seq": seqs[-1][1], "bytes": 0, "sequences": seqs,
                        "source": [], "emitted_at": now}, failed)
        self._flush(failed, "snapshots")  # the marker only after every snapshot of its round is stored
        topics = sorted({t for t, _ in self.positions})
        self._send({"kind": "TIER", "tier": self.tier, "producer_id": ROUND, "host": ",".join(topics), "topic": "",
                    "window_start": 0, "window_end": 0, "count": len(self.dirty), "first_seq": 0, "last_seq": 0,
                    "bytes": 0, "sequences": [[p, o] for p, o in sorted(self.stored.items())], "emitted_at": now,
                    "source": [{"partition": p, "first": topics.index(t), "last": o - 1}
                               for (t, p), o in sorted(self.positions.items())]}, failed)
        self._flush(failed, "round marker")
        self.dirty.clear()
        self.rounds += 1
        return True

    def _flush(self, failed: list, what: str) -> None:
        if self.producer.flush(30) > 0:
            raise RuntimeError(f"{what} not acknowledged by the audit cluster within 30 s")
        if failed:
            raise RuntimeError(f"{what} refused: {failed[0]}")

    def _send(self, event: dict, failed: list) -> None:
        self.producer.produce(AUDIT_TOPIC, self.serializer(event, SerializationContext(AUDIT_TOPIC,
                                                                                       MessageField.VALUE)),
                              on_delivery=lambda err, msg: failed.append(err) if err else self._stored(msg))

    def _stored(self, msg) -> None:
        self.stored[msg.partition()] = max(self.stored.get(msg.partition(), -1), msg.offset())
