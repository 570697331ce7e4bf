"""The controller: one broker at a time, elected by creating the ephemeral ``/controller`` znode first.

Each new controller increments ``/controller_epoch``; every partition state it writes is a ZooKeeper
transaction that also checks the epoch znode's version, so a controller that lost its session (and was
replaced) cannot overwrite the new one's decisions. Whenever brokers come or go, topics appear, a
reassignment is requested, or periodically, it reconciles every partition:

- a new partition gets its first live assigned replica as leader and the live replicas as ISR;
- a partition whose leader is gone gets the first live replica of its ISR, in assignment order (no unclean
  election unless ``unclean.leader.election.enable``: the topic's config, else the broker's); with none left it
  goes offline (leader -1);
- dead brokers leave the ISR of partitions whose leader lives;
- the preferred (first assigned) replica gets leadership back when it is in the ISR
  (``auto.leader.rebalance.enable``, every ``leader.imbalance.check.interval.seconds``);
- a reassignment adds the new replicas, waits until they are in the ISR, then drops the old ones.

Brokers learn the outcome from the state znodes (see metadata_cache).
"""

from __future__ import annotations

import asyncio
import logging

from broker.cluster import znodes
from broker.cluster.zk import Zk
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

log = logging.getLogger(__name__)


class Controller:
    def __init__(self, broker_id: int, zk: Zk, config, on_elected=lambda: None):
        self.broker_id = broker_id
        self.zk = zk
        self.config = config
        self.on_elected = on_elected  # called as soon as this broker has won an election
        self.active = False
        self.stopped = False  # a stopping broker never runs for controller again
        self.epoch = -1
        self._epoch_version = -1
        self._dirty = asyncio.Event()
        # one decision pass at a time: reconciling, an admin's election, an admin's reassignment (Kafka's controller
        # is one event thread); a pass must not write back what it read before another pass's change
        self.lock = asyncio.Lock()
        self._rebalance_due = False
        self._tasks: list[asyncio.Task] = []
        self._watching = False
        self._watched_topics: set[str] = set()
        self._owners: dict[int, int] = {}

    async def start(self) -> None:
        await self.zk.watch_data(znodes.CONTROLLER, self._on_controller_node)
        self.zk.on_new_session(lambda: asyncio.get_running_loop().create_task(self._elect()))

    def _on_controller_node(self, data: bytes | None, _stat) -> None:
        if data is None:
            if not self.stopped:
                asyncio.get_running_loop().create_task(self._elect())
        elif znodes.decode_controller(data) != self.broker_id and self.active:
            self._resign("another broker is controller now")

    async def _elect(self) -> None:
        if self.stopped:
            return
        try:
            await self.zk.call(self.zk.client.create, znodes.CONTROLLER, znodes.encode_controller(self.broker_id),
                               ephemeral=True)
        except NodeExistsError:
            return
        except Exception:
            log.exception("controller election")
            return
        try:
            await self._bump_epoch()
        except Exception:
            log.exception("incrementing the controller epoch")
            return
        if self.stopped:  # stop() came while the epoch was written: our session's end hands it on
            return
        self.active = True
        log.info("broker %d is the controller (epoch %d)", self.broker_id, self.epoch)
        self.on_elected()
        if not self._watching:
            try:
                await self.zk.watch_children(znodes.BROKER_IDS, lambda _c: self._kick())
                await self.zk.watch_children(znodes.TOPICS, self._on_topics)
                await self.zk.ensure("/admin")
                await self.zk.watch_data(znodes.REASSIGN, lambda _d, _s: self._kick())
                self._watching = True
            except Exception as exc:  # noqa: BLE001 (the session's end, or a new session, elects again)
                if self.stopped:
                    return
                log.warning("controller watches: %s; reconciling periodically until the next election", exc)
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(self._reconcile_loop()), loop.create_task(self._rebalance_timer())]
        self._kick()

    async def _bump_epoch(self) -> None:
        while True:
            data, stat = await self.zk.get_or_none(znodes.CONTROLLER_EPOCH)
            try:
                if data is None:
                    await self.zk.call(self.zk.client.create, znodes.CONTROLLER_EPOCH, b"1")
                    self.epoch, self._epoch_version = 1, 0
                else:
                    epoch = int(data) + 1
                    new = await self.zk.call(self.zk.client.set, znodes.CONTROLLER_EPOCH, str(epoch).encode(),
                                             version=stat.version)
                    self.epoch, self._epoch_version = epoch, new.version
                return
            except (NodeExistsError, BadVersionError):
                continue  # another controller raced us; it will be fenced by the version check

    def _resign(self, why: str) -> None:
        log.info("broker %d resigns as controller: %s", self.broker_id, why)
        self.active = False
        for task in self._tasks:
            task.cancel()
        self._tasks = []

    async def stop(self) -> None:
        self.stopped = True
        if self.active:
            self._resign("shutting down")

    def _on_topics(self, children: list[str]) -> None:
        for topic in set(children) - self._watched_topics:
            self._watched_topics.add(topic)
            asyncio.get_running_loop().create_task(
                self.zk.watch_data(znodes.topic_path(topic), lambda _d, _s: self._kick()))
            # a topic's configs may enable unclean election: Kafka's controller acts on it at once
            asyncio.get_running_loop().create_task(
                self.zk.watch_data(znodes.config_path(topic), lambda _d, _s: self._kick()))
        self._watched_topics &= set(children)
        self._kick()

    def _kick(self) -> None:
        self._dirty.set()

    async def _rebalance_timer(self) -> None:
        interval = self.config["leader.imbalance.check.interval.seconds"]
        while self.config["auto.leader.rebalance.enable"]:
            await asyncio.sleep(interval)
            self._rebalance_due = True
            self._kick()

    async def _reconcile_loop(self) -> None:
        while self.active:
            await self._dirty.wait()
            self._dirty.clear()
            try:
                await self.reconcile()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("controller reconcile failed; retrying")
                await asyncio.sleep(1)
                self._kick()

    # ---- decisions ----------------------------------------------------------------------------------------------
    async def reconcile(self) -> None:
        async with self.lock:
            await self._reconcile()

    async def _reconcile(self) -> None:
        rebalance, self._rebalance_due = self._rebalance_due, False
        live = await self._live_brokers()
        reassign = znodes.decode_reassignment((await self.zk.get_or_none(znodes.REASSIGN))[0])
        pending_reassign = dict(reassign)
        for topic in await self.zk.children(znodes.TOPICS):
            data, topic_stat = await self.zk.get_or_none(znodes.topic_path(topic))
            if data is None:
                continue
            assignment = znodes.decode_assignment(data)
            unclean = await self._unclean_allowed(topic)
            before = znodes.encode_assignment(assignment)
            for p, replicas in sorted(assignment.partitions.items()):
                raw, stat = await self.zk.get_or_none(znodes.state_path(topic, p))
                state = znodes.decode_state(raw, stat.version) if raw is not None else None
                target = reassign.get((topic, p))
                if target is not None and state is not None:
                    replicas, done = self._reassign_step(assignment, p, target, state, live)
                    if done:
                        pending_reassign.pop((topic, p))
                new = self.decide(state, replicas, live, rebalance, unclean)
                if new is not None:
                    await self._write_state(topic, p, new, create=state is None)
            if znodes.encode_assignment(assignment) != before:
                await self.zk.call(self.zk.client.set, znodes.topic_path(topic), znodes.encode_assignment(assignment),
                                   version=topic_stat.version)
        if reassign and pending_reassign != reassign:
            if pending_reassign:
                await self.zk.call(self.zk.client.set, znodes.REASSIGN, znodes.encode_reassignment(pending_reassign))
            else:
                await self.zk.call(self.zk.client.delete, znodes.REASSIGN)
        if pending_reassign:  # replicas are catching up: look again soon
            asyncio.get_running_loop().call_later(1.0, self._kick)

    async def _live_brokers(self) -> set[int]:
        """Registered brokers, minus those that restarted since the last look (their registration belongs to
        a new ZooKeeper session): for this pass they count as failed, so they lose leadership and leave the
        ISR, and rejoin as followers once caught up (a restarted broker may have lost unflushed data)."""
        live = set()
        owners = {}
        for child in await self.zk.children(znodes.BROKER_IDS):
            stat = await self.zk.call(self.zk.client.exists, znodes.broker_path(int(child)))
            if stat is not None:
                owners[int(child)] = stat.ephemeralOwner
                live.add(int(child))
        bounced = {b for b in live if b in self._owners and self._owners[b] != owners[b]}
        self._owners = owners
        if bounced:
            log.info("broker(s) %s restarted: treated as failed, then as new followers", sorted(bounced))
            self._kick()
        return live - bounced

    def _reassign_step(self, assignment: znodes.TopicAssignment, p: int, target: list[int],
                       state: znodes.PartitionState, live: set[int]) -> tuple[list[int], bool]:
        """Kafka's two phases: replicas = old ∪ new until every new replica is in the ISR, then = new."""
        if all(r in state.isr for r in target):
            assignment.settle(p, target)
            return list(target), True
        return assignment.move_towards(p, target), False

    async def _unclean_allowed(self, topic: str) -> bool:
        """The topic's ``unclean.leader.election.enable`` (``/config/topics/<topic>``), else the broker's."""
        configs = znodes.decode_topic_config((await self.zk.get_or_none(znodes.config_path(topic)))[0])
        value = configs.get("unclean.leader.election.enable")
        return self.config["unclean.leader.election.enable"] if value is None else value.strip().lower() == "true"

    def decide(self, state: znodes.PartitionState | None, replicas: list[int], live: set[int],
               rebalance: bool, unclean: bool | None = None) -> znodes.PartitionState | None:
        """The partition's next state, or None when it stays as it is. ``unclean``: whether a replica outside
        the ISR may lead (None: the broker's ``unclean.leader.election.enable``)."""
        if unclean is None:
            unclean = self.config["unclean.leader.election.enable"]
        ce = self.epoch
        alive = [r for r in replicas if r in live]
        if state is None:
            if not alive:
                return None
            return znodes.PartitionState(alive[0], 0, tuple(alive), ce)
        isr_live = tuple(r for r in replicas if r in state.isr and r in live)
        if state.leader in live and state.leader in replicas:
            if rebalance and replicas[0] != state.leader and replicas[0] in isr_live:
                return state.with_(leader=replicas[0], leader_epoch=state.leader_epoch + 1, isr=isr_live,
                                   controller_epoch=ce)
            if set(isr_live) != set(state.isr):
                return state.with_(isr=isr_live, controller_epoch=ce)
            return None
        candidates = [r for r in replicas if r in isr_live]
        if candidates:
            return state.with_(leader=candidates[0], leader_epoch=state.leader_epoch + 1, isr=isr_live,
                               controller_epoch=ce)
        if unclean and alive:
            log.warning("unclean leader election: broker %d, outside the ISR %s", alive[0], state.isr)
            return state.with_(leader=alive[0], leader_epoch=state.leader_epoch + 1, isr=(alive[0],),
                               controller_epoch=ce)
        if state.leader != -1:  # offline; keep the last ISR so one of them can lead when it returns
            return state.with_(leader=-1, leader_epoch=state.leader_epoch + 1, controller_epoch=ce)
        return None

    # ---- ElectLeaders (an admin's request) ------------------------------------------------------------------
    async def elect(self, partitions: list[tuple[str, int]] | None, unclean: bool
                    ) -> dict[tuple[str, int], tuple[str, int]]:
        """Kafka's ``electLeaders`` on the active controller: per partition (None: every partition) the outcome's
        error name and the leader elected (-1 for none). PREFERRED: the first assigned replica leads if it is live
        and in the ISR (PREFERRED_LEADER_NOT_AVAILABLE otherwise, ELECTION_NOT_NEEDED when it leads already).
        UNCLEAN: only a partition without a live leader gets one, from the ISR first, else any live replica
        (ELIGIBLE_LEADERS_NOT_AVAILABLE when none lives). Asked for all partitions, ELECTION_NOT_NEEDED ones are
        left out of the answer, as in Kafka."""
        async with self.lock:
            return await self._elect_leaders(partitions, unclean)

    async def _elect_leaders(self, partitions: list[tuple[str, int]] | None, unclean: bool
                             ) -> dict[tuple[str, int], tuple[str, int]]:
        live = await self._live_brokers()
        wanted = partitions
        if wanted is None:
            wanted = []
            for topic in await self.zk.children(znodes.TOPICS):
                data, _ = await self.zk.get_or_none(znodes.topic_path(topic))
                if data is not None:
                    wanted += [(topic, p) for p in sorted(znodes.decode_assignment(data).partitions)]
        out = {}
        for topic, p in wanted:
            for _attempt in range(3):  # a state changed meanwhile (an ISR update) is read again
                outcome, leader = await self._elect_one(topic, p, live, unclean)
                if outcome != "retry":
                    break
            else:
                outcome, leader = "not_controller" if not self.active else "request_timed_out", -1
            if partitions is not None or outcome != "election_not_needed":
                out[(topic, p)] = (outcome, leader)
        return out

    async def _elect_one(self, topic: str, p: int, live: set[int], unclean: bool) -> tuple[str, int]:
        data, _ = await self.zk.get_or_none(znodes.topic_path(topic))
        replicas = znodes.decode_assignment(data).partitions.get(p) if data is not None else None
        raw, stat = await self.zk.get_or_none(znodes.state_path(topic, p))
        if replicas is None or raw is None:
            return "unknown_topic_or_partition", -1
        state = znodes.decode_state(raw, stat.version)
        isr_live = tuple(r for r in replicas if r in state.isr and r in live)
        if not unclean:
            if state.leader == replicas[0]:
                return "election_not_needed", state.leader
            if replicas[0] not in isr_live:
                return "preferred_leader_not_available", -1
            new = state.with_(leader=replicas[0], leader_epoch=state.leader_epoch + 1, isr=isr_live,
                              controller_epoch=self.epoch)
        else:
            if state.leader in live and state.leader in replicas:
                return "election_not_needed", state.leader
            alive = [r for r in replicas if r in live]
            if not alive:
                return "eligible_leaders_not_available", -1
            chosen = isr_live[0] if isr_live else alive[0]
            new = state.with_(leader=chosen, leader_epoch=state.leader_epoch + 1,
                              isr=isr_live or (chosen,), controller_epoch=self.epoch)
        if not await self._write_state(topic, p, new, create=False):
            return "retry", -1
        return "none", new.leader

    async def _write_state(self, topic: str, p: int, state: znodes.PartitionState, create: bool) -> bool:
        """The partition's new state, written only over the version it was decided from and while this controller's
        epoch stands; False when refused."""
        if create:
            await self.zk.ensure(f"{znodes.partitions_path(topic)}/{p}")
        t = self.zk.client.transaction()
        t.check(znodes.CONTROLLER_EPOCH, self._epoch_version)
        if create:
            t.create(znodes.state_path(topic, p), znodes.encode_state(state))
        else:
            t.set_data(znodes.state_path(topic, p), znodes.encode_state(state), version=state.version)
        results = await self.zk.call(t.commit)
        if isinstance(results[0], (BadVersionError, NoNodeError)):
            self._resign(f"controller epoch {self.epoch} is fenced")
            return False
        if isinstance(results[1], Exception):
            self._kick()  # the leader changed the ISR meanwhile: decide again on fresh state
            return False
        log.info("partition %s-%d: leader %d, epoch %d, isr %s", topic, p, state.leader, state.leader_epoch,
                 list(state.isr))
        return True
