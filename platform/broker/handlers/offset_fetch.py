"""OffsetFetch (key 9), v1–7: a group's committed offsets (-1 where none); null topics (v2+) means all. With
``require_stable`` (v7) a partition whose offsets an open transaction is committing answers
UNSTABLE_OFFSET_COMMIT (the client retries until the transaction ends)."""

from broker.handlers.registry import handles
from broker.protocol.messages import ErrorCode, build, nested, response_class
from broker.security import access

KEY = 9


@handles(KEY, "OffsetFetch", 1, 7)
async def handle(broker, header, request):
    cls = response_class(KEY, header.api_version)
    topic_cls = nested(cls, "OffsetFetchResponseTopic")
    partition_cls = nested(cls, "OffsetFetchResponsePartition")
    wanted = None
    if request.topics is not None:
        wanted = [(t.name, p) for t in request.topics for p in t.partition_indexes]
    stable = getattr(request, "require_stable", False)
    unstable = set()
    if not access.allowed(broker, "Describe", access.GROUP, request.group_id):
        error, committed = ErrorCode.group_authorization_failed, {}
    else:
        # pending offsets are read before the committed ones: a transaction that completes in between has its
        # offsets either seen pending or applied, never neither (stale offsets would make a reader repeat records)
        if stable:
            unstable = await broker.txn.offsets.unstable(request.group_id, wanted)
        error, committed = await broker.groups.fetch_offsets(request.group_id, wanted)
        if stable and broker.txn.offsets.completing(request.group_id):
            unstable |= set(committed) | set(wanted or ())
    hidden = set()  # topics the principal may not Describe: refused when named, left out of "all"
    if access.enabled(broker):
        hidden = {t for t in {t for t, _ in (wanted or committed)}
                  if not access.allowed(broker, "Describe", access.TOPIC, t, quiet=wanted is None)}
        committed = {k: v for k, v in committed.items() if k[0] not in hidden}
    if error != ErrorCode.none:
        unstable = set()
    by_topic: dict[str, list] = {}
    for (topic, p), (offset, meta) in sorted(committed.items()):
        waiting = (topic, p) in unstable  # offsets of an open transaction: the client retries (KIP-447)
        by_topic.setdefault(topic, []).append(build(
            partition_cls, partition_index=p, committed_offset=-1 if waiting else offset, committed_leader_epoch=-1,
            metadata=meta, error_code=ErrorCode.unstable_offset_commit if waiting else error))
    if wanted is not None and error.value:  # per-partition errors for versions without a top-level code
        for topic, p in wanted:
            by_topic.setdefault(topic, []).append(build(partition_cls, partition_index=p, committed_offset=-1,
                                                        committed_leader_epoch=-1, metadata="", error_code=error))
    if wanted is not None and not error.value:
        for topic, p in wanted:
            if topic in hidden:
                by_topic.setdefault(topic, []).append(build(
                    partition_cls, partition_index=p, committed_offset=-1, committed_leader_epoch=-1, metadata="",
                    error_code=ErrorCode.topic_authorization_failed))
    topics = tuple(build(topic_cls, name=t, partitions=tuple(ps)) for t, ps in by_topic.items())
    return build(cls, throttle_time=0, topics=topics, error_code=error)
