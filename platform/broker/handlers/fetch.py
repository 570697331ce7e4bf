"""Fetch (key 1), v4–12: file regions of the partition logs, long-polled until ``min_bytes`` or ``max_wait``.

The response is framed by hand (:mod:`broker.protocol.fetch_response`) so that record bytes go from the
segment file to the socket with sendfile. KIP-74: at least one whole batch is returned even when it is larger
than the byte budget; a region may end inside a batch, which clients drop and fetch again.

Transactions: ``read_committed`` consumers (isolation level 1) read up to the last stable offset and get the
aborted transactions overlapping what they read (producer id, first offset), so they drop those records; every
partition reports its last stable offset.

Fetch sessions (KIP-227, :mod:`broker.fetch_sessions`): a v7+ request may open one or continue one; an incremental
request reads every partition of its session and answers only those with news.

Client quotas (``consumer_byte_rate``, :mod:`broker.client_quotas`): a consumer asks for at most its quota's
window; over it, the answer is empty with ``throttle_time_ms`` and the connection is muted that long.

Cluster mode: only the leader serves fetches. Consumers read up to the high watermark; a follower
(``replica_id`` >= 0) reads up to the log end, and the offset it asks for tells the leader how far its copy
goes (which may advance the high watermark and bring it back into the ISR); its ``log_start_offset``, where its
copy starts (the low watermark a DeleteRecords waits for).
"""

import time

from broker.client_quotas.entities import CONSUMER_BYTE_RATE
from broker.client_quotas.manager import requester
from broker.cluster.partition import now_ms
from broker.handlers.registry import RawResponse, handles
from broker.log.log import OffsetOutOfRange
from broker.protocol import fetch_response
from broker.protocol.fetch_response import PartitionData, records_size
from broker.protocol.messages import ErrorCode, ms
from broker.security import access

KEY = 1
READ_COMMITTED = 1


def _quiet(broker, topic: str, p, replica_id: int, now: int | None) -> bool:
    """True for a follower session's partition with nothing to tell (the follower has everything, all of it
    committed, and was told the current offsets; :meth:`Partition.note_quiet_fetch`): its answer would leave it
    out anyway, so only the follower's progress is noted (``now``: on the request's first pass), without the general
    path's reads and answer entry. Anything else takes the general path."""
    part = broker.cluster.partitions.get((topic, p.partition))
    if part is None or broker.logs.is_offline(topic, p.partition):
        return False
    plog = part.log
    if p.sent != (plog.high_watermark, plog.last_stable_offset, plog.log_start_offset):
        return False
    return part.note_quiet_fetch(replica_id, p.fetch_offset, p.current_leader_epoch, now,
                                 getattr(p, "log_start_offset", -1))


