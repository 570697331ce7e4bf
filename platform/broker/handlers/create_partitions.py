"""CreatePartitions (key 37), v0–3: grow topics' partition counts, with ``validate_only`` and manual assignments.

Every topic is checked and grown first; then the request waits up to ``timeout_ms`` (one deadline for all) until
the new partitions have leaders. A topic whose new partitions are still leaderless then is answered
REQUEST_TIMED_OUT: its partitions exist and the controller goes on electing (Kafka answers the same, and with
``timeout_ms`` ≤ 0 always; here a standalone broker's partitions are led as soon as they exist). A topic named
twice is INVALID_REQUEST, one result per name.
"""

import time

from broker.client_quotas.manager import mutation_quota, mutations_throttle
from broker.handlers.registry import handles
from broker.metadata.topics import TopicError
from broker.protocol.messages import ErrorCode, build, ms, nested, response_class
from broker.security import access

KEY = 37
STRICT_SINCE = 3  # KIP-599 (controller_mutation_rate: the partitions added)


@handles(KEY, "CreatePartitions", 0, 3)
async def handle(broker, header, request):
    cls = response_class(KEY, header.api_version)
    result_cls = nested(cls, "CreatePartitionsTopicResult")
    deadline = time.monotonic() + max(ms(request.timeout), 0) / 1000
    counts: dict[str, int] = {}
    for topic in request.topics:
        counts[topic.name] = counts.get(topic.name, 0) + 1
    quota = mutation_quota(broker, header, STRICT_SINCE)
    outcome: dict[str, tuple[ErrorCode, str | None]] = {}
    created: dict[str, list[int]] = {}
    for topic in request.topics:
        if topic.name in outcome:
            continue
        if counts[topic.name] > 1:
            outcome[topic.name] = ErrorCode.invalid_request, "Duplicate topic in request."
            continue
        if not access.allowed(broker, "Alter", access.TOPIC, topic.name):
            outcome[topic.name] = ErrorCode.topic_authorization_failed, "Authorization failed."
            continue
        assignments = None if topic.assignments is None else [list(a.broker_ids) for a in topic.assignments]
        try:
            if quota is not None and not request.validate_only and quota.exceeded():
                raise TopicError("throttling_quota_exceeded", "The throttling quota has been exceeded.")
            created[topic.name] = await broker.create_partitions(topic.name, topic.count, assignments,
                                                                 validate_only=request.validate_only)
            if quota is not None and not request.validate_only:
                quota.record(len(created[topic.name]))
            outcome[topic.name] = ErrorCode.none, None
        except TopicError as exc:
            outcome[topic.name] = ErrorCode[exc.error], str(exc)
    waiting = [(name, p) for name, parts in created.items() for p in parts]
    if waiting:
        leaderless = await broker.wait_for_leaders(waiting, deadline - time.monotonic())
        for name in sorted({t for t, _ in leaderless}):
            missing = sorted(p for t, p in leaderless if t == name)
            outcome[name] = (ErrorCode.request_timed_out,
                             f"partitions created; {len(missing)} of them had no leader yet within timeout_ms "
                             f"({', '.join(map(str, missing[:10]))}{', ...' if len(missing) > 10 else ''})")
    results = tuple(build(result_cls, name=name, error_code=error, error_message=message)
                    for name, (error, message) in outcome.items())
    return build(cls, throttle_time=mutations_throttle(broker, quota), results=results)
