"""One group of Kafka's "consumer" group protocol (KIP-848, ConsumerGroupHeartbeat): the coordinator assigns
partitions itself, and every member reconciles towards its share one heartbeat at a time. No I/O.

- The *group epoch* grows whenever the membership, a subscription or the subscribed topics' partition counts
  change; then the *target assignment* is computed again (assignors ``uniform``, the default, and ``range``) and
  takes that epoch.
- A member moves towards its target as Kafka's ``CurrentAssignmentBuilder`` does: partitions it must give up are
  taken from its assignment first and it stays in its epoch (``UNREVOKED_PARTITIONS``) until a heartbeat's owned
  partitions no longer hold them; then it takes the target epoch and the new partitions no other member still
  holds, the others following on later heartbeats as they are released (``UNRELEASED_PARTITIONS``). So a
  partition never has two owners.
- A heartbeat with a stale epoch is FENCED_MEMBER_EPOCH (a member one epoch behind whose owned partitions are
  still all its own is let through, Kafka's lost-response case); an unknown member id is UNKNOWN_MEMBER_ID; a
  member silent for ``group.consumer.session.timeout.ms`` is removed, and one that keeps partitions it must revoke
  past its rebalance timeout is fenced.

Partitions are (topic name, partition) here; the handler turns topic ids into names and back.
"""

from __future__ import annotations

import re
import time
import uuid
from dataclasses import dataclass, field

from broker.protocol.messages import ErrorCode

STABLE, UNREVOKED, UNRELEASED = "STABLE", "UNREVOKED_PARTITIONS", "UNRELEASED_PARTITIONS"
ASSIGNORS = ("uniform", "range")
LEAVE, STATIC_LEAVE = -1, -2


class HeartbeatError(Exception):
    def __init__(self, error: ErrorCode, message: str | None = None):
        super().__init__(message or error.name)
        self.error, self.message = error, message


@dataclass
class ConsumerMember:
    member_id: str
    instance_id: str | None = None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    topics: tuple = ()
    regex: str | None = None
    assignor: str | None = None
    rebalance_timeout_ms: int = 300_000
    epoch: int = 0
    previous_epoch: int = -1
    state: str = STABLE
    assigned: set = field(default_factory=set)  # partitions the member holds (as the coordinator gave them)
    revoking: set = field(default_factory=set)  # partitions it was told to give up and still holds
    last_heartbeat: float = field(default_factory=time.monotonic)
    revoke_deadline: float | None = None
    matched: tuple | None = None  # (the topic names a regex was matched against, the names it matched)

    def subscribed(self, topics: dict[str, int]) -> set[str]:
        names = set(self.topics)
        if self.regex is not None:
            known = frozenset(topics)
            if self.matched is None or self.matched[0] != known:  # matched again only when the topics change
                pattern = re.compile(self.regex)
                self.matched = (known, frozenset(t for t in known if pattern.fullmatch(t)))
            names |= self.matched[1]
        return {t for t in names if t in topics}


@dataclass
class Beat:
    """What a heartbeat answers: the member's id and epoch, and its assignment when the member must hear it."""
    member_id: str
    epoch: int
    assignment: set | None = None


