"""Cluster mode of a broker: ZooKeeper session, registration, controller, metadata cache, and the role of this
broker for every partition it hosts (leader or follower), with the follower fetchers, the leader's ISR
maintenance and the high-watermark checkpoint.

Topic admin in cluster mode writes ZooKeeper (assignment + config); the controller and the watches do the rest.
"""

from __future__ import annotations

import asyncio
import logging
import os
import uuid

from broker import limits
from broker.cluster import znodes
from broker.cluster.controller import Controller
from broker.cluster.fetcher import LeaderFetcher
from broker.cluster.metadata_cache import ClusterMetadata
from broker.cluster.partition import FollowerState, Partition
from broker.cluster.placement import PlacementError, assign_new_partitions, assign_replicas
from broker.cluster.zk import Zk
from broker.config import ConfigError
from broker.log.manager import read_checkpoint, try_checkpoint
from broker.metadata.topics import (
    TopicError,
    TopicInfo,
    check_new_partitions,
    validate_topic_configs,
    validate_topic_name,
)
from broker.protocol.messages import ErrorCode
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

log = logging.getLogger(__name__)
HW_CHECKPOINT = "replication-offset-checkpoint"


class ReplicaManager:
    def __init__(self, broker):
        self.broker = broker
        cfg = broker.config
        self.broker_id = broker.node_id
        self.zk = Zk(cfg["zookeeper.connect"], cfg["zookeeper.session.timeout.ms"],
                     cfg["zookeeper.connection.timeout.ms"])
        self.metadata = ClusterMetadata(self.zk, self._on_partition, self._on_topic_deleted,
                                        broker.refresh_log_configs)
        self.controller = Controller(self.broker_id, self.zk, cfg,
                                     on_elected=lambda: self.metadata.controller_elected(self.broker_id))
        self.partitions: dict[tuple[str, int], Partition] = {}
        self.fetchers: dict[int, LeaderFetcher] = {}
        self._tasks: list[asyncio.Task] = []
        self._hw_path = os.path.join(broker.log_dirs[0], HW_CHECKPOINT)
        self.registered = False
        self.stopping = False  # roles are frozen once a stop has begun

    # ---- lifecycle ------------------------------------------------------------------------------------------------
    async def start(self) -> None:
        await self.zk.start()
        await self.zk.ensure(*znodes.PERSISTENT_PATHS)
        await self._adopt_cluster_id()
        self._saved_hw = read_checkpoint(self._hw_path) if os.path.exists(self._hw_path) else {}
        await self.metadata.start()
        await self._register()
        self.zk.on_new_session(self._on_new_session)
        await self.controller.start()
        loop = asyncio.get_running_loop()
        lag_ms = self.broker.config["replica.lag.time.max.ms"]
        self._tasks = [loop.create_task(self.broker._every(lag_ms / 2000, self._shrink_isrs)),
                       loop.create_task(self.broker._every(5.0, self.checkpoint_high_watermarks))]

    async def wait_for_controller(self, timeout: float) -> bool:
        """Until this broker and the controller are both known (this broker's own election included), at most
        ``timeout`` seconds; False when the bound passed first."""
        return await self.metadata.wait_until(lambda: self.metadata.controller_known(self.broker_id), timeout)

    def _on_new_session(self) -> None:
        if not self.stopping:
            asyncio.get_running_loop().create_task(self._register())

    async def _adopt_cluster_id(self) -> None:
        """The cluster id lives in ``/cluster/id``; log dirs of another cluster are refused (as Kafka does)."""
        data, _ = await self.zk.get_or_none(znodes.CLUSTER_ID)
        if data is None:
            try:
                await self.zk.call(self.zk.client.create, znodes.CLUSTER_ID,
                                   znodes.encode_cluster_id(self.broker.cluster_id or uuid.uuid4().hex[:22]),
                                   makepath=True)
            except NodeExistsError:
                pass
            data, _ = await self.zk.get(znodes.CLUSTER_ID)
        cluster_id = znodes.decode_cluster_id(data)
        if self.broker.cluster_id and self.broker.cluster_id != cluster_id:
            raise ConfigError(f"log.dirs belong to cluster {self.broker.cluster_id}, but ZooKeeper "
                              f"{self.broker.config['zookeeper.connect']} holds cluster {cluster_id}")
        self.broker.cluster_id = cluster_id
        self.broker.write_meta(cluster_id)

    async def _register(self) -> None:
        endpoints = self.broker.endpoints()
        host, port = endpoints[self.broker.config.inter_broker_listener]
        info = znodes.BrokerInfo(self.broker_id, host, port, self.broker.config["broker.rack"],
                                 tuple((name, h, p) for name, (h, p) in endpoints.items()))
        path = znodes.broker_path(self.broker_id)
        for _ in range(int(self.broker.config["zookeeper.session.timeout.ms"] / 500) + 2):
            try:
                data = znodes.encode_broker(info, self.broker.config["listener.security.protocol.map"])
                await self.zk.call(self.zk.client.create, path, data, ephemeral=True)
                log.info("registered broker %d at %s:%d in ZooKeeper", self.broker_id, host, port)
                if not self.registered:  # roles wait for registration: a restarted broker must not act on
                    self.registered = True  # what it led before until its previous session has ended
                    for topic, index in list(self.metadata.states):
                        self._on_partition(topic, index)
                return
            except NodeExistsError:  # our previous session's node, until ZooKeeper expires it
                await asyncio.sleep(0.5)
        raise RuntimeError(f"broker id {self.broker_id} is registered by another live broker")

    async def stop(self, timeout: float) -> bool:
        """Resign as controller, stop the fetchers, checkpoint high watermarks, close the ZooKeeper session (which
        removes the registration); each step bounded by ``timeout`` seconds. False if the fetchers overran."""
        self.stopping = True
        for task in self._tasks:
            task.cancel()
        await self.controller.stop()
        stopped = await asyncio.gather(*(f.stop(timeout) for f in list(self.fetchers.values())))
        self.checkpoint_high_watermarks()
        await self.zk.stop(timeout)
        return all(stopped)

    def checkpoint_high_watermarks(self) -> None:
        """Every 5 s and at stop; a write the disk refuses is reported (rate-limited) and retried next time."""
        entries = {key: p.log.high_watermark for key, p in self.partitions.items()}
        if entries:
            try_checkpoint(self._hw_path, entries)

    # ---- roles ----------------------------------------------------------------------------------------------------
    def _on_partition(self, topic: str, index: int) -> None:
        if not self.registered or self.stopping:
            return
        state = self.metadata.state(topic, index)
        replicas = self.metadata.replicas(topic, index)
        key = (topic, index)
        part = self.partitions.get(key)
        if self.broker_id not in replicas:
            if part is not None and replicas:  # reassigned away: stop, then delete the local copy
                self._stop_following(key)
                self.partitions.pop(key).fail_waiters(ErrorCode.not_leader_or_follower)
                self.broker.logs.delete(topic, index)
                log.info("%s-%d is no longer assigned here: local log deleted", topic, index)
            return
        if part is None:
            if self.broker.logs.is_offline(topic, index):
                return  # its log failed to load: not hosted here (other replicas serve it)
            try:
                plog = self.broker.logs.get(topic, index) or self.broker.logs.create(topic, index)
            except OSError as exc:  # its files cannot be created (a full disk): not hosted until the next change
                log.error("cannot create the log of %s-%d here: %s", topic, index, exc)
                return
            part = Partition(topic, index, plog, self.broker_id)
            saved = self._saved_hw.get(key)
            plog.high_watermark = min(saved, plog.log_end_offset) if saved is not None else plog.log_start_offset
            self.partitions[key] = part
        if state is None:
            return
        if state.leader == self.broker_id:
            if not part.is_leader or part.leader_epoch != state.leader_epoch:
                self._stop_following(key)
                part.become_leader(state.leader_epoch, state.isr, replicas, state.version, state.controller_epoch)
                part.zk_created = state.created
                log.info("leader of %s-%d (epoch %d, isr %s)", topic, index, state.leader_epoch, list(state.isr))
                self.broker.notify_append(topic, index)
            else:
                if state.age >= (part.zk_created, part.zk_version):
                    self.broker.metrics.isr_changed(part.isr, state.isr)  # the controller's (a broker died); ours: 0
                    part.isr, part.zk_version, part.zk_created = state.isr, state.version, state.created
                else:
                    # older than the state this leader wrote itself (a watch's read that reached the loop after
                    # this broker's own write): applying it would bring back an old ISR, and the version every
                    # later proposal names would be stale, refused for ever with nothing new to watch
                    log.debug("%s-%d: state %s is older than %s: its ISR is ignored", topic, index, state.age,
                              (part.zk_created, part.zk_version))
                part.replicas = replicas
                for r in replicas:
                    if r != self.broker_id:
                        part.followers.setdefault(r, FollowerState())
                if part.maybe_advance_high_watermark():  # a smaller ISR: consumers waiting can read more now
                    self.broker.notify_append(topic, index)
        else:
            changed = part.is_leader or part.leader_id != state.leader or part.leader_epoch != state.leader_epoch
            part.become_follower(state.leader, state.leader_epoch, state.isr, replicas, state.version,
                                 state.controller_epoch)
            part.zk_created = state.created
            if changed:
                self._stop_following(key)
                if state.leader >= 0:
                    self._fetcher(state.leader).add(part)
                log.info("follower of %s-%d (leader %d, epoch %d)", topic, index, state.leader, state.leader_epoch)

    def _fetcher(self, leader_id: int) -> LeaderFetcher:
        fetcher = self.fetchers.get(leader_id)
        if fetcher is None:
            fetcher = self.fetchers[leader_id] = LeaderFetcher(self, leader_id)
        return fetcher

    def _stop_following(self, key: tuple[str, int]) -> None:
        for fetcher in self.fetchers.values():
            fetcher.remove(key)

    def _on_topic_deleted(self, topic: str) -> None:
        for key in [k for k in self.partitions if k[0] == topic]:
            self._stop_following(key)
            self.partitions.pop(key).fail_waiters(ErrorCode.not_leader_or_follower)
        self.broker.logs.delete_topic(topic)
        log.info("deleted the local logs of topic %s", topic)

    def partition(self, topic: str, index: int) -> Partition | None:
        return self.partitions.get((topic, index))

    # ---- ISR -----------------------------------------------------------------------------------------------------
    async def propose_isr(self, part: Partition, isr: tuple[int, ...]) -> bool:
        """Write a new ISR for a partition this broker leads (conditional on the state znode's version)."""
        if part.isr_update_pending or not part.is_leader:
            return False
        part.isr_update_pending = True
        try:
            state = znodes.PartitionState(self.broker_id, part.leader_epoch, isr, part.controller_epoch)
            stat = await self.zk.call(self.zk.client.set, znodes.state_path(part.topic, part.index),
                                      znodes.encode_state(state), version=part.zk_version)
            # unless a newer state reached this partition meanwhile (the controller's, through the watch)
            if part.is_leader and part.leader_epoch == state.leader_epoch \
                    and (stat.czxid, stat.version) > (part.zk_created, part.zk_version):
                self.broker.metrics.isr_changed(part.isr, isr)
                part.isr, part.zk_version, part.zk_created = isr, stat.version, stat.czxid
                part.maybe_advance_high_watermark()
                self.broker.notify_append(part.topic, part.index)
                log.info("%s-%d: ISR is now %s", part.topic, part.index, list(isr))
            return True
        except (BadVersionError, NoNodeError):
            return False  # the controller changed the state; its watch brings the new one
        finally:
            part.isr_update_pending = False

    async def _shrink_isrs(self) -> None:
        lag = self.broker.config["replica.lag.time.max.ms"]
        for part in list(self.partitions.values()):
            if part.is_leader:
                smaller = part.lagging(lag)
                if smaller is not None:
                    await self.propose_isr(part, smaller)

    def follower_fetched(self, part: Partition, replica_id: int, fetch_offset: int, log_start: int = -1) -> None:
        """Fetch handler hook: a follower's progress; may advance the high watermark or grow the ISR."""
        before = part.log.high_watermark
        larger = part.record_follower_fetch(replica_id, fetch_offset, log_start)
        if larger is not None:
            asyncio.get_running_loop().create_task(self.propose_isr(part, larger))
        if part.log.high_watermark != before:  # consumers long-polling this partition can now read more
            self.broker.notify_append(part.topic, part.index)

    async def reserve_producer_ids(self, size: int) -> tuple[int, int]:
        """[start, end) of producer ids for this broker alone, from ``/latest_producer_id_block``."""
        while True:
            data, stat = await self.zk.get_or_none(znodes.PRODUCER_ID_BLOCK)
            start = znodes.decode_producer_id_block(data)
            block = znodes.encode_producer_id_block(self.broker_id, start, start + size)
            try:
                if data is None:
                    await self.zk.call(self.zk.client.create, znodes.PRODUCER_ID_BLOCK, block)
                else:
                    await self.zk.call(self.zk.client.set, znodes.PRODUCER_ID_BLOCK, block, version=stat.version)
                return start, start + size
            except (NodeExistsError, BadVersionError):
                continue

    # ---- topic admin ------------------------------------------------------------------------------------------------
    async def create_topic(self, name: str, partitions: int, replication_factor: int, configs: dict[str, str],
                           validate_only: bool = False, assignment: dict[int, list[int]] | None = None) -> TopicInfo:
        validate_topic_name(name)
        if name in self.metadata.topics:
            raise TopicError("topic_already_exists", f"topic {name!r} already exists")
        validate_topic_configs(configs)
        live = sorted(self.metadata.brokers)
        if assignment is None:
            if replication_factor == -1:
                replication_factor = self.broker.config["default.replication.factor"]
            if partitions == -1:
                partitions = self.broker.config["num.partitions"]
            if live and partitions > 0 and replication_factor > 0:  # refuse absurd sizes before placing them
                share = -(-partitions * replication_factor // len(live))
                limit = limits.partition_limit(self.broker.config["max.broker.partitions"])
                if share > limit:
                    raise TopicError("policy_violation", f"{partitions} partitions x {replication_factor} replicas "
                                                         f"exceed max.broker.partitions={limit} on every broker")
            try:
                assignment = assign_replicas(live, partitions, replication_factor)
            except PlacementError as exc:
                code = "invalid_replication_factor" if "replication" in str(exc) else "invalid_partitions"
                raise TopicError(code, str(exc)) from None
        added: dict[int, int] = {}
        for replicas in assignment.values():
            for r in replicas:
                added[r] = added.get(r, 0) + 1
        self.broker.check_partition_limit(added)
        info = TopicInfo(name, len(assignment), uuid.uuid4(), dict(configs), len(assignment[0]))
        if validate_only:
            return info
        if configs:
            await self.zk.call(self.zk.client.create, znodes.config_path(name), znodes.encode_topic_config(configs),
                               makepath=True)
        try:
            await self.zk.call(self.zk.client.create, znodes.topic_path(name),
                               znodes.encode_assignment(znodes.TopicAssignment(info.topic_id, assignment)),
                               makepath=True)
        except NodeExistsError:
            raise TopicError("topic_already_exists", f"topic {name!r} already exists") from None
        await self.metadata.wait_until(lambda: self.metadata.partition_ready(name), 10)
        log.info("created topic %s: %s", name, assignment)
        return info

    async def create_partitions(self, name: str, count: int, assignments: list[list[int]] | None,
                                validate_only: bool = False) -> list[int]:
        """Add partitions to the topic's assignment znode (a write conditional on its version: a concurrent
        CreatePartitions or the controller's reassignment step makes it start over on fresh data). The
        controller's watch on that znode elects the new partitions' leaders; the brokers' watches create the
        logs. Refused while a reassignment of the topic is under way (Kafka: REASSIGNMENT_IN_PROGRESS)."""
        path = znodes.topic_path(name)
        while True:
            data, stat = await self.zk.get_or_none(path)
            if data is None:
                raise TopicError("unknown_topic_or_partition", f"The topic '{name}' does not exist.")
            assignment = znodes.decode_assignment(data)
            pending = znodes.decode_reassignment((await self.zk.get_or_none(znodes.REASSIGN))[0])
            if assignment.adding or assignment.removing or any(t == name for t, _ in pending):
                raise TopicError("reassignment_in_progress",
                                 f"A partition reassignment is in progress for the topic '{name}'.")
            current = len(assignment.partitions)
            live = sorted(self.metadata.brokers)
            rf = len(assignment.partitions.get(0, ()))
            new = check_new_partitions(current, count, assignments, rf, set(live))
            if new is None:
                limit = limits.partition_limit(self.broker.config["max.broker.partitions"])
                if live and -(-(count - current) * rf // len(live)) > limit:  # refuse absurd sizes before placing
                    raise TopicError("policy_violation", f"{count - current} new partitions x {rf} replicas "
                                                         f"exceed max.broker.partitions={limit} on every broker")
                try:
                    new = assign_new_partitions(live, assignment.partitions, count)
                except PlacementError as exc:
                    raise TopicError("invalid_replication_factor", str(exc)) from None
            added: dict[int, int] = {}
            for replicas in new.values():
                for r in replicas:
                    added[r] = added.get(r, 0) + 1
            self.broker.check_partition_limit(added)
            if validate_only:
                return []
            assignment.partitions.update(new)
            try:
                await self.zk.call(self.zk.client.set, path, znodes.encode_assignment(assignment),
                                   version=stat.version)
            except BadVersionError:
                continue
            except NoNodeError:
                raise TopicError("unknown_topic_or_partition", f"The topic '{name}' does not exist.") from None
            log.info("topic %s grew from %d to %d partitions: %s", name, current, count, new)
            return sorted(new)

    async def set_topic_configs(self, name: str, configs: dict[str, str]) -> None:
        path = znodes.config_path(name)
        data = znodes.encode_topic_config(configs)
        try:
            await self.zk.call(self.zk.client.set, path, data)
        except NoNodeError:
            await self.zk.call(self.zk.client.create, path, data, makepath=True)
        await self.metadata.wait_until(lambda: self.metadata.topics[name].configs == configs, 10)

    async def delete_topic(self, name: str) -> None:
        if name not in self.metadata.topics:
            raise TopicError("unknown_topic_or_partition", f"topic {name!r} does not exist")
        for path in (znodes.topic_path(name), znodes.config_path(name)):
            try:
                await self.zk.call(self.zk.client.delete, path, recursive=True)
            except NoNodeError:
                pass
        await self.metadata.wait_until(lambda: name not in self.metadata.topics, 10)
