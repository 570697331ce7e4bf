"""WriteTxnMarkers (key 27), v1: a transaction coordinator on another broker asks this one, the partitions'
leader, to write commit or abort markers (v0 is gone in Kafka 4; v2 is KIP-890's). Each marker is committed
(all of the ISR) before it is answered."""

import asyncio

from broker.handlers.registry import handles
from broker.protocol.messages import ErrorCode, build, nested, response_class
from broker.security import access
from broker.txn.markers import write_marker

KEY = 27


@handles(KEY, "WriteTxnMarkers", 1, 1)
async def handle(broker, header, request):
    cls = response_class(KEY, header.api_version)
    marker_cls = nested(cls, "WritableTxnMarkerResult")
    topic_cls = nested(cls, "WritableTxnMarkerTopicResult")
    partition_cls = nested(cls, "WritableTxnMarkerPartitionResult")
    results = []
    permitted = access.on_cluster(broker, "ClusterAction")
    for marker in request.markers:
        keys = [(t.name, p) for t in marker.topics for p in t.partition_indexes]
        if not permitted:
            errors = [ErrorCode.cluster_authorization_failed] * len(keys)
        else:
            errors = await asyncio.gather(*(write_marker(broker, name, p, marker.producer_id, marker.producer_epoch,
                                                         bool(marker.transaction_result), marker.coordinator_epoch)
                                            for name, p in keys))
        by_topic: dict[str, list] = {}
        for (name, p), error in zip(keys, errors):
            by_topic.setdefault(name, []).append(build(partition_cls, partition_index=p, error_code=error))
        results.append(build(marker_cls, producer_id=marker.producer_id, topics=tuple(
            build(topic_cls, name=name, partitions=tuple(parts)) for name, parts in by_topic.items())))
    return build(cls, markers=tuple(results))
