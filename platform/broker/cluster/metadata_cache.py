"""What every broker knows of the cluster, kept current by ZooKeeper watches: live brokers, the controller,
topics with their replica assignment and configs, and each partition's leader / epoch / ISR.

Brokers learn leadership changes from the partition state znodes the controller writes (watches deliver them
within milliseconds), not from controller RPCs. The cache offers the TopicStore interface (``topics``, ``get``,
``by_id``) so the request handlers serve standalone and cluster mode alike.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from typing import Callable

from broker.cluster import znodes
from broker.cluster.zk import Zk
from broker.metadata.topics import TopicInfo

log = logging.getLogger(__name__)


class ClusterMetadata:
    def __init__(self, zk: Zk, on_partition: Callable[[str, int], None], on_topic_deleted: Callable[[str], None],
                 on_config: Callable[[str], None] = lambda _t: None):
        self.zk = zk
        self.on_config = on_config
        self.on_partition = on_partition
        self.on_topic_deleted = on_topic_deleted
        self.brokers: dict[int, znodes.BrokerInfo] = {}
        self.controller_id = -1
        self.topics: dict[str, TopicInfo] = {}
        self.assignments: dict[str, znodes.TopicAssignment] = {}
        self.states: dict[tuple[str, int], znodes.PartitionState] = {}
        self._watched_brokers: set[int] = set()
        self._watched_topics: set[str] = set()
        self._watched_states: set[tuple[str, int]] = set()
        self._pending_configs: dict[str, dict[str, str]] = {}
        self._changed = asyncio.Event()
        self._tasks: set[asyncio.Task] = set()

    async def start(self) -> None:
        await self.zk.watch_children(znodes.BROKER_IDS, self._on_broker_ids)
        await self.zk.watch_data(znodes.CONTROLLER, self._on_controller)
        await self.zk.watch_children(znodes.TOPICS, self._on_topic_names)

    # ---- TopicStore interface -------------------------------------------------------------------------------
    def get(self, name: str) -> TopicInfo | None:
        return self.topics.get(name)

    def by_id(self, topic_id: uuid.UUID) -> TopicInfo | None:
        return next((t for t in self.topics.values() if t.topic_id == topic_id), None)

    def replicas(self, topic: str, partition: int) -> list[int]:
        assignment = self.assignments.get(topic)
        return list(assignment.partitions.get(partition, ())) if assignment else []

    def state(self, topic: str, partition: int) -> znodes.PartitionState | None:
        return self.states.get((topic, partition))

    # ---- watch callbacks (on the event loop) ------------------------------------------------------------
    def _spawn(self, coro) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _touch(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    def _on_broker_ids(self, children: list[str]) -> None:
        ids = {int(c) for c in children}
        for gone in set(self.brokers) - ids:
            self.brokers.pop(gone, None)
            log.info("broker %d left the cluster", gone)
        self._watched_brokers &= ids
        for new in ids - self._watched_brokers:
            self._watched_brokers.add(new)
            self._spawn(self.zk.watch_data(znodes.broker_path(new), lambda d, s, b=new: self._on_broker(b, d)))
        self._touch()

    def _on_broker(self, broker_id: int, data: bytes | None) -> None:
        if data is None:
            self.brokers.pop(broker_id, None)
            self._watched_brokers.discard(broker_id)
            self.zk.stop_watch(znodes.broker_path(broker_id))
        else:
            self.brokers[broker_id] = znodes.decode_broker(broker_id, data)
        self._touch()

    def _on_controller(self, data: bytes | None, _stat) -> None:
        self.controller_id = znodes.decode_controller(data)
        self._touch()

    def controller_elected(self, broker_id: int) -> None:
        """This broker has just won the election: name it at once (the /controller watch confirms it)."""
        self.controller_id = broker_id
        self._touch()

    def controller_known(self, broker_id: int) -> bool:
        """A controller is named, and both it and ``broker_id`` are among the live brokers (what a client needs
        to send CreateTopics and friends to the controller)."""
        return self.controller_id >= 0 and self.controller_id in self.brokers and broker_id in self.brokers

    def _on_topic_names(self, children: list[str]) -> None:
        for name in set(children) - self._watched_topics:
            self._watched_topics.add(name)
            self._spawn(self.zk.watch_data(znodes.topic_path(name), lambda d, s, t=name: self._on_assignment(t, d)))
            self._spawn(self.zk.watch_data(znodes.config_path(name), lambda d, s, t=name: self._on_config(t, d)))

    def _on_assignment(self, topic: str, data: bytes | None) -> None:
        if data is None:
            self._forget_topic(topic)
            return
        assignment = znodes.decode_assignment(data)
        self.assignments[topic] = assignment
        info = self.topics.get(topic)
        rf = len(next(iter(assignment.partitions.values()), []))
        pending = None if info else self._pending_configs.pop(topic, None)
        configs = info.configs if info else (pending or {})
        self.topics[topic] = TopicInfo(topic, len(assignment.partitions), assignment.topic_id, configs, rf)
        if pending:  # the configs arrived before the topic: logs already open take them now
            self.on_config(topic)
        for p in assignment.partitions:
            if (topic, p) not in self._watched_states:
                self._watched_states.add((topic, p))
                self._spawn(self.zk.watch_data(znodes.state_path(topic, p),
                                               lambda d, s, t=topic, q=p: self._on_state(t, q, d, s)))
        for p in list(self.states):  # partitions of a topic are never removed, but be safe
            if p[0] == topic and p[1] not in assignment.partitions:
                self.states.pop(p)
        for p in assignment.partitions:
            self.on_partition(topic, p)
        self._touch()

    def _on_config(self, topic: str, data: bytes | None) -> None:
        configs = znodes.decode_topic_config(data)
        info = self.topics.get(topic)
        if info is not None:
            info.configs = configs
            self.on_config(topic)
        else:
            self._pending_configs[topic] = configs
        self._touch()

    def _on_state(self, topic: str, partition: int, data: bytes | None, stat) -> None:
        if data is None:
            self.states.pop((topic, partition), None)
        else:
            self.states[(topic, partition)] = znodes.decode_state(data, stat.version, stat.czxid)
        if topic in self.topics:
            self.on_partition(topic, partition)
        self._touch()

    def _forget_topic(self, topic: str) -> None:
        if topic not in self._watched_topics:
            return
        self._watched_topics.discard(topic)
        self.zk.stop_watch(znodes.topic_path(topic))
        self.zk.stop_watch(znodes.config_path(topic))
        for key in [k for k in self._watched_states if k[0] == topic]:
            self._watched_states.discard(key)
            self.zk.stop_watch(znodes.state_path(*key))
            self.states.pop(key, None)
        self.assignments.pop(topic, None)
        if self.topics.pop(topic, None) is not None:
            self.on_topic_deleted(topic)
        self._touch()

    # ---- waiting ----------------------------------------------------------------------------------------------
    async def wait_until(self, predicate: Callable[[], bool], timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while not predicate():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            try:
                async with asyncio.timeout(remaining):  # not wait_for: it can swallow a cancellation (3.11)
                    await self._changed.wait()
            except asyncio.TimeoutError:
                return predicate()
        return True

    def partition_ready(self, topic: str) -> bool:
        info = self.topics.get(topic)
        return info is not None and all((topic, p) in self.states for p in range(info.partitions))