class ConsumerGroup:
    def __init__(self, group_id: str):
        self.group_id = group_id
        self.epoch = 0
        self.assignment_epoch = 0
        self.members: dict[str, ConsumerMember] = {}
        self.static: dict[str, str] = {}  # instance id -> member id
        self.target: dict[str, set] = {}  # member id -> partitions of the target assignment
        self.topics: dict[str, int] = {}  # the subscribed topics' partition counts the target was computed for

    protocol_type = "consumer"

    @property
    def assignor(self) -> str:
        """The server assignor the members asked for (``range`` when all that name one name it), else uniform."""
        named = {m.assignor for m in self.members.values() if m.assignor}
        return "range" if named == {"range"} else "uniform"

    @property
    def state(self) -> str:
        """Kafka's ConsumerGroup states: Empty, Assigning (target behind the group epoch), Reconciling, Stable."""
        if not self.members:
            return "Empty"
        if self.assignment_epoch < self.epoch:
            return "Assigning"
        if any(m.epoch != self.assignment_epoch or m.state != STABLE for m in self.members.values()):
            return "Reconciling"
        return "Stable"

    # ---- a heartbeat ------------------------------------------------------------------------------------------
    def heartbeat(self, *, member_id: str, epoch: int, instance_id: str | None, rack_id: str | None,
                  rebalance_timeout_ms: int, topics: tuple | None, regex: str | None, assignor: str | None,
                  owned: set | None, metadata: dict[str, int], client_id: str = "", client_host: str = "",
                  now: float | None = None) -> Beat:
        """One ConsumerGroupHeartbeat. ``metadata`` maps every topic name to its partition count. Raises
        HeartbeatError with Kafka's error for a request that cannot be taken."""
        now = time.monotonic() if now is None else now
        if assignor is not None and assignor not in ASSIGNORS:
            raise HeartbeatError(ErrorCode.unsupported_assignor, f"Assignor {assignor} is not supported")
        if epoch in (LEAVE, STATIC_LEAVE):
            return self._leave(member_id, epoch, instance_id)
        if regex:  # checked before anything changes: a refused join leaves no member behind
            try:
                re.compile(regex)
            except re.error as exc:
                raise HeartbeatError(ErrorCode.invalid_regular_expression, f"Invalid regex {regex!r}: {exc}") from None
        if epoch == 0:
            member = self._join(member_id, instance_id, topics, regex, now)
            joined = True
        else:
            member = self.members.get(member_id)
            if member is None:
                raise HeartbeatError(ErrorCode.unknown_member_id)
            if epoch != member.epoch and not (epoch == member.previous_epoch and owned is not None
                                              and owned <= member.assigned):
                raise HeartbeatError(ErrorCode.fenced_member_epoch,
                                     f"The member epoch {epoch} is not the current one ({member.epoch})")
            joined = False
        member.last_heartbeat = now
        member.client_id, member.client_host = client_id or member.client_id, client_host or member.client_host
        if rack_id is not None:
            member.rack_id = rack_id
        if rebalance_timeout_ms is not None and rebalance_timeout_ms >= 0:
            member.rebalance_timeout_ms = rebalance_timeout_ms
        changed = joined
        if topics is not None and tuple(sorted(topics)) != tuple(sorted(member.topics)):
            member.topics, changed = tuple(topics), True
        if regex is not None and (regex or None) != member.regex:
            member.regex, member.matched, changed = regex or None, None, True
        if assignor is not None and assignor != member.assignor:
            member.assignor, changed = assignor, True
        subscribed = self._subscribed_topics(metadata)
        if subscribed != self.topics:
            changed = True
        if changed:
            self.epoch += 1
        if self.assignment_epoch < self.epoch:
            self.topics = subscribed
            self._assign(metadata)
        before = set(member.assigned)
        self._reconcile(member, owned, now)
        tell = joined or member.assigned != before or (owned is not None and owned != member.assigned)
        return Beat(member.member_id, member.epoch, set(member.assigned) if tell else None)

    def _join(self, member_id: str, instance_id: str | None, topics: tuple | None, regex: str | None,
              now: float) -> ConsumerMember:
        if topics is None and regex is None:
            raise HeartbeatError(ErrorCode.invalid_request, "SubscribedTopicNames must be set when joining")
        member_id = member_id or _new_member_id()
        if member_id in self.members:  # a rejoin with epoch 0: the member starts over
            self._remove(member_id)
        kept = None
        if instance_id is not None:
            old_id = self.static.get(instance_id)
            if old_id is not None and old_id != member_id and old_id in self.members:
                old = self.members[old_id]
                if old.epoch != STATIC_LEAVE:
                    raise HeartbeatError(ErrorCode.unreleased_instance_id,
                                         f"Static member {instance_id} is still held by member {old_id}")
                kept = self.target.get(old_id)  # a static member back after leaving with -2: the old place,
                self._remove(old_id)            # and the partitions kept for it (the assignor is sticky)
            self.static[instance_id] = member_id
        member = ConsumerMember(member_id, instance_id, last_heartbeat=now)
        self.members[member_id] = member
        if kept is not None:
            self.target[member_id] = kept
        return member

    def _leave(self, member_id: str, epoch: int, instance_id: str | None) -> Beat:
        member = self.members.get(member_id)
        if member is None:
            raise HeartbeatError(ErrorCode.unknown_member_id)
        if epoch == STATIC_LEAVE and member.instance_id is not None:
            # a static member that will come back: its place and its share of the target are kept until its
            # session ends (nobody else gets them; it rejoins with epoch 0 and its instance id and gets them back)
            member.epoch, member.assigned, member.revoking = STATIC_LEAVE, set(), set()
            return Beat(member_id, STATIC_LEAVE)
        self._remove(member_id)
        self.epoch += 1
        return Beat(member_id, LEAVE)

    def _remove(self, member_id: str) -> None:
        member = self.members.pop(member_id, None)
        self.target.pop(member_id, None)
        if member is not None and member.instance_id is not None and self.static.get(member.instance_id) == member_id:
            del self.static[member.instance_id]

    # ---- the target assignment ---------------------------------------------------------------------------------
    def _subscribed_topics(self, metadata: dict[str, int]) -> dict[str, int]:
        names = set()
        for member in self.members.values():
            names |= member.subscribed(metadata)
        return {t: metadata[t] for t in sorted(names)}

    def _assign(self, metadata: dict[str, int]) -> None:
        live = {mid: m for mid, m in self.members.items() if m.epoch != STATIC_LEAVE}
        subscriptions = {mid: m.subscribed(metadata) for mid, m in sorted(live.items())}
        if self.assignor == "range":
            self.target = range_assignment(subscriptions, self.topics)
        else:
            self.target = uniform_assignment(subscriptions, self.topics, self.target)
        self.assignment_epoch = self.epoch

    # ---- one member towards its target ---------------------------------------------------------------------------
    def _held_by_others(self, member_id: str) -> set:
        out = set()
        for mid, m in self.members.items():
            if mid != member_id:
                out |= m.assigned | m.revoking
        return out

    def _reconcile(self, member: ConsumerMember, owned: set | None, now: float) -> None:
        if member.revoking:
            if owned is not None and not owned & member.revoking:
                member.revoking, member.revoke_deadline = set(), None  # the member gave them up
            else:
                if member.revoke_deadline is not None and now > member.revoke_deadline:
                    self._remove(member.member_id)
                    self.epoch += 1
                    raise HeartbeatError(ErrorCode.fenced_member_epoch,
                                         "The member did not revoke its partitions within its rebalance timeout")
                return
        target = self.target.get(member.member_id, set())
        revoke = member.assigned - target
        if revoke:
            member.assigned -= revoke
            member.revoking = revoke
            member.state = UNREVOKED
            member.revoke_deadline = now + member.rebalance_timeout_ms / 1000
            return
        wanted = target - member.assigned
        free = wanted - self._held_by_others(member.member_id)
        member.assigned |= free
        if member.epoch != self.assignment_epoch:
            member.previous_epoch, member.epoch = member.epoch, self.assignment_epoch
        member.state = UNRELEASED if wanted - free else STABLE

    # ---- time ------------------------------------------------------------------------------------------------------
    def expire(self, now: float, session_timeout_ms: int) -> list[str]:
        """Members silent past the session timeout, removed (the group epoch grows once for them)."""
        gone = [mid for mid, m in self.members.items() if now - m.last_heartbeat > session_timeout_ms / 1000]
        for mid in gone:
            self._remove(mid)
        if gone:
            self.epoch += 1
        return gone

    # ---- offset commits ----------------------------------------------------------------------------------------------
    def check_commit(self, member_id: str, epoch: int) -> ErrorCode:
        """OffsetCommit by a member of this group: the member must be known and in its current epoch (a stale one
        is STALE_MEMBER_EPOCH, Kafka's answer under this protocol)."""
        member = self.members.get(member_id)
        if member is None:
            return ErrorCode.unknown_member_id
        if epoch != member.epoch:
            return ErrorCode.stale_member_epoch
        return ErrorCode.none

    # ---- what survives a coordinator's failover --------------------------------------------------------------------
    def snapshot(self) -> dict:
        """The group as the next coordinator needs it (Kafka keeps the same in ``__consumer_offsets``' group records):
        epochs, the target assignment and each member's place in it; not its timers, which start again there."""
        def parts(ps):
            return sorted([t, p] for t, p in ps)

        return {"epoch": self.epoch, "assignment_epoch": self.assignment_epoch, "static": dict(self.static),
                "target": {mid: parts(ps) for mid, ps in self.target.items()}, "topics": dict(self.topics),
                "members": [{"member_id": m.member_id, "instance_id": m.instance_id, "rack_id": m.rack_id,
                             "client_id": m.client_id, "client_host": m.client_host, "topics": list(m.topics),
                             "regex": m.regex, "assignor": m.assignor, "rebalance_timeout_ms": m.rebalance_timeout_ms,
                             "epoch": m.epoch, "previous_epoch": m.previous_epoch, "state": m.state,
                             "assigned": parts(m.assigned), "revoking": parts(m.revoking)}
                            for m in self.members.values()]}

    @classmethod
    def restore(cls, group_id: str, data: dict, now: float | None = None) -> "ConsumerGroup":
        """A group from :meth:`snapshot`: every member's session (and revocation deadline) starts at ``now``."""
        now = time.monotonic() if now is None else now

        def parts(items):
            return {(str(t), int(p)) for t, p in items}

        group = cls(group_id)
        group.epoch, group.assignment_epoch = int(data["epoch"]), int(data["assignment_epoch"])
        group.static = {str(k): str(v) for k, v in data.get("static", {}).items()}
        group.target = {mid: parts(ps) for mid, ps in data.get("target", {}).items()}
        group.topics = {str(t): int(n) for t, n in data.get("topics", {}).items()}
        for m in data.get("members", []):
            member = ConsumerMember(
                m["member_id"], m.get("instance_id"), m.get("rack_id"), m.get("client_id", ""),
                m.get("client_host", ""), tuple(m.get("topics", ())), m.get("regex"), m.get("assignor"),
                int(m.get("rebalance_timeout_ms", 300_000)), int(m["epoch"]), int(m.get("previous_epoch", -1)),
                m.get("state", STABLE), parts(m.get("assigned", [])), parts(m.get("revoking", [])),
                last_heartbeat=now)
            if member.revoking:
                member.revoke_deadline = now + member.rebalance_timeout_ms / 1000
            group.members[member.member_id] = member
        return group


