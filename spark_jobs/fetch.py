"""Whole record batches of one partition range, fetched with a minimal blocking Kafka client (no librdkafka).

The load's source reads [from, until) of a partition; librdkafka hands every record over as a Python object,
which is most of the load's cost. Here the Fetch responses (v12, ``read_committed``) are kept as batches:
:func:`committed_batches` yields ``(header, records section)`` of each batch to load — decompressed, control
batches and aborted transactions dropped — and :mod:`spark_jobs.columnar` parses the records in bulk.

Semantics are those of the librdkafka path (:func:`spark_jobs.source.read_range`):

- ``read_committed``: reads stop at the last stable offset; a transactional batch of a producer whose aborted
  transaction covers it (the Fetch response's aborted transactions, closed by that producer's abort marker) is
  dropped, like Kafka's consumer does;
- exact ranges: records before ``start`` (the head of the first batch) and from ``until`` on are the caller's
  to drop (:mod:`columnar` filters by offset); batches cut off at the end of a response are fetched again;
- a range that cannot be read completely fails: OFFSET_OUT_OF_RANGE (deleted by retention), a log that ends
  before ``until``, or 60 s without progress (a broker that stays away, a transaction left open).

Only PLAINTEXT: :func:`supports` tells the source to use librdkafka for SSL and SASL (and any other client
setting this client would ignore). Runs on the executors; ``broker.protocol`` and ``mirror`` reach them in
the zip of :mod:`spark_jobs.packaging`.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mirror.wire import Connection

FETCH, METADATA = (1, 12), (3, 9)
IDLE_LIMIT_S = 60.0
PARTITION_MAX_BYTES = 8 << 20
# client settings that do not change what is read or how it is reached (librdkafka's names)
HARMLESS = {"bootstrap.servers", "group.id", "enable.auto.commit", "enable.partition.eof", "isolation.level",
            "security.protocol", "client.id", "fetch.max.bytes", "socket.timeout.ms"}
RETRIABLE = {"not_leader_or_follower", "leader_not_available", "unknown_topic_or_partition", "fenced_leader_epoch",
             "unknown_leader_epoch", "replica_not_available", "not_coordinator", "kafka_storage_error",
             "request_timed_out", "network_exception", "offset_not_available", "unknown_server_error"}


class FetchError(RuntimeError):
    """The range cannot be read completely (the task fails; Spark retries it)."""


def supports(conf: dict) -> bool:
    """Whether this client reaches the cluster as librdkafka would with ``conf``: PLAINTEXT and nothing else
    that would change the connection (SSL, SASL, proxies, ...)."""
    if str(conf.get("security.protocol", "plaintext")).lower() != "plaintext":
        return False
    return all(k in HARMLESS for k in conf)


def _request(api: tuple[int, int], **fields):
    from broker.protocol import codec
    from broker.protocol.messages import build

    return build(codec.request_type(*api), **fields)


def _nested(api: tuple[int, int], entity: str, **fields):
    import sys

    from broker.protocol import codec
    from broker.protocol.messages import build

    return build(getattr(sys.modules[codec.request_type(*api).__module__], entity), **fields)


def _split(address: str) -> tuple[str, int]:
    host, _, port = address.strip().rpartition(":")
    return host.strip("[]"), int(port)


class PartitionFetcher:
    """Fetches one partition from its leader, found through the bootstrap servers' metadata."""

    def __init__(self, conf: dict, topic: str, partition: int):
        self.bootstrap = [_split(a) for a in str(conf["bootstrap.servers"]).split(",") if a.strip()]
        self.client_id = str(conf.get("client.id", "logbus-load"))
        self.topic, self.partition = topic, partition
        self.max_bytes = int(conf.get("fetch.max.bytes", 52428800))
        self.conn: Connection | None = None

    def _leader(self) -> tuple[str, int]:
        last: Exception | None = None
        for host, port in self.bootstrap:
            try:
                from mirror.wire import Connection  # the mirror's blocking client (in the pyFiles zip)

                conn = Connection(host, port, self.client_id)
            except OSError as exc:
                last = exc
                continue
            try:
                md = conn.call(*METADATA, _request(METADATA, topics=(_nested(METADATA, "MetadataRequestTopic",
                                                                             name=self.topic),),
                                                  allow_auto_topic_creation=False,
                                                  include_cluster_authorized_operations=False,
                                                  include_topic_authorized_operations=False))
            except (OSError, ConnectionError) as exc:
                last = exc
                continue
            finally:
                conn.close()
            brokers = {b.node_id: (b.host, b.port) for b in md.brokers}
            for t in md.topics:
                if t.name != self.topic:
                    continue
                for p in t.partitions:
                    if p.partition_index == self.partition and p.leader_id in brokers:
                        return brokers[p.leader_id]
            last = ConnectionError(f"{self.topic}[{self.partition}]: no leader in the metadata")
        raise ConnectionError(f"{self.topic}[{self.partition}]: cannot find the leader: {last}")

    def fetch(self, offset: int):
        """One Fetch of this partition from ``offset``: the response's PartitionData."""
        if self.conn is None:
            from mirror.wire import Connection

            self.conn = Connection(*self._leader(), self.client_id)
        partition = _nested(FETCH, "FetchPartition", partition=self.partition, current_leader_epoch=-1,
                            fetch_offset=offset, last_fetched_epoch=-1, log_start_offset=-1,
                            partition_max_bytes=min(PARTITION_MAX_BYTES, self.max_bytes))
        request = _request(FETCH, replica_id=-1, max_wait=500, min_bytes=1, max_bytes=self.max_bytes,
                           isolation_level=1, session_id=0, session_epoch=-1,
                           topics=(_nested(FETCH, "FetchTopic", topic=self.topic, partitions=(partition,)),),
                           forgotten_topics_data=(), rack_id="")
        try:
            response = self.conn.call(*FETCH, request)
        except BaseException:
            self.close()
            raise
        for t in response.responses:
            for p in t.partitions:
                if p.partition_index == self.partition:
                    return p
        raise ConnectionError("the Fetch response does not hold the partition")

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None


