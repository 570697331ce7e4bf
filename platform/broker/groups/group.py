"""One consumer group's membership and rebalance protocol (Kafka's classic group protocol), as a state machine:

    Empty ──join──▶ PreparingRebalance ──all joined / rebalance timeout──▶ CompletingRebalance
      ▲                  ▲                                                      │ leader's SyncGroup
      └── last member ───┴──────── join, leave, session expiry ◀── Stable ◀────┘

A join waits until every known member has rejoined (or the rebalance timeout removes the laggards; a new group
first waits ``group.initial.rebalance.delay.ms`` for more members). Then the generation increases, the leader
(the first member) gets everyone's subscription metadata, computes the assignment on the client side
(e.g. the ``range`` assignor) and hands it back in its SyncGroup; the coordinator passes it on untouched.

Static members (KIP-345, a ``group.instance.id``) are kept by instance id as well as member id: a static member
that comes back with no member id takes over its old entry under a new member id (:meth:`Group.replace_static`),
assignment and all, and the old id is fenced (FENCED_INSTANCE_ID); a rebalance does not drop a static member that
did not rejoin (only its session timeout does), so its partitions stay assigned to it meanwhile.
No I/O here: the coordinator persists offsets and writes the ZooKeeper registries.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

from broker.protocol.messages import ErrorCode

EMPTY, PREPARING, COMPLETING, STABLE, DEAD = "Empty", "PreparingRebalance", "CompletingRebalance", "Stable", "Dead"


class GroupError(Exception):
    def __init__(self, error: ErrorCode):
        super().__init__(error.name)
        self.error = error


@dataclass
class JoinResult:
    error: ErrorCode
    generation: int = -1
    protocol_type: str | None = None
    protocol: str | None = None
    leader: str = ""
    member_id: str = ""
    members: list[tuple[str, str | None, bytes]] = field(default_factory=list)
    skip_assignment: bool = False  # JoinGroup v9+: a static leader that rejoined a stable group must not assign


@dataclass
class Member:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    assignment: bytes = b""
    last_heartbeat: float = field(default_factory=time.monotonic)
    join_future: asyncio.Future | None = None
    sync_future: asyncio.Future | None = None

    def metadata_for(self, protocol: str) -> bytes:
        return next(m for name, m in self.protocols if name == protocol)

    @property
    def awaiting_join(self) -> bool:
        return self.join_future is not None and not self.join_future.done()


class Group:
    def __init__(self, group_id: str, initial_delay_ms: int):
        self.group_id = group_id
        self.state = EMPTY
        self.generation = 0
        self.protocol_type: str | None = None
        self.protocol: str | None = None
        self.leader: str | None = None
        self.members: dict[str, Member] = {}
        self.pending: dict[str, float] = {}  # member ids handed out with MEMBER_ID_REQUIRED -> deadline
        self.static_members: dict[str, str] = {}  # group.instance.id -> its current member id
        self.initial_delay_ms = initial_delay_ms
        self.rebalance_deadline = 0.0
        self.delay_until = 0.0
        self.on_stable = None  # callback(group) when a generation's assignment is in place

    # ---- membership -----------------------------------------------------------------------------------------
    def supports(self, protocol_type: str, protocols: list[tuple[str, bytes]]) -> bool:
        if not self.members:
            return bool(protocols)
        if protocol_type != self.protocol_type:
            return False
        names = {p for p, _ in protocols}
        return any(all(p in {n for n, _ in m.protocols} for m in self.members.values()) for p in names)

    def add_or_update(self, member: Member) -> None:
        existing = self.members.get(member.member_id)
        if existing is not None:
            existing.protocols, existing.session_timeout_ms = member.protocols, member.session_timeout_ms
            existing.rebalance_timeout_ms = member.rebalance_timeout_ms
            existing.last_heartbeat = time.monotonic()
            return
        self.members[member.member_id] = member
        if member.group_instance_id is not None:
            self.static_members[member.group_instance_id] = member.member_id
        self.protocol_type = member.protocol_type
        if self.leader is None:
            self.leader = member.member_id

    def remove(self, member_id: str) -> Member | None:
        member = self.members.pop(member_id, None)
        if member is None:
            return None
        for future in (member.join_future, member.sync_future):
            if future is not None and not future.done():
                future.set_result(JoinResult(ErrorCode.unknown_member_id) if future is member.join_future
                                  else (ErrorCode.unknown_member_id, b""))
        if member.group_instance_id is not None and self.static_members.get(member.group_instance_id) == member_id:
            del self.static_members[member.group_instance_id]
        if self.leader == member_id:
            self.leader = next(iter(self.members), None)
        if not self.members:
            self.protocol_type = None
        return member

    def replace_static(self, instance_id: str, old_id: str, new_id: str) -> Member:
        """Hand a static member's entry (assignment, leadership, place) to a new member id. Whoever still waits
        under the old id in a JoinGroup or SyncGroup is answered FENCED_INSTANCE_ID at once."""
        member = self.members[old_id]
        if member.join_future is not None and not member.join_future.done():
            member.join_future.set_result(JoinResult(ErrorCode.fenced_instance_id, member_id=old_id))
        if member.sync_future is not None and not member.sync_future.done():
            member.sync_future.set_result((ErrorCode.fenced_instance_id, b""))
        member.join_future = member.sync_future = None
        member.member_id = new_id
        self.members = {(new_id if k == old_id else k): v for k, v in self.members.items()}  # keeps the order
        self.static_members[instance_id] = new_id
        if self.leader == old_id:
            self.leader = new_id
        return member

    def validate_member(self, member_id: str, instance_id: str | None) -> None:
        """Kafka's check of a request from a current member: a static member must present the member id its
        instance id is mapped to now (else FENCED_INSTANCE_ID: a newer process took it over); any member must be
        known (UNKNOWN_MEMBER_ID)."""
        if instance_id is not None:
            current = self.static_members.get(instance_id)
            if current is None:
                raise GroupError(ErrorCode.unknown_member_id)
            if current != member_id:
                raise GroupError(ErrorCode.fenced_instance_id)
        elif member_id not in self.members:
            raise GroupError(ErrorCode.unknown_member_id)

    def current_members(self) -> list[tuple[str, str | None, bytes]]:
        """What the leader's JoinGroup answer lists: every member (absent static ones too) and its metadata."""
        return [(m.member_id, m.group_instance_id, m.metadata_for(self.protocol)) for m in self.members.values()]

    # ---- rebalance ---------------------------------------------------------------------------------------------
    def prepare_rebalance(self) -> None:
        if self.state == COMPLETING:  # a sync in flight is answered with REBALANCE_IN_PROGRESS
            for m in self.members.values():
                if m.sync_future is not None and not m.sync_future.done():
                    m.sync_future.set_result((ErrorCode.rebalance_in_progress, b""))
                m.sync_future = None
        now = time.monotonic()
        if self.state == EMPTY:
            self.delay_until = now + self.initial_delay_ms / 1000
        timeout = max((m.rebalance_timeout_ms for m in self.members.values()), default=0) / 1000
        self.rebalance_deadline = now + max(timeout, self.initial_delay_ms / 1000 if self.state == EMPTY else 0)
        self.state = PREPARING

    def joined_all(self) -> bool:
        return all(m.awaiting_join for m in self.members.values())

    def ready_to_complete(self, now: float) -> bool:
        if self.state != PREPARING:
            return False
        if now >= self.rebalance_deadline:
            return True
        return self.joined_all() and not self.pending and now >= self.delay_until

    def complete_join(self) -> bool:
        """Close the join phase: drop dynamic members that did not rejoin (static ones stay until their session
        times out), start the next generation. False, and another rebalance timeout to wait, when the only
        members left are static ones that have not rejoined (Kafka: the group cannot proceed without a leader)."""
        for member_id in [m.member_id for m in self.members.values()
                          if not m.awaiting_join and m.group_instance_id is None]:
            self.remove(member_id)
        self.pending.clear()
        joined = [m for m in self.members.values() if m.awaiting_join]
        now = time.monotonic()
        if self.members and not joined:
            timeout = max(m.rebalance_timeout_ms for m in self.members.values()) / 1000
            self.rebalance_deadline = now + timeout
            return False
        self.generation += 1
        if not self.members:
            self.state, self.protocol, self.leader = EMPTY, None, None
            return True
        self.protocol = self.select_protocol()
        if self.leader not in self.members or not self.members[self.leader].awaiting_join:
            self.leader = joined[0].member_id
        self.state = COMPLETING
        everyone = self.current_members()
        for m in self.members.values():
            m.last_heartbeat = now
            if m.awaiting_join:
                m.join_future.set_result(JoinResult(ErrorCode.none, self.generation, self.protocol_type,
                                                    self.protocol, self.leader, m.member_id,
                                                    everyone if m.member_id == self.leader else []))
            m.join_future = None
        return True

    def select_protocol(self) -> str:
        """Kafka's rule: among protocols every member supports, each member votes for its first; most votes."""
        common = set.intersection(*({n for n, _ in m.protocols} for m in self.members.values()))
        votes: dict[str, int] = {}
        for m in self.members.values():
            choice = next(n for n, _ in m.protocols if n in common)
            votes[choice] = votes.get(choice, 0) + 1
        first = self.members.get(self.leader) or next(iter(self.members.values()))
        preference = [n for n, _ in first.protocols]
        return max(votes, key=lambda n: (votes[n], -preference.index(n) if n in preference else -len(preference)))

    def complete_sync(self, assignments: dict[str, bytes]) -> int:
        """The leader's assignment: every member's SyncGroup waiting for it is answered. Returns how many were."""
        for m in self.members.values():
            m.assignment = assignments.get(m.member_id, b"")
        self.state = STABLE
        answered = 0
        for m in self.members.values():
            if m.sync_future is not None and not m.sync_future.done():
                m.sync_future.set_result((ErrorCode.none, m.assignment))
                answered += 1
            m.sync_future = None
        if self.on_stable is not None:
            self.on_stable(self)
        return answered

    def expired(self, now: float) -> list[str]:
        """Members whose session timed out (not those waiting in a join: the rebalance timeout covers them)."""
        out = [m.member_id for m in self.members.values()
               if not m.awaiting_join and now - m.last_heartbeat > m.session_timeout_ms / 1000]
        for member_id, deadline in list(self.pending.items()):
            if now > deadline:
                del self.pending[member_id]
        return out

    def check_member(self, member_id: str, generation: int, instance_id: str | None = None) -> None:
        self.validate_member(member_id, instance_id)
        if generation != self.generation:
            raise GroupError(ErrorCode.illegal_generation)
