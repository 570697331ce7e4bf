"""OffsetForLeaderEpoch (key 23), v2–4: where a leader epoch ends in the leader's log.

Followers ask it before fetching from a new leader and truncate their log there (see
:mod:`broker.cluster.fetcher`); librdkafka asks it to validate a consumer's position after a leader change.
"""

from broker.handlers.registry import handles
from broker.protocol.messages import ErrorCode, build, nested, response_class
from broker.security import access

KEY = 23


@handles(KEY, "OffsetForLeaderEpoch", 2, 4)
def handle(broker, header, request):
    cls = response_class(KEY, header.api_version)
    topic_cls = nested(cls, "OffsetForLeaderTopicResult")
    partition_cls = nested(cls, "EpochEndOffset")
    topics = []
    follower = getattr(request, "replica_id", -1) >= 0
    cluster_ok = not follower or access.on_cluster(broker, "ClusterAction")
    for topic in request.topics:
        info = broker.topics.get(topic.topic)
        results = []
        permitted = cluster_ok if follower else access.allowed(broker, "Describe", access.TOPIC, topic.topic)
        for p in topic.partitions:
            epoch, end = -1, -1
            if not permitted:
                error = ErrorCode.topic_authorization_failed if not follower else ErrorCode.cluster_authorization_failed
            elif info is None or not 0 <= p.partition < info.partitions:
                error = ErrorCode.unknown_topic_or_partition
            else:
                error, plog = broker.leader_log(topic.topic, p.partition, p.current_leader_epoch)
                if plog is not None:
                    epoch, end = plog.epochs.end_offset_for(p.leader_epoch, plog.log_end_offset)
                    if getattr(request, "replica_id", -1) < 0 and end > plog.high_watermark:
                        end = plog.high_watermark  # consumers never learn of uncommitted offsets
            results.append(build(partition_cls, error_code=error, partition=p.partition, leader_epoch=epoch,
                                 end_offset=end))
        topics.append(build(topic_cls, topic=topic.topic, partitions=tuple(results)))
    return build(cls, throttle_time=0, topics=tuple(topics))
