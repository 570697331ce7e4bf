"""DescribeLogDirs (key 35), v1–4: this broker's log directories and the partitions in each, with their size on
disk (``kafka-log-dirs.sh --describe``, kafka-python's ``describe_log_dirs``). ``topics`` null asks for every
partition; v4 adds each directory's total and usable bytes (statvfs). A partition whose log could not be loaded is
left out (its directory answers as usual: a directory is offline in Kafka only when its disk failed, which logbus
handles per partition). A replica being moved to another directory (AlterReplicaLogDirs) is listed there too, with
``is_future_key`` true, the bytes copied so far and its ``offset_lag`` (:meth:`Move.offset_lag`); current replicas'
``offset_lag`` is 0. Describe on the Cluster is needed when ACLs are on (CLUSTER_AUTHORIZATION_FAILED, from v3 at
the top; before, no results)."""

import os

from broker.handlers.registry import handles
from broker.protocol.messages import ErrorCode, build, nested, response_class
from broker.security import access

KEY = 35


def _space(log_dir: str) -> tuple[int, int]:
    try:
        st = os.statvfs(log_dir)
    except OSError:
        return -1, -1
    return st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize


@handles(KEY, "DescribeLogDirs", 1, 4)
async def handle(broker, header, request):
    version = header.api_version
    cls = response_class(KEY, version)
    result_cls = nested(cls, "DescribeLogDirsResult")
    topic_cls = nested(cls, "DescribeLogDirsTopic")
    partition_cls = nested(cls, "DescribeLogDirsPartition")
    top = {"error_code": ErrorCode.none} if version >= 3 else {}
    if not access.allowed(broker, "Describe", access.CLUSTER):
        if version >= 3:
            top["error_code"] = ErrorCode.cluster_authorization_failed
        return build(cls, throttle_time=0, results=(), **top)
    wanted = None if request.topics is None else {t.topic: set(t.partitions) for t in request.topics}
    by_dir: dict[str, dict[str, list]] = {d: {} for d in broker.log_dirs}
    for (topic, partition), plog in sorted(broker.logs.logs.items()):
        if wanted is not None and partition not in wanted.get(topic, ()):
            continue
        log_dir = broker.logs.dir_of(topic, partition)
        if log_dir in by_dir:
            by_dir[log_dir].setdefault(topic, []).append(
                build(partition_cls, partition_index=partition, partition_size=plog.size_bytes, offset_lag=0,
                      is_future_key=False))
        move = broker.dir_mover.moves.get((topic, partition))
        if move is not None and move.destination in by_dir:
            by_dir[move.destination].setdefault(topic, []).append(
                build(partition_cls, partition_index=partition, partition_size=move.size,
                      offset_lag=move.offset_lag(plog), is_future_key=True))
    results = []
    for log_dir, topics in by_dir.items():
        extra = {}
        if version >= 4:
            extra["total_bytes"], extra["usable_bytes"] = _space(log_dir)
        results.append(build(result_cls, error_code=ErrorCode.none, log_dir=log_dir, topics=tuple(
            build(topic_cls, name=name, partitions=tuple(parts)) for name, parts in topics.items()), **extra))
    return build(cls, throttle_time=0, results=tuple(results), **top)
