"""A broker process: configuration, topics, partition logs, the Kafka listener and background duties.

Standalone mode (no ``zookeeper.connect``): this broker is the whole cluster, leads every partition, and keeps
topic metadata in its first log dir. Handlers reach everything through this object's methods, which the
cluster mode will back with ZooKeeper instead.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import uuid

from broker.config import LONG_MAX, BrokerConfig, ConfigError
from broker.log.log import LogConfig, PartitionLog
from broker.log.manager import LogManager
from broker.metadata.topics import TOPIC_CONFIGS, TopicError, TopicInfo, TopicStore
from broker.network.server import KafkaListener

log = logging.getLogger(__name__)

# Kafka's DescribeConfigs config sources.
DYNAMIC_TOPIC_CONFIG, STATIC_BROKER_CONFIG, DEFAULT_CONFIG = 1, 4, 5
CHECKPOINT_INTERVAL_S = 60
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
        if config["zookeeper.connect"]:
            raise ConfigError("zookeeper.connect: cluster mode is not implemented yet (see the Cluster issue); "
                              "remove it to run a standalone broker")
        self.log_dirs: list[str] = [os.path.abspath(d) for d in config["log.dirs"]]
        self.cluster_id = self._init_meta()
        self.topics = TopicStore(self.log_dirs[0])
        self.logs = LogManager(self.log_dirs, self.log_config_for)
        self._waiters: dict[tuple[str, int], set[asyncio.Future]] = {}
        self.listener: KafkaListener | None = None
        self._stopping = asyncio.Event()
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
        cluster_id = cluster_id or uuid.uuid4().hex[:22]
        for log_dir in self.log_dirs:
            with open(os.path.join(log_dir, "meta.properties"), "w") as f:
                f.write(f"version=0\nbroker.id={self.node_id}\ncluster.id={cluster_id}\n")
        return cluster_id

    # ---- topic configuration ---------------------------------------------------------------------------
    def _default_topic_configs(self) -> dict[str, str]:
        c = self.config
        return {
            "cleanup.policy": c["log.cleanup.policy"],
            "retention.ms": str(c.retention_ms),
            "retention.bytes": str(c["log.retention.bytes"]),
            "segment.bytes": str(c["log.segment.bytes"]),
            "segment.ms": str(c.roll_ms),
            "segment.index.bytes": "10485760",
            "index.interval.bytes": str(c["log.index.interval.bytes"]),
            "flush.messages": str(c["log.flush.interval.messages"]),
            "flush.ms": str(c.flush_ms),
            "max.message.bytes": str(c["message.max.bytes"]),
            "message.timestamp.type": "CreateTime",
            "min.insync.replicas": "1",
            "file.delete.delay.ms": "60000",
        }

    def topic_config_values(self, info: TopicInfo) -> dict[str, tuple[str, int]]:
        """Effective config of a topic: name → (value, config source)."""
        out = {}
        defaults = self._default_topic_configs()
        for name in TOPIC_CONFIGS:
            if name in info.configs:
                out[name] = (info.configs[name], DYNAMIC_TOPIC_CONFIG)
            else:
                out[name] = (defaults[name], STATIC_BROKER_CONFIG if TOPIC_CONFIGS[name] else DEFAULT_CONFIG)
        return out

    def broker_config_values(self) -> dict[str, tuple[str, int]]:
        out = {}
        for name, key in sorted(self.config.keys.items()):
            value = self.config[name]
            if value is None:
                continue
            text = ",".join(value) if isinstance(value, list) else str(value).lower() if isinstance(value, bool) \
                else str(value)
            out[name] = (text, STATIC_BROKER_CONFIG if name in self.config.explicit else DEFAULT_CONFIG)
        return out

    def log_config_for(self, topic: str) -> LogConfig:
        info = self.topics.get(topic)
        values = {k: v for k, (v, _) in self.topic_config_values(info).items()} if info else \
            self._default_topic_configs()
        return LogConfig(
            segment_bytes=int(values["segment.bytes"]),
            roll_ms=int(values["segment.ms"]),
            index_interval_bytes=int(values["index.interval.bytes"]),
            retention_ms=int(values["retention.ms"]),
            retention_bytes=int(values["retention.bytes"]),
            flush_interval_messages=int(values["flush.messages"]),
            flush_ms=int(values["flush.ms"]),
            max_message_bytes=int(values["max.message.bytes"]),
            file_delete_delay_ms=int(values["file.delete.delay.ms"]),
        )

    # ---- topics and logs -----------------------------------------------------------------------------
    def create_topic(self, name: str, partitions: int, replication_factor: int, configs: dict[str, str],
                     validate_only: bool = False) -> TopicInfo:
        info = self.topics.create(name, partitions, replication_factor, configs, validate_only)
        if not validate_only:
            for p in range(partitions):
                self.logs.create(name, p)
            log.info("created topic %s with %d partition(s)", name, partitions)
        return info

    def delete_topic(self, name: str) -> None:
        self.topics.delete(name)
        self.logs.delete_topic(name)
        log.info("deleted topic %s", name)

    def log_for(self, topic: str, partition: int) -> PartitionLog:
        return self.logs.get(topic, partition) or self.logs.create(topic, partition)

    def leader_epoch(self, topic: str, partition: int) -> int:
        return 0

    def next_producer_id(self) -> int:
        """Unique across restarts: ids are reserved in blocks recorded in ``producer-id-block``."""
        if self._pid_next >= self._pid_end:
            path = os.path.join(self.log_dirs[0], "producer-id-block")
            start = int(open(path).read()) if os.path.exists(path) else 0
            with open(path + ".tmp", "w") as f:
                f.write(str(start + PRODUCER_ID_BLOCK))
            os.replace(path + ".tmp", path)
            self._pid_next, self._pid_end = start, start + PRODUCER_ID_BLOCK
        self._pid_next += 1
        return self._pid_next - 1

    @property
    def advertised(self) -> tuple[str, int]:
        host, port = self.config.advertised
        if port == 0 and self.listener is not None:
            port = self.listener.port
        return host, port

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
            await asyncio.wait_for(fut, timeout)
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
        self.logs.load()
        for name, info in self.topics.topics.items():  # logs of every partition exist, even empty ones
            for p in range(info.partitions):
                self.log_for(name, p)
        host, port = self.config.listener
        self.listener = KafkaListener(self, host, port, self.config["socket.request.max.bytes"])
        await self.listener.start()
        loop = asyncio.get_running_loop()
        retention_s = self.config["log.retention.check.interval.ms"] / 1000
        flush_s = min(self.config["log.flush.scheduler.interval.ms"], self.config.flush_ms, LONG_MAX) / 1000
        self._tasks = [
            loop.create_task(self._every(retention_s, lambda: self.logs.apply_retention(loop.call_later))),
            loop.create_task(self._every(min(flush_s, 3600.0), self.logs.flush_due)),
            loop.create_task(self._every(CHECKPOINT_INTERVAL_S, self.logs.checkpoint)),
        ]
        log.info("logbus broker %d listening on %s:%d (log.dirs=%s)", self.node_id, host, self.listener.port,
                 ",".join(self.log_dirs))

    async def _every(self, seconds: float, action) -> None:
        while True:
            await asyncio.sleep(seconds)
            try:
                action()
            except Exception:
                log.exception("background task failed")

    def request_stop(self) -> None:
        self._stopping.set()

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        if self.listener is not None:
            await self.listener.stop()
        self.logs.shutdown()
        log.info("logbus broker %d stopped cleanly", self.node_id)

    async def run_forever(self) -> None:
        await self.start()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.request_stop)
        await self._stopping.wait()
        await self.stop()


def run(config: BrokerConfig) -> None:
    async def main() -> None:
        broker = Broker(config)
        await broker.run_forever()

    asyncio.run(main())


__all__ = ["Broker", "run", "TopicError"]
