"""The audit counter's whole-batch reader: the counted partitions fetched over the counter's own connections,
``read_committed``, kept as record batches (the default for PLAINTEXT clusters; secured clusters keep
librdkafka's consumer, as the mirror does).

librdkafka hands the counter every record as a Python object, and the counter only needs four headers of each:
here one Fetch (v12, ``isolation_level`` 1) goes to each leader of the counted partitions, with the consumer
settings' ``fetch.min.bytes``, ``fetch.wait.max.ms``, ``fetch.max.bytes`` and ``max.partition.fetch.bytes``
(librdkafka's defaults otherwise, but 8 MiB a partition instead of 1), and the next one is sent as soon as an
answer is in, so the broker gathers it while the counter counts and publishes (librdkafka fetches in the
background; a reader that only fetched between rounds would carry at most one partition fetch a round). Each
partition's answer becomes its committed data batches (:func:`broker.protocol.control.committed_batches`:
markers and aborted transactions dropped), decompressed, for :mod:`audit.bulk`. Leaders and broker addresses come from the metadata the counter already reads (librdkafka's
``list_topics``). A leader away or moved marks the metadata stale (the counter reads it again); a read in which
anything failed pauses once (``TROUBLE_PAUSE_S``) and sends nothing ahead. A position out of range moves where
``auto.offset.reset`` says, or else into the log (deleted by retention: its start; past the end after an unclean
election: the end), with the caller's ListOffsets when the answer does not carry the watermarks. A partition
refused for another reason (an ACL, a code the codec does not know) is logged once a minute and stays where it is
while the others are read on, as librdkafka's fetcher does.
"""

from __future__ import annotations

import logging
import time

from broker.protocol.control import committed_batches
from broker.protocol.messages import ErrorCode
from broker.protocol.record_reader import STORED_BATCH_CAP, records_body
from mirror.wire import FETCH, FETCH_VERSION, Pool, read_committed_fetches, receive_each

log = logging.getLogger(__name__)
# consumer settings this reader honours or that do not change what is read (librdkafka's names); any other
# (security, SASL, proxies, ...) keeps the counter on librdkafka
HARMLESS = {"bootstrap.servers", "group.id", "enable.auto.commit", "isolation.level", "client.id", "fetch.min.bytes",
            "fetch.wait.max.ms", "fetch.max.bytes", "max.partition.fetch.bytes", "enable.partition.eof",
            "auto.offset.reset", "session.timeout.ms", "security.protocol"}
EARLIEST, LATEST = {"earliest", "smallest", "beginning"}, {"latest", "largest", "end"}
TROUBLE_PAUSE_S = 0.2  # after a read in which a broker or partition failed (once per read, not per partition)
WARN_EVERY_S = 60.0
RETRY = {ErrorCode.not_leader_or_follower, ErrorCode.leader_not_available, ErrorCode.unknown_topic_or_partition,
         ErrorCode.request_timed_out, ErrorCode.fenced_leader_epoch, ErrorCode.unknown_leader_epoch,
         ErrorCode.kafka_storage_error, ErrorCode.network_exception, ErrorCode.replica_not_available,
         ErrorCode.offset_not_available}
Key = tuple[str, int]
PARTITION_BYTES = 8 << 20  # a partition's share of a Fetch answer unless max.partition.fetch.bytes says otherwise


def supports(conf: dict) -> bool:
    """Whether this reader reaches the cluster as librdkafka would with ``conf``: PLAINTEXT, read_committed and
    no setting it would ignore."""
    if str(conf.get("security.protocol", "plaintext")).lower() != "plaintext":
        return False
    if str(conf.get("isolation.level", "read_committed")) != "read_committed":
        return False
    return all(k in HARMLESS for k in conf)


