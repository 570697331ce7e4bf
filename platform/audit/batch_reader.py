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
``list_topics``). A leader away or moved marks the metadata stale (the counter reads it again) after a short
wait; a position out of range moves into the log (deleted by retention: its start; past the end after an
unclean election: the end, as ``auto.offset.reset=latest`` would); any other refusal raises, and the counter
starts again from its last complete round.
"""

from __future__ import annotations

import datetime
import logging
import time

from broker.protocol.control import committed_batches
from broker.protocol.messages import ErrorCode
from broker.protocol.record_reader import STORED_BATCH_CAP, records_body
from mirror.wire import Pool, request_module

log = logging.getLogger(__name__)
FETCH, FETCH_VERSION = 1, 12
# consumer settings this reader honours or that do not change what is read (librdkafka's names); any other
# (security, SASL, proxies, ...) keeps the counter on librdkafka
HARMLESS = {"bootstrap.servers", "group.id", "enable.auto.commit", "isolation.level", "client.id", "fetch.min.bytes",
            "fetch.wait.max.ms", "fetch.max.bytes", "max.partition.fetch.bytes", "socket.timeout.ms",
            "enable.partition.eof", "auto.offset.reset", "session.timeout.ms", "security.protocol"}
RETRY = {ErrorCode.not_leader_or_follower, ErrorCode.leader_not_available, ErrorCode.unknown_topic_or_partition,
         ErrorCode.request_timed_out, ErrorCode.fenced_leader_epoch, ErrorCode.unknown_leader_epoch,
         ErrorCode.kafka_storage_error, ErrorCode.network_exception, ErrorCode.replica_not_available,
         ErrorCode.offset_not_available}
Key = tuple[str, int]
PARTITION_BYTES = 8 << 20  # a partition's share of a Fetch answer unless max.partition.fetch.bytes says otherwise


class ReadRefused(RuntimeError):
    """A fetch refused for a reason that retrying in place cannot mend."""


def supports(conf: dict) -> bool:
    """Whether this reader reaches the cluster as librdkafka would with ``conf``: PLAINTEXT, read_committed and
    no setting it would ignore."""
    if str(conf.get("security.protocol", "plaintext")).lower() != "plaintext":
        return False
    if str(conf.get("isolation.level", "read_committed")) != "read_committed":
        return False
    return all(k in HARMLESS for k in conf)


class BatchReader:
    def __init__(self, conf: dict, client_id: str):
        self.pool = Pool(client_id)
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
        after = {**positions, **{(t, p): moved for t, p, _, moved in out}}
        self.inflight = (after, self._send(after))
        return out

    def _send(self, positions: dict[Key, int]) -> list[int]:
        """One Fetch to each leader of ``positions``; the leaders asked."""
        cls, module = request_module(FETCH, FETCH_VERSION)
        by_leader: dict[int, dict[str, list]] = {}
        for (topic, partition), position in positions.items():
            leader = self.leaders.get((topic, partition), -1)
            if leader < 0:
                continue
            by_leader.setdefault(leader, {}).setdefault(topic, []).append(module.FetchPartition(
                partition=partition, current_leader_epoch=-1, fetch_offset=position, last_fetched_epoch=-1,
                log_start_offset=-1, partition_max_bytes=self.partition_bytes))
        if any(self.leaders.get(k, -1) < 0 for k in positions):
            self._trouble(None, "a partition without a leader")
        sent = []
        for leader, topics in by_leader.items():
            request = cls(replica_id=-1, max_wait=datetime.timedelta(milliseconds=self.wait_ms),
                          min_bytes=self.min_bytes, max_bytes=self.max_bytes, isolation_level=1, session_id=0,
                          session_epoch=-1, forgotten_topics_data=(), rack_id="",
                          topics=tuple(module.FetchTopic(topic=t, partitions=tuple(ps)) for t, ps in topics.items()))
            try:
                self.pool.get(leader).send(FETCH, FETCH_VERSION, request)
                sent.append(leader)
            except (OSError, ConnectionError) as exc:
                self._trouble(leader, exc)
        return sent

    def _receive(self, sent: list[int], positions: dict[Key, int]) -> list[tuple[str, int, list, int]]:
        out = []
        for leader in sent:
            conn = self.pool.connections.get(leader)
            if conn is None or not conn.pending:
                continue  # dropped meanwhile
            try:
                response = conn.receive()
            except (OSError, ConnectionError) as exc:
                self._trouble(leader, exc)
                continue
            for topic in response.responses:
                for p in topic.partitions:
                    key = (topic.topic, p.partition_index)
                    if key in positions:
                        got = self._partition(key, positions[key], p)
                        if got is not None:
                            out.append(got)
        return out

    def _partition(self, key: Key, position: int, p) -> tuple[str, int, list, int] | None:
        error = ErrorCode(p.error_code)
        if error == ErrorCode.offset_out_of_range:
            moved = p.log_start_offset if position < max(p.log_start_offset, 0) else p.high_watermark
            log.warning("%s[%d]: offset %d out of range (log %d..%d); counting on from %d", key[0], key[1], position,
                        p.log_start_offset, p.high_watermark, moved)
            return key[0], key[1], [], moved
        if error in RETRY:
            self._trouble(None, f"{key[0]}[{key[1]}]: {error.name}")
            return None
        if error != ErrorCode.none:
            raise ReadRefused(f"fetch of {key[0]}[{key[1]}] refused: {error.name}")
        batches, after = committed_batches(p.records or b"", position,
                                           [(a.producer_id, a.first_offset) for a in p.aborted_transactions or ()])
        if after == position:
            return None
        return key[0], key[1], [(h, records_body(b, h, STORED_BATCH_CAP)) for h, b in batches], after

    def _trouble(self, leader: int | None, reason) -> None:
        log.info("audit reader: %s; reading the metadata again", reason)
        if leader is not None:
            self.pool.drop(leader)
        self.stale = True
        time.sleep(0.2)

    def close(self) -> None:
        self.pool.close()