def partitions_by_topic(partitions) -> dict[str, list[int]]:
    """(topic, partition) pairs as topic -> sorted partitions, topics sorted: how every answer lists them."""
    out: dict[str, list[int]] = {}
    for topic, partition in sorted(partitions):
        out.setdefault(topic, []).append(partition)
    return out


def _new_member_id() -> str:
    """A member id as Kafka makes one (``Uuid.randomUuid().toString()``: 22 characters of URL-safe base64)."""
    import base64

    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


def uniform_assignment(subscriptions: dict[str, set], topics: dict[str, int], previous: dict[str, set]) -> dict:
    """Every subscribed partition to one member subscribed to its topic: the least loaded, the previous owner
    first among equals (balance, then stickiness: the uniform assignor's goals)."""
    out = {mid: set() for mid in subscriptions}
    owner = {tp: mid for mid, tps in previous.items() for tp in tps if mid in out}
    candidates_of = {topic: sorted(mid for mid, subscribed in subscriptions.items() if topic in subscribed)
                     for topic in topics}
    # the topics fewest members can take go first, so that the others balance around them
    for topic in sorted(topics, key=lambda t: (len(candidates_of[t]), t)):
        candidates, count = candidates_of[topic], topics[topic]
        if not candidates:
            continue
        for partition in range(count):
            tp = (topic, partition)
            least = min(len(out[mid]) for mid in candidates)
            keeper = owner.get(tp)
            if keeper in candidates and len(out[keeper]) <= least:
                chosen = keeper
            else:
                chosen = min(candidates, key=lambda mid: (len(out[mid]), mid))
            out[chosen].add(tp)
    return out


def range_assignment(subscriptions: dict[str, set], topics: dict[str, int]) -> dict:
    """Per topic, its partitions in contiguous ranges over the members subscribed to it, sorted by member id
    (the first ``count % members`` get one more), as the classic range assignor."""
    out = {mid: set() for mid in subscriptions}
    for topic, count in sorted(topics.items()):
        candidates = sorted(mid for mid, subscribed in subscriptions.items() if topic in subscribed)
        if not candidates:
            continue
        share, extra = divmod(count, len(candidates))
        start = 0
        for i, mid in enumerate(candidates):
            size = share + (1 if i < extra else 0)
            out[mid] |= {(topic, p) for p in range(start, start + size)}
            start += size
    return out
