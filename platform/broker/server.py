"""A broker process: configuration, topics, partition logs, the Kafka listener and background duties.

Standalone mode (no ``zookeeper.connect``): this broker is the whole cluster, leads every partition, and keeps
topic metadata in its first log dir. Cluster mode: topics, leaders and ISRs live in ZooKeeper and this broker
leads or follows each partition it hosts (:mod:`broker.cluster.replica_manager`). Handlers reach both through
this object's methods.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import uuid

from broker.config import LONG_MAX, BrokerConfig, ConfigError
from broker.groups.coordinator import GroupCoordinator
from broker.txn.coordinator import TransactionCoordinator
from broker.log.cleaner import LogCleaner
from broker.log.dir_mover import LogDirMover
from broker.log.log import LogConfig, PartitionLog
from broker import limits
from broker.log.manager import LogManager
from broker.log.refused_sequences import RefusedSequences
from broker.log.storage_errors import incidents, replace_file
from broker.metadata import topic_configs
from broker.metadata.topics import (
    TopicError,
    TopicInfo,
    TopicStore,
    check_new_partitions,
    validate_topic_configs,
)
from broker.network.server import KafkaListener, MemoryPool, current_listener
from broker.client_quotas.manager import ClientQuotaManager, QuotaWatcher
from broker.fetch_sessions import FetchSessionCache
from broker.metrics import BrokerMetrics
from broker.network.quotas import ConnectionQuotas
from broker.security.acl_authorizer import AclAuthorizer
from broker.protocol import validation
from broker.protocol.messages import ErrorCode
from broker.shutdown import EXIT_GRACE_S, STOP_STEP_TIMEOUT_S, StopSignals, Watchdog

log = logging.getLogger(__name__)

# Kafka's DescribeConfigs config sources.
DYNAMIC_TOPIC_CONFIG, STATIC_BROKER_CONFIG, DEFAULT_CONFIG = 1, 4, 5  # as broker.metadata.topic_configs
CHECKPOINT_INTERVAL_S = 60
CREATE_BATCH = 64  # partitions created between two yields to the event loop
PRODUCER_ID_BLOCK = 1000


def read_meta_properties(log_dir: str) -> dict[str, str]:
    path = os.path.join(log_dir, "meta.properties")
    if not os.path.exists(path):
        return {}
    with open(path) as f:
        return dict(line.split("=", 1) for line in f.read().splitlines() if "=" in line and line[0] != "#")


class Broker:
    def __init__(self, config: BrokerConfig):
        self.config = config
        self.node_id: int = config["broker.id"]
        self.log_dirs: list[str] = [os.path.abspath(d) for d in config["log.dirs"]]
        self.cluster_id = self._init_meta()
        self.cluster = None
        if config["zookeeper.connect"]:
            from broker.cluster.replica_manager import ReplicaManager

            self.cluster = ReplicaManager(self)
            self.topics = self.cluster.metadata
        else:
            self.topics = TopicStore(self.log_dirs[0])
        self.logs = LogManager(self.log_dirs, self.log_config_for)
        self.groups = GroupCoordinator(self)
        self.txn = TransactionCoordinator(self)
        self.cleaner = LogCleaner(self)
        self.dir_mover = LogDirMover(self)  # AlterReplicaLogDirs
        self.authorizer = AclAuthorizer.from_broker(self)  # None: every request allowed
        self.metrics = BrokerMetrics()
        self.fetch_sessions = FetchSessionCache(config["max.incremental.fetch.session.cache.slots"])
        self.client_quotas = ClientQuotaManager.from_config(config)  # producer/consumer byte rates (none: off)
        self.quota_watcher = QuotaWatcher(self)
        self.refused_sequences = RefusedSequences()  # idempotent batches refused with retriable errors
        self._waiters: dict[tuple[str, int], set[asyncio.Future]] = {}
        self.listeners: dict[str, KafkaListener] = {}  # listener name -> its socket server
        self._stopping = asyncio.Event()
        self._logs_loaded = self._logs_closed = False
        self._tasks: list[asyncio.Task] = []
        self._pid_next = self._pid_end = 0

    def _init_meta(self) -> str:
        cluster_id = None
        for log_dir in self.log_dirs:
            os.makedirs(log_dir, exist_ok=True)
            meta = read_meta_properties(log_dir)
            if meta:
                if int(meta.get("broker.id", self.node_id)) != self.node_id:
                    raise ConfigError(f"broker.id {self.node_id} does not match broker.id={meta['broker.id']} "
                                      f"stored in {log_dir}/meta.properties")
                cluster_id = cluster_id or meta.get("cluster.id")
        if not self.config["zookeeper.connect"]:
            cluster_id = cluster_id or uuid.uuid4().hex[:22]
            self.write_meta(cluster_id)
        return cluster_id

    def write_meta(self, cluster_id: str) -> None:
        """Write meta.properties where it differs, atomically: a full disk must not leave an empty one."""
        text = f"version=0\nbroker.id={self.node_id}\ncluster.id={cluster_id}\n"
        for log_dir in self.log_dirs:
            path = os.path.join(log_dir, "meta.properties")
            if read_meta_properties(log_dir) == {"version": "0", "broker.id": str(self.node_id),
                                                 "cluster.id": cluster_id}:
                continue
            replace_file(path, text)

    # ---- topic configuration ---------------------------------------------------------------------------
    def _default_topic_configs(self) -> dict[str, str]:
        """Every topic config's value on a topic without overrides (broker keys, else Kafka's defaults)."""
        return {name: value for name, (value, _) in topic_configs.broker_defaults(self.config).items()}

    def topic_config_values(self, info: TopicInfo) -> dict[str, tuple[str, int]]:
        """Effective config of a topic: name → (value, config source)."""
        return topic_configs.effective_values(info.configs, topic_configs.broker_defaults(self.config))

    def broker_config_values(self) -> dict[str, tuple[str, int]]:
        out = {}
        for name, key in sorted(self.config.keys.items()):
            value = self.config[name]
            if value is None:
                continue
            if isinstance(value, dict):
                text = ",".join(f"{k}:{v}" for k, v in value.items())
            elif isinstance(value, list):
                text = ",".join(value)
            else:
                text = str(value).lower() if isinstance(value, bool) else str(value)
            out[name] = (text, STATIC_BROKER_CONFIG if name in self.config.explicit else DEFAULT_CONFIG)
        return out

    def log_config_for(self, topic: str) -> LogConfig:
        info = self.topics.get(topic)
        values = {k: v for k, (v, _) in self.topic_config_values(info).items()} if info else \
            self._default_topic_configs()
        return topic_configs.log_config(values)

    # ---- topics and logs -----------------------------------------------------------------------------
    async def create_topic(self, name: str, partitions: int, replication_factor: int, configs: dict[str, str],
                           validate_only: bool = False, assignment: dict[int, list[int]] | None = None) -> TopicInfo:
        if self.cluster is not None:
            return await self.cluster.create_topic(name, partitions, replication_factor, configs, validate_only,
                                                   assignment)
        if assignment and any(set(r) - {self.node_id} for r in assignment.values()):
            raise TopicError("invalid_replica_assignment", "assignment names brokers that do not exist")
        self.check_partition_limit({self.node_id: partitions * max(replication_factor, 1)})
        info = self.topics.create(name, partitions, replication_factor, configs, validate_only)
        if not validate_only:
            for p in range(partitions):
                try:
                    self.logs.create(name, p)
                except OSError as exc:  # a full disk: the topic exists; its log is created at its first use
                    incidents.failed(f"log creations in {self.log_dirs[0]}", exc, f"{name}-{p}")
                if p % CREATE_BATCH == CREATE_BATCH - 1:
                    await asyncio.sleep(0)  # let other clients in between (about 0.3 ms a partition)
            log.info("created topic %s with %d partition(s)", name, partitions)
        return info

    async def create_partitions(self, name: str, count: int, assignments: list[list[int]] | None,
                                validate_only: bool = False) -> list[int]:
        """Grow topic ``name`` to ``count`` partitions (CreatePartitions); ``assignments`` lists the replicas of
        each new partition, else they are placed as a new topic's. Returns the new partitions' ids (none when
        ``validate_only``). Cluster mode writes the assignment; the controller elects their leaders."""
        if self.cluster is not None:
            return await self.cluster.create_partitions(name, count, assignments, validate_only)
        info = self.topics.get(name)
        if info is None:
            raise TopicError("unknown_topic_or_partition", f"The topic '{name}' does not exist.")
        current = info.partitions
        check_new_partitions(current, count, assignments, 1, {self.node_id})
        self.check_partition_limit({self.node_id: count - current})
        if validate_only:
            return []
        self.topics.add_partitions(name, count)
        for p in range(current, count):
            try:
                self.logs.create(name, p)
            except OSError as exc:  # a full disk: the partition exists; its log is created at its first use
                incidents.failed(f"log creations in {self.log_dirs[0]}", exc, f"{name}-{p}")
            if (p - current) % CREATE_BATCH == CREATE_BATCH - 1:
                await asyncio.sleep(0)
        log.info("topic %s grew from %d to %d partitions", name, current, count)
        return list(range(current, count))

    async def wait_for_leaders(self, partitions: list[tuple[str, int]], timeout: float) -> set[tuple[str, int]]:
        """Wait up to ``timeout`` seconds until every partition has a live leader; returns those still without
        one (standalone: none, this broker leads them all)."""
        if self.cluster is None:
            return set()
        meta = self.cluster.metadata

        def leaderless() -> set[tuple[str, int]]:
            return {(t, p) for t, p in partitions
                    if (s := meta.state(t, p)) is None or s.leader < 0 or s.leader not in meta.brokers}

        if timeout > 0:
            await meta.wait_until(lambda: not leaderless(), timeout)
        return leaderless()

    def hosted_partitions(self) -> dict[int, int]:
        """Partition replicas per broker id, as the topic metadata assigns them."""
        counts: dict[int, int] = {}
        for name, info in self.topics.topics.items():
            for p in range(info.partitions):
                replicas = self.cluster.metadata.replicas(name, p) if self.cluster is not None else [self.node_id]
                for r in replicas:
                    counts[r] = counts.get(r, 0) + 1
        return counts

    def check_partition_limit(self, added: dict[int, int]) -> None:
        """POLICY_VIOLATION if the new replicas (broker id -> count) take a broker past max.broker.partitions."""
        limit = limits.partition_limit(self.config["max.broker.partitions"])
        if all(n <= limit for n in added.values()):  # cheap first test, before counting what exists
            hosted = self.hosted_partitions()
            if all(hosted.get(b, 0) + n <= limit for b, n in added.items()):
                return
        broker_id, n = max(added.items(), key=lambda item: item[1])
        raise TopicError("policy_violation", f"broker {broker_id} would host more than max.broker.partitions="
                                             f"{limit} partitions (+{n}); see the README's limits")

    async def delete_topic(self, name: str) -> None:
        if self.cluster is not None:
            await self.cluster.delete_topic(name)
            return
        self.topics.delete(name)
        self.logs.delete_topic(name)
        log.info("deleted topic %s", name)

    async def alter_topic_configs(self, name: str, configs: dict[str, str], validate_only: bool = False) -> None:
        """Replace a topic's config overrides (AlterConfigs sends the new set, IncrementalAlterConfigs computes
        it); the partition logs take the new config at once (cluster mode: every broker, from ZooKeeper)."""
        validate_topic_configs(configs, self._default_topic_configs())
        if validate_only:
            return
        if self.cluster is not None:
            await self.cluster.set_topic_configs(name, configs)
        else:
            self.topics.set_configs(name, configs)
        self.refresh_log_configs(name)

    def refresh_log_configs(self, topic: str) -> None:
        for (t, _p), plog in self.logs.logs.items():
            if t == topic:
                plog.config = self.log_config_for(topic)

    def log_for(self, topic: str, partition: int) -> PartitionLog:
        return self.logs.get(topic, partition) or self.logs.create(topic, partition)

    def leader_log(self, topic: str, partition: int, leader_epoch: int = -1):
        """(error, log) of a partition this broker leads; ``leader_epoch`` (-1: not checked) fences clients
        and followers with stale metadata. An offline partition (its log failed to load), or one whose log the
        disk does not let this broker create, is KAFKA_STORAGE_ERROR."""
        if self.logs.is_offline(topic, partition):
            return ErrorCode.kafka_storage_error, None
        if self.cluster is None:
            try:
                return ErrorCode.none, self.log_for(topic, partition)
            except OSError as exc:
                incidents.failed(f"log creations in {self.log_dirs[0]}", exc, f"{topic}-{partition}")
                return ErrorCode.kafka_storage_error, None
        part = self.cluster.partition(topic, partition)
        if part is None or not part.is_leader:
            return ErrorCode.not_leader_or_follower, None
        if leader_epoch >= 0 and leader_epoch != part.leader_epoch:
            return (ErrorCode.fenced_leader_epoch if leader_epoch < part.leader_epoch
                    else ErrorCode.unknown_leader_epoch), None
        return ErrorCode.none, part.log

    def partition_view(self, topic: str, partition: int) -> tuple[ErrorCode, int, int, list, list, list]:
        """(error, leader, leader epoch, replicas, isr, offline replicas) for Metadata."""
        if self.cluster is None:
            if self.logs.is_offline(topic, partition):
                return ErrorCode.kafka_storage_error, -1, 0, [self.node_id], [], [self.node_id]
            return ErrorCode.none, self.node_id, 0, [self.node_id], [self.node_id], []
        meta = self.cluster.metadata
        replicas = meta.replicas(topic, partition)
        offline = [r for r in replicas if r not in meta.brokers]
        state = meta.state(topic, partition)
        if state is None or state.leader < 0 or state.leader not in meta.brokers:
            return (ErrorCode.leader_not_available, -1, state.leader_epoch if state else -1, replicas,
                    list(state.isr) if state else [], offline)
        return ErrorCode.none, state.leader, state.leader_epoch, replicas, list(state.isr), offline

    def live_brokers(self) -> list[tuple[int, str, int, str | None]]:
        """(id, host, port, rack) of every live broker on the current request's listener; a broker without a
        listener of that name is left out, as Kafka does."""
        if self.cluster is None:
            host, port = self.advertised
            return [(self.node_id, host, port, self.config["broker.rack"])]
        name = current_listener.get() or self.config.inter_broker_listener
        out = []
        for b in sorted(self.cluster.metadata.brokers.values(), key=lambda b: b.broker_id):
            host, port = b.endpoint(name)
            if host is not None:
                out.append((b.broker_id, host, port, b.rack))
        return out

    @property
    def controller_id(self) -> int:
        return self.node_id if self.cluster is None else self.cluster.metadata.controller_id

    async def next_producer_id(self) -> int:
        """Unique across restarts (and brokers, in cluster mode): ids are reserved in blocks, recorded in
        ``producer-id-block`` (standalone) or ZooKeeper's ``/latest_producer_id_block`` (cluster)."""
        if self._pid_next < self._pid_end:
            self._pid_next += 1
            return self._pid_next - 1
        if self.cluster is not None:
            self._pid_next, self._pid_end = await self.cluster.reserve_producer_ids(PRODUCER_ID_BLOCK)
            self._pid_next += 1
            return self._pid_next - 1
        if self._pid_next >= self._pid_end:  # OSError if the disk refuses the new block: no id handed out
            path = os.path.join(self.log_dirs[0], "producer-id-block")
            try:
                with open(path) as f:
                    start = int(f.read())
            except FileNotFoundError:
                start = 0
            replace_file(path, str(start + PRODUCER_ID_BLOCK))
            self._pid_next, self._pid_end = start, start + PRODUCER_ID_BLOCK
        self._pid_next += 1
        return self._pid_next - 1

    def endpoints(self) -> dict[str, tuple[str, int]]:
        """Listener name -> advertised (host, port); a port 0 listener advertises the port it got."""
        out = {}
        for spec in self.config.listeners:
            port = spec.advertised_port
            if port == 0 and spec.name in self.listeners:
                port = self.listeners[spec.name].port
            out[spec.name] = (spec.advertised_host, port)
        return out

    @property
    def advertised(self) -> tuple[str, int]:
        """The advertised address of the listener that the current request came in on (Kafka: a client only
        ever sees addresses of its own listener), or of the inter-broker listener outside a request."""
        endpoints = self.endpoints()
        return endpoints.get(current_listener.get() or self.config.inter_broker_listener,
                             endpoints[self.config.inter_broker_listener])

    # ---- long-poll support ----------------------------------------------------------------------------
    def notify_append(self, topic: str, partition: int) -> None:
        waiters = self._waiters.pop((topic, partition), None)
        if waiters:
            for fut in waiters:
                if not fut.done():
                    fut.set_result(None)

    async def wait_for_append(self, keys: list[tuple[str, int]], timeout: float) -> None:
        fut = asyncio.get_running_loop().create_future()
        for key in keys:
            self._waiters.setdefault(key, set()).add(fut)
        try:
            async with asyncio.timeout(timeout):  # not wait_for: it can swallow a cancellation (Python 3.11)
                await fut
        except asyncio.TimeoutError:
            pass
        finally:
            for key in keys:
                waiting = self._waiters.get(key)
                if waiting is not None:
                    waiting.discard(fut)
                    if not waiting:
                        del self._waiters[key]

    # ---- lifecycle ---------------------------------------------------------------------------------------
    async def start(self) -> None:
        """Kafka's start order: logs loaded; listeners bound but not accepting (their ports are known, for the
        registration); in cluster mode the ZooKeeper session, the registration, and the controller known (this
        broker's own election included, at most ``zookeeper.connection.timeout.ms``: past that the listeners
        open anyway, with a warning); then the listeners accept clients. So a client's first Metadata answer
        names the controller (a client told -1 waited 20-40 s before its CreateTopics went out)."""
        self.logs.load()
        self._logs_loaded = True
        for name, info in self.topics.topics.items():  # logs of every partition exist, even empty ones
            for p in range(info.partitions):
                if not self.logs.is_offline(name, p):
                    self.log_for(name, p)
        if self.logs.offline:
            log.error("%d partition(s) offline (KAFKA_STORAGE_ERROR until repaired): %s", len(self.logs.offline),
                      ", ".join(f"{t}-{p}" for t, p in sorted(self.logs.offline)))
        pool = MemoryPool(self.config["queued.max.request.bytes"])  # shared by every listener
        self.connection_quotas = ConnectionQuotas.from_config(self.config)  # likewise
        for spec in self.config.listeners:
            listener = KafkaListener(self, spec.host, spec.port, self.config["socket.request.max.bytes"], pool,
                                     name=spec.name, quotas=self.connection_quotas)
            await listener.start()
            self.listeners[spec.name] = listener
        if self.cluster is not None:
            await self.cluster.start()
            bound = self.cluster.zk.connection_timeout
            if not await self.cluster.wait_for_controller(bound):
                log.warning("no controller known %gs after registering in ZooKeeper (zookeeper.connection.timeout"
                            ".ms): serving clients anyway; Metadata names the controller once there is one", bound)
        await self.quota_watcher.start()  # the quotas in force before the first client request is read
        await self.groups.start()
        self.txn.start()
        loop = asyncio.get_running_loop()
        retention_s = self.config["log.retention.check.interval.ms"] / 1000
        flush_s = min(self.config["log.flush.scheduler.interval.ms"], self.config.flush_ms, LONG_MAX) / 1000
        self._tasks = [
            loop.create_task(self._every(retention_s, lambda: self.logs.apply_retention(loop.call_later))),
            loop.create_task(self._every(min(flush_s, 3600.0), self.logs.flush_due)),
            loop.create_task(self._every(CHECKPOINT_INTERVAL_S, self.logs.checkpoint)),
        ]
        if self.config["log.cleaner.enable"]:
            self._tasks.append(loop.create_task(self._every(self.config["log.cleaner.backoff.ms"] / 1000,
                                                            self.cleaner.run_once)))
        if self.authorizer is not None:  # the ACLs are in memory before the first request is read
            await self.authorizer.start()
        for listener in self.listeners.values():
            await listener.serve()
        self.metrics.start(self, self.config["metrics.listener"])
        log.info("logbus broker %d listening on %s (log.dirs=%s)", self.node_id,
                 ", ".join(f"{n}://{x.host}:{x.port}" for n, x in self.listeners.items()), ",".join(self.log_dirs))

    async def _every(self, seconds: float, action) -> None:
        while True:
            await asyncio.sleep(seconds)
            try:
                result = action()
                if asyncio.iscoroutine(result):
                    await result
            except Exception:
                log.exception("background task failed")

    def request_stop(self) -> None:
        self._stopping.set()

    async def stop(self) -> bool:
        """Stop in bounded steps (``STOP_STEP_TIMEOUT_S`` each), whatever connections are still open: background
        tasks; no new connections; in cluster mode the controller role, the replica fetchers and the ZooKeeper
        session (its end hands this broker's leaderships to others); the open client connections; then the
        logs (flush, checkpoints, clean-shutdown marker). True when no step overran its bound."""
        step = STOP_STEP_TIMEOUT_S
        clean = True
        for task in self._tasks:
            task.cancel()
        await self.txn.stop(step)
        await self.groups.stop()
        await self.quota_watcher.stop()
        await self.dir_mover.stop()  # a move under way is given up (its copy removed at the next start)
        for listener in self.listeners.values():
            listener.close()
        self.metrics.stop()
        if self.cluster is not None:
            try:
                clean = await self.cluster.stop(step)
            except Exception:
                log.exception("stopping cluster mode")
                clean = False
        for listener in self.listeners.values():
            clean = await listener.stop(step) and clean
        self.close_logs()
        log.info("logbus broker %d stopped %s", self.node_id, "cleanly" if clean else "(some steps overran)")
        return clean

    def close_logs(self) -> None:
        """Flush and close the logs once (a forced exit may come while a stop is under way)."""
        if self._logs_loaded and not self._logs_closed:
            self._logs_closed = True
            self.logs.shutdown()

    def force_exit(self) -> None:
        """A second SIGTERM/SIGINT: close the logs and exit now, without waiting for the rest of the stop."""
        log.warning("second signal: exiting now (logs closed, connections dropped)")
        try:
            self.close_logs()
        except Exception:
            log.exception("closing the logs")
        for handler in logging.getLogger().handlers:
            handler.flush()
        os._exit(1)

    async def run_forever(self, watchdog: Watchdog | None = None) -> None:
        """Start, serve until SIGTERM/SIGINT, stop (see :mod:`broker.shutdown`). A signal during start-up stops
        the broker too; a failed start-up closes what had started, then raises."""
        loop = asyncio.get_running_loop()
        signals = StopSignals(loop, self.request_stop, self.force_exit, watchdog or Watchdog())
        signals.install()
        starting = loop.create_task(self.start())
        stopping = loop.create_task(self._stopping.wait())
        try:
            await asyncio.wait({starting, stopping}, return_when=asyncio.FIRST_COMPLETED)
            if not starting.done():
                log.info("stop requested during start-up")
                starting.cancel()
                await asyncio.wait({starting}, timeout=STOP_STEP_TIMEOUT_S)
            elif starting.exception() is not None:
                await self.stop()
                raise starting.exception()
            else:
                await stopping
            await self.stop()
        finally:
            stopping.cancel()
            signals.uninstall()