def collect(broker, request, first_pass: bool, denied: frozenset = frozenset(), wanted=None,
            incremental: bool = False, max_bytes: int | None = None) -> tuple[list, int, bool]:
    """One pass over the requested partitions: (topics, bytes found, whether any partition has an error).
    ``denied``: topics this connection may not read (TOPIC_AUTHORIZATION_FAILED). ``wanted``: the partitions to
    read as [(topic, [partition, ...])] (a fetch session's), else the request's; ``incremental``: they are an
    incremental session's, whose quiet partitions a follower's answer leaves out (:func:`_quiet`). ``max_bytes``:
    a smaller budget than the request's (a consumer's quota)."""
    budget = request.max_bytes if max_bytes is None else min(request.max_bytes, max_bytes)
    replica_id = getattr(request, "replica_id", -1)
    follower = replica_id >= 0 and broker.cluster is not None
    read_committed = int(getattr(request, "isolation_level", 0)) == READ_COMMITTED and not follower
    total = 0
    errors = False
    topics = []
    quiet = follower and incremental and not denied
    now = now_ms() if quiet and first_pass else None
    for name, requested in wanted if wanted is not None else ((t.topic, t.partitions) for t in request.topics):
        info = broker.topics.get(name)
        partitions = []
        for p in requested:
            if name in denied:
                partitions.append(PartitionData(p.partition, ErrorCode.topic_authorization_failed.value))
                errors = True
                continue
            if info is None or not 0 <= p.partition < info.partitions:
                partitions.append(PartitionData(p.partition, ErrorCode.unknown_topic_or_partition.value))
                errors = True
                continue
            if quiet and _quiet(broker, name, p, replica_id, now):
                continue
            error, plog = broker.leader_log(name, p.partition, getattr(p, "current_leader_epoch", -1))
            if plog is None:
                partitions.append(PartitionData(p.partition, error.value))
                errors = True
                continue
            if follower and first_pass:
                broker.cluster.follower_fetched(broker.cluster.partition(name, p.partition), replica_id,
                                                p.fetch_offset, getattr(p, "log_start_offset", -1))
            lso = plog.last_stable_offset
            data = PartitionData(p.partition, 0, plog.high_watermark, lso, plog.log_start_offset)
            allowed = min(p.partition_max_bytes, budget - total)
            if allowed > 0 or total == 0:
                try:
                    region = plog.read(p.fetch_offset, max(allowed, 1) if total == 0 else allowed,
                                       committed_only=not follower, upper=lso if read_committed else None)
                except OffsetOutOfRange:
                    data.error_code = ErrorCode.offset_out_of_range.value
                    errors = True
                    region = None
                if region is not None:
                    data.records = region
                    total += region.size
                    if read_committed:
                        data.aborted = [(t.producer_id, t.first_offset)
                                        for t in plog.aborted_transactions(p.fetch_offset, lso)]
            partitions.append(data)
        topics.append((name, partitions))
    return topics, total, errors


@handles(KEY, "Fetch", 4, 12)
async def handle(broker, header, request):
    max_wait = ms(request.max_wait) / 1000
    deadline = time.monotonic() + max_wait
    replica = getattr(request, "replica_id", -1) >= 0
    context = broker.fetch_sessions.open(request, privileged=replica and broker.cluster is not None)
    if context.error:
        return RawResponse(fetch_response.encode(header.api_version, header.correlation_id, [],
                                                 error_code=context.error.value))
    wanted = context.topics()
    keys = [(name, p.partition) for name, partitions in wanted for p in partitions]
    denied = frozenset()
    if access.enabled(broker):  # a follower needs ClusterAction (else its offsets would move the HW), a consumer Read
        if replica:
            cluster_ok = access.on_cluster(broker, "ClusterAction")
            denied = frozenset() if cluster_ok else frozenset(name for name, _ in wanted)
        else:
            denied = frozenset(name for name, _ in wanted if not access.allowed(broker, "Read", access.TOPIC, name))
    quotas = broker.client_quotas if broker.client_quotas.enabled and not replica else None
    budget = None
    if quotas is not None:
        session, principal = requester()
        budget = quotas.max_in_window(CONSUMER_BYTE_RATE, principal, header.client_id)
    first_pass = True
    while True:
        topics, total, errors = collect(broker, request, first_pass, denied, wanted,
                                        incremental=context.kind == "incremental", max_bytes=budget)
        first_pass = False
        remaining = deadline - time.monotonic()
        if total >= request.min_bytes or errors or remaining <= 0 or not keys:
            break
        await broker.wait_for_append(keys, remaining)
    if budget is not None:  # consumer_byte_rate: over it, an empty answer and the bytes taken back (as Kafka)
        throttle = quotas.record(CONSUMER_BYTE_RATE, principal, header.client_id, total)
        if throttle:
            quotas.throttle(CONSUMER_BYTE_RATE, throttle, session)
        if throttle and total <= budget:  # a first batch larger than the whole window (KIP-74) is sent, throttled:
            # emptied, it would be refused at every try
            quotas.unrecord(CONSUMER_BYTE_RATE, principal, header.client_id, total)
            return RawResponse(fetch_response.encode(header.api_version, header.correlation_id, [],
                                                     session_id=context.session_id, throttle_ms=throttle))
    for name, partitions in topics:
        sent = sum(records_size(d.records) for d in partitions)
        if sent:
            broker.metrics.fetched(name, sent, replica)
    topics = context.answer(topics)
    return RawResponse(fetch_response.encode(header.api_version, header.correlation_id, topics,
                                             session_id=context.session_id))
