"""ConsumerGroupHeartbeat (key 68), v0–1: Kafka's "consumer" group protocol (KIP-848), the coordinator assigning
partitions itself (:mod:`broker.groups.consumer_group`). Topics go by id on the wire and by name inside. v0: an
empty member id on the first heartbeat gets one from the coordinator; v1 (KIP-1082): the member makes its own.
An unexpected failure is answered with a retriable COORDINATOR_NOT_AVAILABLE, never UNKNOWN_SERVER_ERROR (fatal to
librdkafka's consumer)."""

import logging

from broker.groups.consumer_group import HeartbeatError, partitions_by_topic
from broker.handlers.registry import handles
from broker.handlers.join_group import client_host
from broker.protocol.messages import ErrorCode, build, ms, nested, response_class
from broker.security import access

KEY = 68
log = logging.getLogger(__name__)


@handles(KEY, "ConsumerGroupHeartbeat", 0, 1)
async def handle(broker, header, request):
    cls = response_class(KEY, header.api_version)
    interval = broker.config["group.consumer.heartbeat.interval.ms"]

    def answer(error: ErrorCode, message: str | None = None, member_id: str | None = None, epoch: int = -1,
               assignment=None):
        return build(cls, throttle_time=0, error_code=error, error_message=message, member_id=member_id,
                     member_epoch=epoch, heartbeat_interval=interval, assignment=assignment)

    if not access.allowed(broker, "Read", access.GROUP, request.group_id):
        return answer(ErrorCode.group_authorization_failed)
    topics = broker.topics
    owned = None
    if request.topic_partitions is not None:
        owned = set()
        for item in request.topic_partitions:
            info = topics.by_id(item.topic_id)
            if info is not None:  # a deleted topic's partitions are owned no more
                owned |= {(info.name, int(p)) for p in item.partitions}
    names = None if request.subscribed_topic_names is None else tuple(request.subscribed_topic_names)
    try:
        beat = await broker.groups.consumer_heartbeat(
            request.group_id, member_id=request.member_id, epoch=int(request.member_epoch),
            instance_id=request.instance_id, rack_id=request.rack_id,
            rebalance_timeout_ms=ms(request.rebalance_timeout), topics=names,
            regex=getattr(request, "subscribed_topic_regex", None), assignor=request.server_assignor, owned=owned,
            metadata={name: info.partitions for name, info in topics.topics.items()},
            client_id=header.client_id or "", client_host=client_host())
    except HeartbeatError as exc:
        return answer(exc.error, exc.message if exc.message != exc.error.name else None)
    except Exception:  # noqa: BLE001 (a consumer must not die of a coordinator bug; it retries this)
        log.exception("consumer group %s: heartbeat failed", request.group_id)
        return answer(ErrorCode.coordinator_not_available, "The coordinator failed to handle the heartbeat")
    assignment = None
    if beat.assignment is not None:
        tp_cls, assignment_cls = nested(cls, "TopicPartitions"), nested(cls, "Assignment")
        items = tuple(build(tp_cls, topic_id=topics.get(t).topic_id, partitions=tuple(ps))
                      for t, ps in partitions_by_topic(beat.assignment).items() if topics.get(t) is not None)
        assignment = build(assignment_cls, topic_partitions=items)
    return answer(ErrorCode.none, member_id=beat.member_id, epoch=beat.epoch, assignment=assignment)