class BatchReader:
    def __init__(self, conf: dict, client_id: str, watermarks=None):
        """``watermarks(topic, partition) -> (low, high)``: ListOffsets of a partition (the caller's librdkafka
        consumer), asked when an out-of-range answer does not carry them (Kafka sends -1 there)."""
        self.pool = Pool(client_id)
        self.watermarks = watermarks
        self.reset = str(conf.get("auto.offset.reset", "")).lower()
        self.troubled = False  # something failed in this read: pause once before returning
        self.warned: dict[Key, float] = {}
        self.leaders: dict[Key, int] = {}
        self.stale = True  # the metadata must be read (again) before the next fetch
        self.min_bytes = int(conf.get("fetch.min.bytes", 1))
        self.wait_ms = int(conf.get("fetch.wait.max.ms", 500))
        self.max_bytes = int(conf.get("fetch.max.bytes", 52428800))
        # librdkafka's 1 MiB a partition is enough for a consumer that fetches in the background; this reader
        # fetches between its caller's rounds, so a partition's answer must hold what arrives meanwhile
        self.partition_bytes = int(conf.get("max.partition.fetch.bytes", PARTITION_BYTES))
        self.inflight: tuple[dict[Key, int], list[int]] | None = None  # (positions asked, leaders) sent ahead

    def refresh(self, metadata, partitions) -> None:
        """Leaders of ``partitions`` and broker addresses from librdkafka's ``ClusterMetadata``."""
        self.pool.addresses = {b.id: (b.host, b.port) for b in metadata.brokers.values()}
        self.leaders = {}
        for topic, partition in partitions:
            t = metadata.topics.get(topic)
            p = t.partitions.get(partition) if t is not None else None
            self.leaders[(topic, partition)] = p.leader if p is not None else -1
        self.stale = False

    def read(self, positions: dict[Key, int]) -> list[tuple[str, int, list, int]]:
        """The answers to a Fetch to each leader of ``positions``: ``[(topic, partition, [(BatchHeader, records
        section)], next position)]`` of the partitions that answered with records (the batches may be none: only
        markers or aborted records). Positions out of range come back moved, without batches. Before returning,
        the next Fetch is already sent from the positions the answers lead to, so the broker gathers the next
        answer while the caller counts and publishes its round; it is used if the caller then asks from those
        positions (it does unless its partitions changed), and dropped otherwise."""
        if self.inflight and self.inflight[0] == positions:
            sent = self.inflight[1]
        else:
            for leader in self.inflight[1] if self.inflight else ():
                self.pool.drop(leader)  # asked for other partitions or positions: its answer is not wanted
            sent = self._send(positions)
        self.inflight = None
        out = self._receive(sent, positions)
        if self.troubled:  # a broker or partition failed: the next fetch after a pause (the metadata read again)
            self.troubled = False
            time.sleep(TROUBLE_PAUSE_S)
            return out
        after = {**positions, **{(t, p): moved for t, p, _, moved in out}}
        self.inflight = (after, self._send(after))
        return out

    def _send(self, positions: dict[Key, int]) -> list[int]:
        """One Fetch to each leader of ``positions``; the leaders asked."""
        if any(self.leaders.get(k, -1) < 0 for k in positions):
            self._trouble(None, "a partition without a leader")
        sent = []
        for leader, (request, _) in read_committed_fetches(
                positions, self.leaders, partition_bytes=self.partition_bytes, wait_ms=self.wait_ms,
                min_bytes=self.min_bytes, max_bytes=self.max_bytes).items():
            try:
                self.pool.get(leader).send(FETCH, FETCH_VERSION, request)
                sent.append(leader)
            except (OSError, ConnectionError) as exc:
                self._trouble(leader, exc)
        return sent

    def _receive(self, sent: list[int], positions: dict[Key, int]) -> list[tuple[str, int, list, int]]:
        out = []
        for _, response in receive_each(self.pool, sent, self._trouble):
            for topic in response.responses:
                for p in topic.partitions:
                    key = (topic.topic, p.partition_index)
                    if key in positions:
                        got = self._partition(key, positions[key], p)
                        if got is not None:
                            out.append(got)
        return out

    def _partition(self, key: Key, position: int, p) -> tuple[str, int, list, int] | None:
        try:
            error = ErrorCode(p.error_code)
        except ValueError:  # a code this codec does not know
            error = None
        if error == ErrorCode.offset_out_of_range:
            return self._out_of_range(key, position, p)
        if error in RETRY:
            self._trouble(None, f"{key[0]}[{key[1]}]: {error.name}")
            return None
        if error != ErrorCode.none:  # this partition stays where it is (as librdkafka's fetcher does), the rest go on
            self._warn(key, f"fetch refused: {error.name if error is not None else p.error_code}")
            self.troubled = True
            return None
        data = p.records or b""
        batches, after = committed_batches(data, position,
                                           [(a.producer_id, a.first_offset) for a in p.aborted_transactions or ()])
        if after == position:
            if len(data) >= self.partition_bytes:  # a batch larger than the share asked: it can never come whole
                self._warn(key, f"the answer holds no whole batch at offset {position} in {len(data)} bytes "
                                f"(max.partition.fetch.bytes {self.partition_bytes})")
                self.troubled = True
            return None
        return key[0], key[1], [(h, records_body(b, h, STORED_BATCH_CAP)) for h, b in batches], after

    def _out_of_range(self, key: Key, position: int, p) -> tuple[str, int, list, int] | None:
        """The position to count on from: ``auto.offset.reset`` if set, else the log's start when the position
        was deleted (retention) and its end when it lies past it (an unclean election truncated the log)."""
        low, high = p.log_start_offset, p.high_watermark
        if (low < 0 or high < 0) and self.watermarks is not None:
            try:
                low, high = self.watermarks(*key)
            except Exception as exc:  # noqa: BLE001 - a broker away: asked again next round
                self._trouble(None, f"{key[0]}[{key[1]}]: out of range, watermarks unknown: {exc}")
                return None
        if low < 0 or high < 0:
            self._trouble(None, f"{key[0]}[{key[1]}]: out of range, watermarks unknown")
            return None
        if self.reset in EARLIEST:
            moved = low
        elif self.reset in LATEST:
            moved = high
        else:
            moved = low if position < low else high
        log.warning("%s[%d]: offset %d out of range (log %d..%d); counting on from %d", key[0], key[1], position,
                    low, high, moved)
        return key[0], key[1], [], moved

    def _trouble(self, leader: int | None, reason) -> None:
        log.info("audit reader: %s; reading the metadata again", reason)
        if leader is not None:
            self.pool.drop(leader)
        self.stale = True
        self.troubled = True

    def _warn(self, key: Key, what: str) -> None:
        now = time.monotonic()
        if now - self.warned.get(key, -WARN_EVERY_S) >= WARN_EVERY_S:
            self.warned[key] = now
            log.warning("%s[%d]: %s; the other partitions are counted on", key[0], key[1], what)

    def close(self) -> None:
        self.pool.close()
