"""ElectLeaders (key 43), v0–2: preferred (0) or unclean (1) leader election asked by an admin
(``kafka-leader-election.sh``, ``AdminClient.elect_leaders``). Only the active controller decides
(NOT_CONTROLLER elsewhere; clients send it there); it writes the partitions' new states as for any election
(``Controller.elect``), and the answer waits, up to the request's timeout, until this broker's metadata shows the
new leaders (REQUEST_TIMED_OUT for those still not shown). Alter on the Cluster when ACLs are on
(CLUSTER_AUTHORIZATION_FAILED). Standalone, a broker leads every partition: ELECTION_NOT_NEEDED."""

import asyncio
import time

from broker.handlers.registry import handles
from broker.protocol.messages import ErrorCode, build, nested, response_class
from broker.security import access

KEY = 43
PREFERRED, UNCLEAN = 0, 1


@handles(KEY, "ElectLeaders", 0, 2)
async def handle(broker, header, request):
    version = header.api_version
    cls = response_class(KEY, version)
    result_cls = nested(cls, "ReplicaElectionResult")
    partition_cls = nested(cls, "PartitionResult")
    asked = None if request.topic_partitions is None else [
        (t.topic, p) for t in request.topic_partitions for p in t.partitions]
    election = getattr(request, "election_type", PREFERRED)

    def answer(outcomes: dict, top: ErrorCode = ErrorCode.none):
        by_topic: dict[str, list] = {}
        for (topic, p), (error, message) in outcomes.items():
            by_topic.setdefault(topic, []).append(build(partition_cls, partition_id=p, error_code=error,
                                                        error_message=message))
        extra = {"error_code": top} if version >= 1 else {}
        return build(cls, throttle_time=0, replica_election_results=tuple(
            build(result_cls, topic=t, partition_result=tuple(ps)) for t, ps in by_topic.items()), **extra)

    def everyone(error: ErrorCode, message: str):
        return answer({tp: (error, message) for tp in asked or []}, error)

    if not access.allowed(broker, "Alter", access.CLUSTER):
        return everyone(ErrorCode.cluster_authorization_failed, "Not authorized to elect leaders")
    if election not in (PREFERRED, UNCLEAN):
        return everyone(ErrorCode.invalid_request, f"Unknown election type {election}")
    if broker.cluster is None:  # standalone: the one broker leads every partition already
        def outcome(topic: str, p: int) -> tuple[ErrorCode, str | None]:
            info = broker.topics.get(topic)
            if info is None or not 0 <= p < info.partitions:
                return ErrorCode.unknown_topic_or_partition, MESSAGES["unknown_topic_or_partition"]
            return ErrorCode.election_not_needed, MESSAGES["election_not_needed"]

        return answer({tp: outcome(*tp) for tp in asked or []})
    controller = broker.cluster.controller
    if not controller.active:
        return everyone(ErrorCode.not_controller, "This is not the correct controller for this cluster.")
    decided = await controller.elect(asked, election == UNCLEAN)
    deadline = time.monotonic() + max(int(request.timeout.total_seconds() * 1000), 0) / 1000
    waiting = {tp: leader for tp, (outcome, leader) in decided.items() if outcome == "none"}
    while waiting and time.monotonic() < deadline:  # until this broker's metadata shows the new leaders
        for tp, leader in list(waiting.items()):
            state = broker.cluster.metadata.state(*tp)
            if state is not None and state.leader == leader:
                del waiting[tp]
        if waiting:
            await asyncio.sleep(0.05)
    outcomes = {}
    for tp, (outcome, _leader) in decided.items():
        if tp in waiting:
            outcomes[tp] = (ErrorCode.request_timed_out, "The new leader was not seen within the timeout.")
        else:
            error = ErrorCode[outcome]
            outcomes[tp] = (error, None if error == ErrorCode.none else MESSAGES.get(outcome))
    return answer(outcomes)


MESSAGES = {
    "election_not_needed": "Leader election not needed for topic partition.",
    "preferred_leader_not_available": "Failed to elect leader for partition: preferred replica not in the ISR "
                                      "or not alive.",
    "eligible_leaders_not_available": "Failed to elect leader for partition: no live replica.",
    "unknown_topic_or_partition": "The partition does not exist.",
    "not_controller": "This is not the correct controller for this cluster.",
    "request_timed_out": "The election could not be completed.",
}