def _close_loop(loop: asyncio.AbstractEventLoop) -> None:
    """``asyncio.run``'s teardown, bounded: a task that outlives its cancellation must not keep the process
    alive (executor threads are joined at interpreter exit, under the watchdog)."""
    try:
        tasks = asyncio.all_tasks(loop)
        for task in tasks:
            task.cancel()
        if tasks:
            loop.run_until_complete(asyncio.wait(tasks, timeout=STOP_STEP_TIMEOUT_S))
        loop.run_until_complete(loop.shutdown_asyncgens())
    finally:
        loop.close()


def _load_compiled_checks() -> None:
    """Load produce's compiled record check (numba: about half a second, more on a busy machine) in the
    background from the start, rather than on the first big batch, whose producer would wait for it."""
    failure = getattr(validation._load_kernels(), "failure", None)
    if failure is not None:
        log.error("the compiled record check did not load (%s): produce checks records without it", failure)


def run(config: BrokerConfig) -> None:
    limits.return_freed_memory()
    limits.raise_open_file_limit()
    threading.Thread(target=_load_compiled_checks, name="compiled-checks", daemon=True).start()
    watchdog = Watchdog()

    async def main() -> None:
        broker = Broker(config)
        await broker.run_forever(watchdog)

    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    failed = True
    try:
        loop.run_until_complete(main())
        failed = False
    finally:
        try:
            _close_loop(loop)
        finally:
            asyncio.set_event_loop(None)
            # threads still blocked in a call (kazoo's session close on an unresponsive ZooKeeper) are joined
            # at exit; they get EXIT_GRACE_S
            watchdog.arm(EXIT_GRACE_S, 1 if failed else 0, f"{EXIT_GRACE_S:g}s after the broker stopped")


__all__ = ["Broker", "run", "TopicError"]
