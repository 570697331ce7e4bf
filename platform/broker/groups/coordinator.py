"""The group coordinator of this broker: which groups it coordinates, their state machines (:mod:`group`),
session expiry, and committed offsets (:mod:`stores`).

Each group has one coordinator among the live brokers, chosen by rendezvous hashing of the group id over the
registered broker ids, so every broker computes the same answer and only the groups of a broker that leaves
move. Standalone, this broker coordinates everything.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
import zlib

from broker.groups.consumer_group import Beat, ConsumerGroup, HeartbeatError
from broker.groups.group import (
    COMPLETING,
    DEAD,
    EMPTY,
    PREPARING,
    STABLE,
    Group,
    GroupError,
    JoinResult,
    Member,
)
from broker.groups.stores import (
    FileOffsetStore,
    StaleGroupState,
    ZkOffsetStore,
    assignment_partitions,
    subscription_topics,
)
from broker.log.storage_errors import incidents
from broker.protocol.messages import ErrorCode

log = logging.getLogger(__name__)
TICK_S = 0.1
_NOTHING = object()  # no state handed to the store yet (None is a state: the group is gone)


def _settle(waiters: list, exc: Exception | None = None) -> None:
    for waiter in waiters:
        if waiter.done():
            continue
        if exc is None:
            waiter.set_result(None)
        else:
            waiter.set_exception(exc)


def coordinator_for(group_id: str, brokers: list[int]) -> int:
    if not brokers:
        return -1
    return max(brokers, key=lambda b: zlib.crc32(f"{group_id}\0{b}".encode()))


class GroupCoordinator:
    def __init__(self, broker):
        self.broker = broker
        self.groups: dict[str, Group] = {}
        self.consumer_groups: dict[str, ConsumerGroup] = {}  # groups on the "consumer" protocol (KIP-848)
        self._loading: dict[str, asyncio.Future] = {}  # group id -> its state being read from the store
        self._saved: dict[str, dict | None] = {}  # group id -> the state last handed to the store
        self._queued: dict[str, tuple] = {}  # group id -> (a state still to write, futures waiting for it)
        self._writing: dict[str, tuple] = {}  # group id -> (the state being written, futures waiting for it)
        self._saving: dict[str, asyncio.Task] = {}  # group id -> its writer (one at a time, latest state wins)
        self._retry_at: dict[str, float] = {}  # group id -> when a write may be tried again after a failure
        self._absent: set[str] = set()  # groups with no stored state (read once; forgotten when brokers change)
        self._brokers_seen: tuple = ()
        self.offsets: dict[str, dict[tuple[str, int], tuple[int, str]]] = {}
        self.store = None
        self._task: asyncio.Task | None = None
        self.initial_delay_ms = broker.config["group.initial.rebalance.delay.ms"]
        self.consumer_session_ms = broker.config["group.consumer.session.timeout.ms"]

    async def start(self) -> None:
        cluster = self.broker.cluster
        self.store = ZkOffsetStore(cluster.zk) if cluster is not None else FileOffsetStore(self.broker.log_dirs[0])
        self._task = asyncio.get_running_loop().create_task(self._tick())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()

    # ---- who coordinates ------------------------------------------------------------------------------------
    def coordinator_id(self, group_id: str) -> int:
        if self.broker.cluster is None:
            return self.broker.node_id
        return coordinator_for(group_id, sorted(self.broker.cluster.metadata.brokers))

    def check(self, group_id: str) -> None:
        if not group_id:
            raise GroupError(ErrorCode.invalid_group_id)
        if self.coordinator_id(group_id) != self.broker.node_id:
            raise GroupError(ErrorCode.not_coordinator)

    def _group(self, group_id: str) -> Group:
        group = self.groups.get(group_id)
        if group is None:
            group = self.groups[group_id] = Group(group_id, self.initial_delay_ms)
            group.on_stable = self._on_stable
        return group

    # ---- the "consumer" protocol (KIP-848) -----------------------------------------------------------------
    async def consumer_heartbeat(self, group_id: str, **beat) -> Beat:
        """One ConsumerGroupHeartbeat (see :meth:`ConsumerGroup.heartbeat` for the arguments); HeartbeatError with
        Kafka's error otherwise. A group id a classic group holds with members is GROUP_ID_NOT_FOUND, as in Kafka
        (not a consumer group). A heartbeat that changed the group is answered once the change is stored (Kafka
        answers once its records are committed): a coordinator killed after answering leaves its successor the
        state the members were told."""
        self._coordinating(group_id)
        group = await self.consumer_group(group_id)
        self._coordinating(group_id)  # again: the brokers may have changed while the group was read
        if group is None:
            if beat["epoch"] != 0:
                raise HeartbeatError(ErrorCode.unknown_member_id)
            group = self.consumer_groups[group_id] = ConsumerGroup(group_id)
        epoch_before = group.epoch
        try:
            result = group.heartbeat(**beat)
        finally:
            stored = self._persist(group, wait=True)  # a refusal can change the group too (a member fenced)
        if group.epoch != epoch_before:
            log.info("consumer group %s: group epoch %d, %d member(s), state %s", group_id, group.epoch,
                     len(group.members), group.state)
        if stored is not None:
            try:
                await asyncio.shield(stored)
            except StaleGroupState as exc:  # another coordinator wrote the group: read again on the next request
                raise HeartbeatError(ErrorCode.not_coordinator, str(exc)) from None
            except Exception as exc:  # noqa: BLE001 (the member retries; its next heartbeat writes again)
                raise HeartbeatError(ErrorCode.coordinator_not_available,
                                     f"The group's state could not be stored: {exc}") from None
        return result

    def _coordinating(self, group_id: str) -> None:
        try:
            self.check(group_id)
        except GroupError as exc:
            raise HeartbeatError(exc.error) from None
        classic = self.groups.get(group_id)
        if classic is not None and classic.members:
            raise HeartbeatError(ErrorCode.group_id_not_found, f"Group {group_id} is not a consumer group")

    async def consumer_group(self, group_id: str) -> ConsumerGroup | None:
        """The "consumer"-protocol group, read from the store the first time this coordinator needs it: a group
        another coordinator ran goes on here with its members, epochs and assignment (Kafka reads the same from
        ``__consumer_offsets`` when it takes a group over), so a failover costs no rebalance."""
        group = self.consumer_groups.get(group_id)
        if group is not None or group_id in self._absent:
            return group
        writer = self._saving.get(group_id)
        if writer is not None:  # this broker's own last write first: the store must not be read behind it
            await asyncio.shield(writer)
        loading = self._loading.get(group_id)
        if loading is None:
            loading = self._loading[group_id] = asyncio.ensure_future(self.store.load_consumer_group(group_id))
            loading.add_done_callback(lambda _f: self._loading.pop(group_id, None))
        try:
            state = await asyncio.shield(loading)
        except Exception as exc:  # noqa: BLE001 (ZooKeeper away: the member retries, as on any coordinator error)
            raise HeartbeatError(ErrorCode.coordinator_load_in_progress, f"Loading the group failed: {exc}") from None
        group = self.consumer_groups.get(group_id)  # another request may have loaded or made it meanwhile
        if group is None and isinstance(state, dict) and state.get("members"):
            try:
                group = ConsumerGroup.restore(group_id, state)
            except (KeyError, TypeError, ValueError, AttributeError) as exc:
                log.warning("consumer group %s: its stored state is unreadable (%r); it starts empty", group_id, exc)
                group = None
        if group is not None and group_id not in self.consumer_groups:
            self.consumer_groups[group_id] = group
            self._saved[group_id] = state
            log.info("consumer group %s: taken over at group epoch %d with %d member(s)", group_id, group.epoch,
                     len(group.members))
        elif group is None:
            self._absent.add(group_id)  # read again only once the brokers change (see _expire)
        return group

    def _persist(self, group: ConsumerGroup, wait: bool = False) -> asyncio.Future | None:
        """The group's state handed to the store when it changed; one write at a time per group, the latest
        state last. With ``wait``, a future done once what the group is now is stored (None: nothing to wait
        for). After a failed write, writes wait a second (the members' retries are answered with an error)."""
        gid = group.group_id
        state = group.snapshot() if group.members else None
        loop = asyncio.get_running_loop()
        if self._saved.get(gid, _NOTHING) == state:
            pending = self._queued.get(gid) or self._writing.get(gid)
            if not wait or pending is None:
                return None
            waiter = loop.create_future()
            pending[1].append(waiter)
            return waiter
        if loop.time() < self._retry_at.get(gid, 0.0):
            if not wait:
                return None
            waiter = loop.create_future()
            waiter.set_exception(OSError("the last write failed a moment ago"))
            return waiter
        waiters = self._queued[gid][1] if gid in self._queued else []
        self._saved[gid] = state
        self._queued[gid] = (state, waiters)
        self._absent.discard(gid)
        waiter = None
        if wait:
            waiter = loop.create_future()
            waiters.append(waiter)
        if gid not in self._saving:
            self._saving[gid] = loop.create_task(self._write_state(gid))
        return waiter

    async def _write_state(self, group_id: str) -> None:
        try:
            while group_id in self._queued:
                state, waiters = self._writing[group_id] = self._queued.pop(group_id)
                try:
                    await self.store.save_consumer_group(group_id, state)
                except StaleGroupState as exc:  # what this broker holds is behind the store: drop it, read again
                    log.warning("consumer group %s: %s; reading it again", group_id, exc)
                    _settle(waiters, exc)
                    self._forget(group_id, exc)
                except Exception as exc:  # noqa: BLE001 (kept in memory; the next change writes it again)
                    log.warning("consumer group %s: storing its state failed: %s", group_id, exc)
                    self._saved.pop(group_id, None)
                    self._retry_at[group_id] = asyncio.get_running_loop().time() + 1.0
                    _settle(waiters, exc)
                else:
                    self._retry_at.pop(group_id, None)
                    _settle(waiters)
                finally:
                    self._writing.pop(group_id, None)
        finally:
            self._saving.pop(group_id, None)

    def _forget(self, group_id: str, why: Exception | None = None) -> None:
        """The group is no longer run here (or is deleted): nothing more of it is written from this broker."""
        self.consumer_groups.pop(group_id, None)
        self._saved.pop(group_id, None)
        queued = self._queued.pop(group_id, None)
        if queued is not None:
            _settle(queued[1], why)

    # ---- membership ---------------------------------------------------------------------------------------
    async def join(self, group_id: str, member_id: str, instance_id: str | None, client_id: str, client_host: str,
                   session_timeout_ms: int, rebalance_timeout_ms: int, protocol_type: str,
                   protocols: list[tuple[str, bytes]], require_known_member_id: bool,
                   supports_skip_assignment: bool = False) -> JoinResult:
        try:
            self.check(group_id)
        except GroupError as exc:
            return JoinResult(exc.error, member_id=member_id)
        lo, hi = self.broker.config["group.min.session.timeout.ms"], self.broker.config["group.max.session.timeout.ms"]
        if not lo <= session_timeout_ms <= hi:
            return JoinResult(ErrorCode.invalid_session_timeout, member_id=member_id)
        modern = self.consumer_groups.get(group_id)
        if modern is not None and modern.members:  # held by members on the "consumer" protocol
            return JoinResult(ErrorCode.inconsistent_group_protocol, member_id=member_id)
        group = self._group(group_id)
        if not group.supports(protocol_type, protocols):
            return JoinResult(ErrorCode.inconsistent_group_protocol, member_id=member_id)
        if not member_id and instance_id is not None:
            # a static member gets its member id at once (no MEMBER_ID_REQUIRED round); if its instance id is
            # known, it takes over the old member's place (KIP-345)
            member_id = f"{instance_id}-{uuid.uuid4()}"
            old_id = group.static_members.get(instance_id)
            if old_id is not None:
                return await self._static_rejoin(group, instance_id, old_id, member_id, session_timeout_ms,
                                                 rebalance_timeout_ms, protocols, supports_skip_assignment)
        elif not member_id:
            member_id = f"{client_id or 'member'}-{uuid.uuid4()}"
            if require_known_member_id:  # KIP-394: the client must come back with this id
                group.pending[member_id] = time.monotonic() + session_timeout_ms / 1000
                return JoinResult(ErrorCode.member_id_required, member_id=member_id)
        elif member_id not in group.pending:
            try:
                group.validate_member(member_id, instance_id)
            except GroupError as exc:
                return JoinResult(exc.error, member_id=member_id)
        group.pending.pop(member_id, None)
        known = group.members.get(member_id)
        changed = known is None or known.protocols != protocols
        group.add_or_update(Member(member_id, instance_id, client_id, client_host, session_timeout_ms,
                                   rebalance_timeout_ms, protocol_type, list(protocols)))
        member = group.members[member_id]
        if known is None:
            self._register(group, member)
        if group.state == STABLE and not changed and member_id != group.leader:
            # a follower rejoining with the same subscription: the current generation stands
            return JoinResult(ErrorCode.none, group.generation, group.protocol_type, group.protocol, group.leader,
                              member_id, [])
        if group.state in (EMPTY, STABLE, COMPLETING):
            group.prepare_rebalance()
        future = asyncio.get_running_loop().create_future()
        member.join_future = future
        self._maybe_complete(group)
        return await future

    async def _static_rejoin(self, group: Group, instance_id: str, old_id: str, new_id: str, session_timeout_ms: int,
                             rebalance_timeout_ms: int, protocols: list[tuple[str, bytes]],
                             supports_skip_assignment: bool) -> JoinResult:
        """A known static member back with no member id (a restart, or a second process with the same
        ``group.instance.id``): the new id takes over the old one's entry and the old id is fenced. A stable group
        whose selected protocol stays the same does not rebalance: same generation, same assignment (Kafka's
        ``updateStaticMemberAndRebalance``)."""
        current_leader = group.leader
        member = group.replace_static(instance_id, old_id, new_id)
        member.protocols, member.session_timeout_ms = list(protocols), session_timeout_ms
        member.rebalance_timeout_ms, member.last_heartbeat = rebalance_timeout_ms, time.monotonic()
        log.info("group %s: static member %s rejoined as %s in state %s; %s fenced", group.group_id, instance_id,
                 new_id, group.state, old_id)
        self._background(self.store.member_left(group.group_id, old_id))
        self._register(group, member)
        if group.state == STABLE and group.select_protocol() == group.protocol:
            self._on_stable(group)  # the ownership registry names the new member id
            if supports_skip_assignment:  # v9+: the leader learns it leads, but must not assign
                leads = group.leader == new_id
                return JoinResult(ErrorCode.none, group.generation, group.protocol_type, group.protocol, group.leader,
                                  new_id, group.current_members() if leads else [], skip_assignment=leads)
            # before v9, the old leader id: a rejoining leader must not think it leads and assign (its assignment
            # would not be passed on by a stable group)
            return JoinResult(ErrorCode.none, group.generation, group.protocol_type, group.protocol, current_leader,
                              new_id, [])
        if group.state in (STABLE, COMPLETING):  # COMPLETING: the leader may be assigning to the old id
            group.prepare_rebalance()
        future = asyncio.get_running_loop().create_future()
        member.join_future = future
        self._maybe_complete(group)
        return await future

    def _register(self, group: Group, member: Member) -> None:
        """The member in the consumer registry (ZooKeeper ``/consumers/<group>/ids/<member>``)."""
        topics = subscription_topics(member.protocols[0][1]) if member.protocol_type == "consumer" else []
        data = {"version": 1, "subscription": {t: 1 for t in topics}, "client_id": member.client_id,
                "host": member.client_host, "timestamp": str(int(time.time() * 1000))}
        if member.group_instance_id is not None:
            data["group_instance_id"] = member.group_instance_id
        self._background(self.store.member_joined(group.group_id, member.member_id, data))

    def _member(self, group_id: str, member_id: str, generation: int,
                instance_id: str | None = None) -> tuple[Group, Member]:
        """The group and member a request names, its session refreshed; GroupError when it is not valid."""
        self.check(group_id)
        group = self.groups.get(group_id)
        if group is None:
            raise GroupError(ErrorCode.unknown_member_id)
        group.check_member(member_id, generation, instance_id)
        member = group.members[member_id]
        member.last_heartbeat = time.monotonic()
        return group, member

    async def sync(self, group_id: str, member_id: str, generation: int, assignments: dict[str, bytes],
                   instance_id: str | None = None) -> tuple[ErrorCode, bytes]:
        try:
            group, member = self._member(group_id, member_id, generation, instance_id)
        except GroupError as exc:
            return exc.error, b""
        if group.state == PREPARING:
            return ErrorCode.rebalance_in_progress, b""
        if group.state == STABLE:
            return ErrorCode.none, member.assignment
        future = asyncio.get_running_loop().create_future()
        member.sync_future = future
        if member_id == group.leader:
            answered = group.complete_sync(assignments)
            log.info("group %s: generation %d assigned by its leader (%d of %d member(s) given an assignment); "
                     "%d waiting SyncGroup(s) answered, the leader's included", group.group_id, group.generation,
                     sum(1 for m in group.members.values() if m.assignment), len(group.members), answered)
        return await future

    def heartbeat(self, group_id: str, member_id: str, generation: int, instance_id: str | None = None) -> ErrorCode:
        try:
            group, _member = self._member(group_id, member_id, generation, instance_id)
        except GroupError as exc:
            return exc.error
        if group.state == PREPARING:
            return ErrorCode.rebalance_in_progress
        return ErrorCode.none

    def leave(self, group_id: str, members: list[tuple[str, str | None]]) -> tuple[ErrorCode, list[ErrorCode]]:
        """LeaveGroup for (member id, group instance id) pairs, one error each. An empty member id with an
        instance id removes that static member (the admin's "remove members"); a static member id that is no
        longer its instance's current one is FENCED_INSTANCE_ID."""
        try:
            self.check(group_id)
        except GroupError as exc:
            return exc.error, [exc.error] * len(members)
        group = self.groups.get(group_id)
        results = []
        removed = False
        for member_id, instance_id in members:
            if group is None:
                results.append(ErrorCode.unknown_member_id)
                continue
            if not member_id:
                member_id = group.static_members.get(instance_id) if instance_id is not None else None
                if member_id is None:
                    results.append(ErrorCode.unknown_member_id)
                    continue
            elif member_id in group.pending:
                del group.pending[member_id]
                results.append(ErrorCode.none)
                continue
            else:
                try:
                    group.validate_member(member_id, instance_id)
                except GroupError as exc:
                    results.append(exc.error)
                    continue
            group.remove(member_id)
            removed = True
            results.append(ErrorCode.none)
            self._background(self.store.member_left(group_id, member_id))
            log.info("group %s: member %s (instance %s) left", group_id, member_id, instance_id)
        if group is not None:
            if removed:
                self._rebalance_after_loss(group)
            else:
                self._maybe_complete(group)
        return ErrorCode.none, results

    def _rebalance_after_loss(self, group: Group) -> None:
        if group.state in (STABLE, COMPLETING) and group.members:
            group.prepare_rebalance()
        elif not group.members and group.state != PREPARING:
            group.state, group.leader, group.protocol = EMPTY, None, None
        self._maybe_complete(group)

    def _maybe_complete(self, group: Group) -> None:
        if group.ready_to_complete(time.monotonic()) and group.complete_join():
            log.info("group %s: generation %d, %d member(s), protocol %s, state %s", group.group_id,
                     group.generation, len(group.members), group.protocol, group.state)

    def _on_stable(self, group: Group) -> None:
        owners = {}
        if group.protocol_type == "consumer":
            for m in group.members.values():
                for tp in assignment_partitions(m.assignment):
                    owners[tp] = m.member_id
        self._background(self.store.owners(group.group_id, owners))

    async def _tick(self) -> None:
        while True:
            await asyncio.sleep(TICK_S)
            try:
                self._expire(time.monotonic())
            except Exception:  # noqa: BLE001 (one bad group must not end the expiry of all the others)
                log.exception("group coordinator: session expiry failed")

    def _expire(self, now: float) -> None:
        for group in list(self.groups.values()):
            expired = group.expired(now)
            for member_id in expired:
                group.remove(member_id)
                self._background(self.store.member_left(group.group_id, member_id))
                log.info("group %s: member %s expired (session timeout)", group.group_id, member_id)
            if expired:
                self._rebalance_after_loss(group)
            self._maybe_complete(group)
        timeout = self.consumer_session_ms
        brokers = tuple(sorted(self.broker.cluster.metadata.brokers)) if self.broker.cluster is not None else ()
        if brokers != self._brokers_seen:  # coordinators move: what another broker stored may be ours now
            self._brokers_seen = brokers
            self._absent.clear()
        for group in list(self.consumer_groups.values()):
            if self.coordinator_id(group.group_id) != self.broker.node_id:
                self._forget(group.group_id, GroupError(ErrorCode.not_coordinator))  # run elsewhere, from the store
                continue
            gone = group.expire(now, timeout)
            for member_id in gone:
                log.info("consumer group %s: member %s expired (session timeout)", group.group_id, member_id)
            if gone:  # (heartbeats store their own changes: no snapshot of every group every tick)
                self._persist(group)
            if not group.members:
                del self.consumer_groups[group.group_id]  # its offsets stay in the store; "gone" is being written
                self._saved.pop(group.group_id, None)

    def _background(self, coro) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        task.add_done_callback(lambda t: t.cancelled() or t.exception() is None or
                               log.warning("group registry write failed: %s", t.exception()))

    # ---- offsets ----------------------------------------------------------------------------------------------
    async def _offsets(self, group_id: str) -> dict[tuple[str, int], tuple[int, str]]:
        if group_id not in self.offsets:
            self.offsets[group_id] = await self.store.load(group_id)
        return self.offsets[group_id]

    async def load_for_commit(self, group_id: str) -> ErrorCode:
        """A commit to a "consumer"-protocol group another coordinator ran is checked against its state."""
        classic = self.groups.get(group_id)
        if classic is not None and classic.members:
            return ErrorCode.none
        try:
            self.check(group_id)
            await self.consumer_group(group_id)
        except (GroupError, HeartbeatError) as exc:
            return exc.error
        return ErrorCode.none

    def check_committer(self, group_id: str, member_id: str, generation: int,
                        instance_id: str | None) -> tuple[ErrorCode, Group | None]:
        """The checks an OffsetCommit and a TxnOffsetCommit share: this broker coordinates the group, and a commit
        that names a member or generation names the current ones (UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION,
        FENCED_INSTANCE_ID). Returns (error, the group if it exists)."""
        try:
            self.check(group_id)
        except GroupError as exc:
            return exc.error, None
        modern = self.consumer_groups.get(group_id)
        if modern is not None and modern.members and (generation >= 0 or member_id):
            return modern.check_commit(member_id, generation), None  # the generation is the member epoch
        group = self.groups.get(group_id)
        if generation >= 0 or member_id or instance_id is not None:
            if group is None:
                return (ErrorCode.unknown_member_id if member_id else ErrorCode.illegal_generation), None
            try:
                group.check_member(member_id, generation, instance_id)
            except GroupError as exc:
                return exc.error, group
        return ErrorCode.none, group

    async def commit(self, group_id: str, member_id: str, generation: int,
                     offsets: dict[tuple[str, int], tuple[int, str]], instance_id: str | None = None,
                     api_version: int = 9) -> ErrorCode:
        error = await self.load_for_commit(group_id)
        modern = self.consumer_groups.get(group_id)
        if error == ErrorCode.none and api_version < 9 and modern is not None and member_id in modern.members:
            # Kafka's ConsumerGroup.validateOffsetCommit: a member of the "consumer" protocol commits with v9+
            # (its member epoch is the generation), checked after the member is known and before its epoch
            return ErrorCode.unsupported_version
        if error == ErrorCode.none:
            error, group = self.check_committer(group_id, member_id, generation, instance_id)
        if error != ErrorCode.none:
            return error
        modern = self.consumer_groups.get(group_id)
        if modern is not None and modern.members:
            if not (generation >= 0 or member_id):
                return ErrorCode.unknown_member_id  # a simple commit while live members own the group
            modern.members[member_id].last_heartbeat = time.monotonic()
        elif generation >= 0 or member_id or instance_id is not None:
            if group.state == COMPLETING:
                return ErrorCode.rebalance_in_progress
            group.members[member_id].last_heartbeat = time.monotonic()
        elif group is not None and group.members:
            return ErrorCode.unknown_member_id  # a simple (generation -1) commit while a live group owns it
        await self._offsets(group_id)
        site = f"offset commits to {getattr(self.store, 'path', 'ZooKeeper')}"
        try:
            await self.store.commit(group_id, offsets)
        except OSError as exc:  # standalone: the offsets file on a full disk. Kafka's answer: retriable
            incidents.failed(site, exc, group_id)
            return ErrorCode.not_coordinator
        if incidents.any:
            incidents.succeeded(site)
        self.offsets[group_id].update(offsets)
        return ErrorCode.none

    async def fetch_offsets(self, group_id: str, partitions: list[tuple[str, int]] | None
                            ) -> tuple[ErrorCode, dict[tuple[str, int], tuple[int, str]]]:
        try:
            self.check(group_id)
        except GroupError as exc:
            return exc.error, {}
        committed = await self._offsets(group_id)
        if partitions is None:
            return ErrorCode.none, dict(committed)
        return ErrorCode.none, {tp: committed.get(tp, (-1, "")) for tp in partitions}

    def describe(self, group_id: str) -> tuple[ErrorCode, Group | ConsumerGroup | None]:
        """The group for DescribeGroups: a classic one, or one on the "consumer" protocol while it has members."""
        try:
            self.check(group_id)
        except GroupError as exc:
            return exc.error, None
        modern = self.consumer_groups.get(group_id)
        if modern is not None and modern.members:
            return ErrorCode.none, modern
        return ErrorCode.none, self.groups.get(group_id)

    async def has_offsets(self, group_id: str) -> bool:
        """Whether the group has committed offsets (a group without members that Kafka still lists as Empty); an
        unknown group id is not cached."""
        if group_id in self.offsets:
            return bool(self.offsets[group_id])
        return bool(await self.store.load(group_id))

    async def listed(self) -> list[Group]:
        """The groups this broker coordinates: those in memory, plus those known only by their committed offsets
        (after a restart, or committed without joining), as Empty groups."""
        modern = {gid: g for gid, g in self.consumer_groups.items() if g.members}
        out = [g for g in self.groups.values() if g.state != DEAD and g.group_id not in modern]
        out += modern.values()
        for group_id in await self.store.groups():
            if group_id not in self.groups and group_id not in modern \
                    and self.coordinator_id(group_id) == self.broker.node_id:
                out.append(Group(group_id, self.initial_delay_ms))
        return out

    async def delete(self, group_id: str) -> ErrorCode:
        """DeleteGroups for one group, Kafka's rules: only its coordinator deletes it (NOT_COORDINATOR), only when
        it has no members (NON_EMPTY_GROUP); a group neither in memory nor with committed offsets is
        GROUP_ID_NOT_FOUND. Its committed offsets and registries go, so an OffsetFetch afterwards finds none."""
        try:
            self.check(group_id)
        except GroupError as exc:
            return exc.error
        try:  # a "consumer" group another coordinator ran is read first: live members there keep it
            modern = await self.consumer_group(group_id)
        except HeartbeatError as exc:
            return exc.error
        if modern is not None and modern.members:
            return ErrorCode.non_empty_group
        group = self.groups.get(group_id)
        if group is not None and group.state != DEAD:
            if group.state != EMPTY or group.members:
                return ErrorCode.non_empty_group
        elif not await self.has_offsets(group_id):
            return ErrorCode.group_id_not_found
        group = self.groups.get(group_id)  # again: a join may have arrived while the offsets were read
        modern = self.consumer_groups.get(group_id)
        if (group is not None and group.members) or (modern is not None and modern.members):
            return ErrorCode.non_empty_group
        self._forget(group_id)
        self.groups.pop(group_id, None)
        self.offsets.pop(group_id, None)
        site = f"group deletions in {getattr(self.store, 'path', 'ZooKeeper')}"
        try:
            writer = self._saving.get(group_id)
            if writer is not None:  # a write under way must not land after the deletion
                await asyncio.shield(writer)
            await self.store.save_consumer_group(group_id, None)
            await self.store.delete(group_id)
        except StaleGroupState:  # another coordinator stored the group meanwhile: it is not ours to delete
            return ErrorCode.not_coordinator
        except OSError as exc:  # standalone: the offsets file on a full disk
            incidents.failed(site, exc, group_id)
            return ErrorCode.not_coordinator
        if incidents.any:
            incidents.succeeded(site)
        self.offsets.pop(group_id, None)  # a fetch during the store's write may have cached the old offsets
        log.info("group %s deleted", group_id)
        return ErrorCode.none