def committed_batches(conf: dict, topic: str, partition: int, start: int, until: int):
    """Yield ``(BatchHeader, records section bytes)`` of the committed data batches that hold the offsets of
    [start, until), in offset order (the first may begin before ``start``, the last end after ``until``): each
    answer as :func:`broker.protocol.control.committed_batches` keeps it (markers and aborted transactions
    dropped, as a read_committed consumer drops them)."""
    from broker.protocol import control, record_reader

    fetcher = PartitionFetcher(conf, topic, partition)
    position, progress_at = start, time.monotonic()
    try:
        while position < until:
            if time.monotonic() - progress_at > IDLE_LIMIT_S:
                raise FetchError(f"{topic}[{partition}]: no data for {IDLE_LIMIT_S:.0f} s at offset {position} "
                                 f"(until {until})")
            try:
                p = fetcher.fetch(position)
            except (OSError, ConnectionError) as exc:
                fetcher.close()
                time.sleep(0.2)
                if time.monotonic() - progress_at > IDLE_LIMIT_S:
                    raise FetchError(f"{topic}[{partition}]: {exc}") from exc
                continue
            error = getattr(p.error_code, "name", str(p.error_code))
            if error == "offset_out_of_range":
                raise FetchError(f"{topic}[{partition}]: offset {position} is out of range (log start "
                                 f"{p.log_start_offset}, end {p.high_watermark}): records were deleted")
            if error != "none":
                if error in RETRIABLE:
                    fetcher.close()
                    time.sleep(0.2)
                    continue
                raise FetchError(f"{topic}[{partition}]: {error}")
            data = p.records or b""
            batches, after = control.committed_batches(
                data, position, [(a.producer_id, a.first_offset) for a in p.aborted_transactions or ()])
            for header, batch in batches:
                if header.base_offset >= until:
                    break
                yield header, record_reader.records_body(batch, header, record_reader.STORED_BATCH_CAP)
            if after > position:
                position, progress_at = after, time.monotonic()
                continue
            end = p.last_stable_offset if p.last_stable_offset >= 0 else p.high_watermark
            if position >= p.high_watermark and not data:
                raise FetchError(f"{topic}[{partition}]: log ends at {p.high_watermark} before {until}")
            if position >= end and not data:
                time.sleep(0.1)  # an open transaction holds the last stable offset back
    finally:
        fetcher.close()


def records(conf: dict, topic: str, partition: int, start: int, until: int, chunk_records: int = 65536,
            chunk_bytes: int = 16 << 20, names: tuple[str, ...] = ()):
    """Yield :class:`~spark_jobs.columnar.Records` of exactly the committed records of [start, until), a few
    batches at a time (about ``chunk_records`` records or ``chunk_bytes`` bytes per chunk); ``names``: headers
    to locate in bulk (:func:`spark_jobs.columnar.parse`)."""
    from spark_jobs import columnar

    group, count, size = [], 0, 0
    for header, body in committed_batches(conf, topic, partition, start, until):
        group.append((header, body))
        count += header.record_count
        size += len(body)
        if count >= chunk_records or size >= chunk_bytes:
            yield columnar.in_range(columnar.parse(group, names), start, until)
            group, count, size = [], 0, 0
    if group:
        yield columnar.in_range(columnar.parse(group, names), start, until)
