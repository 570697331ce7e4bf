"""Helpers for tests that run real broker processes: free ports, start/stop by pid, wait for readiness."""

from __future__ import annotations

import contextlib
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def _port_block() -> range:
    """This process' ports: below the kernel's ephemeral range (32768-60999, where bind(0) and outgoing
    connections take theirs), one block per pytest-xdist worker, so two workers never hand out the same port."""
    count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT") or 1)
    index = int((os.environ.get("PYTEST_XDIST_WORKER") or "gw0")[2:] or 0)
    size = (32000 - 10000) // max(count, 1)
    return range(10000 + index * size, 10000 + (index + 1) * size)


_PORTS = _port_block()
_next_port = [random.randrange(len(_PORTS))]


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on at ``host``, not handed out before by this process (a cycle through its block)."""
    for _ in range(len(_PORTS)):
        port = _PORTS[_next_port[0] % len(_PORTS)]
        _next_port[0] += 1
        with socket.socket() as s:
            try:
                s.bind((host, port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port at {host} in {_PORTS}")


def wait_for_port(host: str, port: int, timeout: float = 60.0, proc: subprocess.Popen | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"process exited with {proc.returncode} before listening on {port}")
        try:
            with socket.create_connection((host, port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise TimeoutError(f"nothing listening on {host}:{port} after {timeout}s")


class BrokerProcess:
    """One ``logbus broker`` process on a free loopback port, data under ``workdir``."""

    def __init__(self, workdir: Path, broker_id: int = 0, host: str = "127.0.0.1", platform_dir: Path | None = None,
                 **overrides: object):
        """``platform_dir``: the code to run (default: this tree's ``platform/``; benchmarks pass an older one)."""
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.platform_dir = Path(platform_dir) if platform_dir is not None else REPO / "platform"
        self.host = host
        self.port = free_port(host)
        self.log_dir = self.workdir / "logs"
        self.settings = {
            "broker.id": broker_id,
            "listeners": f"PLAINTEXT://{self.host}:{self.port}",
            "log.dirs": str(self.log_dir),
            **{k.replace("_", "."): v for k, v in overrides.items()},
        }
        self.config_path = self.workdir / "server.properties"
        self.proc: subprocess.Popen | None = None
        self.output = self.workdir / "broker.log"
        self.env: dict | None = None  # the broker's environment (default: this process's)

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    def write_config(self) -> None:
        self.config_path.write_text("".join(f"{k}={v}\n" for k, v in self.settings.items()))

    def start(self) -> "BrokerProcess":
        self.write_config()
        env = dict(self.env or os.environ, PYTHONPATH=str(self.platform_dir))
        with open(self.output, "ab") as out:
            self.proc = subprocess.Popen([sys.executable, "-m", "logbus.cli", "broker", str(self.config_path)],
                                         stdout=out, stderr=subprocess.STDOUT, env=env, cwd=self.workdir)
        wait_for_port(self.host, self.port, proc=self.proc)
        return self

    def stop(self, timeout: float = 20.0) -> int | None:
        """SIGTERM (clean shutdown) and wait; SIGKILL if it does not exit in time."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        code, self.proc = self.proc.returncode, None
        return code

    def kill9(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        self.proc = None

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log_text(self) -> str:
        return self.output.read_text(errors="replace") if self.output.exists() else ""


def terminate(proc: subprocess.Popen | None, timeout: float = 15) -> None:
    """SIGTERM, wait, SIGKILL if it does not exit in time."""
    if proc is not None and proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def kill_group(proc: subprocess.Popen) -> None:
    """``kill -9`` of a process started with its own process group (``start_new_session``), and wait for it."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()


def wait_until(predicate, timeout: float = 20.0, interval: float = 0.1, what: str = "condition"):
    """Poll ``predicate`` until it returns something truthy; return it."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} not reached within {timeout}s")
        time.sleep(interval)


class ZooKeeperProcess:
    """A real ZooKeeper (``logbus zookeeper``) on a free loopback port, data under ``workdir``."""

    def __init__(self, workdir: Path, tick_time_ms: int = 250):
        self.dir = Path(workdir)
        self.port = free_port()
        self.tick_time_ms = tick_time_ms
        self.proc: subprocess.Popen | None = None

    @property
    def connect(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> "ZooKeeperProcess":
        self.dir.mkdir(parents=True, exist_ok=True)
        env = dict(os.environ, PYTHONPATH=str(REPO / "platform"))
        with open(self.dir / "zookeeper.out", "ab") as out:
            self.proc = subprocess.Popen([sys.executable, "-m", "logbus.cli", "zookeeper", "--data-dir",
                                          str(self.dir), "--port", str(self.port), "--tick-time",
                                          str(self.tick_time_ms)], stdout=out, stderr=subprocess.STDOUT, env=env)
        wait_until(self.ruok, timeout=30, what="ZooKeeper answering ruok")
        return self

    def ruok(self) -> bool:
        if self.proc is not None and self.proc.poll() is not None:
            raise RuntimeError(f"ZooKeeper exited with {self.proc.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1) as s:
                s.sendall(b"ruok")
                return s.recv(4) == b"imok"
        except OSError:
            return False

    def stop(self) -> None:
        terminate(self.proc)
        self.proc = None


class ZooKeeperEnsemble:
    """``size`` ZooKeeper servers in one ensemble (``logbus zookeeper --server-id N --server ...``): server N on
    127.0.0.N with free client, quorum and election ports, data under ``workdir/zkN``. Nodes are addressed by
    index (0-based: index i is server i+1); each is started, stopped or killed by its pid. Drop-in for
    ``Cluster.zookeeper`` (``connect``, ``start``, ``stop``)."""

    def __init__(self, workdir: Path, size: int = 3, tick_time_ms: int = 250, init_limit: int = 10,
                 sync_limit: int = 5):
        self.dir = Path(workdir)
        self.size, self.tick_time_ms, self.init_limit, self.sync_limit = size, tick_time_ms, init_limit, sync_limit
        self.hosts = [f"127.0.0.{i + 1}" for i in range(size)]
        self.ports: list[int] = []  # client ports
        self.peer_ports: list[tuple[int, int]] = []  # (quorum, election)
        for host in self.hosts:
            picked: set[int] = set()
            while len(picked) < 3:
                picked.add(free_port(host))
            client, quorum, election = sorted(picked)
            self.ports.append(client)
            self.peer_ports.append((quorum, election))
        self.procs: list[subprocess.Popen | None] = [None] * size

    @property
    def connect(self) -> str:
        return ",".join(f"{h}:{p}" for h, p in zip(self.hosts, self.ports))

    @property
    def servers(self) -> str:
        """The ``--server`` value: every member, ZooKeeper's ``server.N`` syntax, comma-separated."""
        return ",".join(f"{i + 1}={h}:{q}:{e};{h}:{p}"
                        for i, (h, p, (q, e)) in enumerate(zip(self.hosts, self.ports, self.peer_ports)))

    def node_dir(self, index: int) -> Path:
        return self.dir / f"zk{index + 1}"

    def argv(self, index: int) -> list[str]:
        return [sys.executable, "-m", "logbus.cli", "zookeeper", "--data-dir", str(self.node_dir(index)),
                "--host", self.hosts[index], "--port", str(self.ports[index]), "--tick-time",
                str(self.tick_time_ms), "--server-id", str(index + 1), "--server", self.servers,
                "--init-limit", str(self.init_limit), "--sync-limit", str(self.sync_limit)]

    def _launch(self, index: int) -> None:
        if self.alive(index):
            return
        self.node_dir(index).mkdir(parents=True, exist_ok=True)
        env = dict(os.environ, PYTHONPATH=str(REPO / "platform"))
        with open(self.node_dir(index) / "zookeeper.out", "ab") as out:
            self.procs[index] = subprocess.Popen(self.argv(index), stdout=out, stderr=subprocess.STDOUT, env=env)

    def start(self, index: int | None = None, timeout: float = 60) -> "ZooKeeperEnsemble":
        """Every node (index None: until all serve, one as leader) or one node (until it serves again)."""
        indexes = range(self.size) if index is None else [index]
        for i in indexes:
            self._launch(i)

        def serving():
            modes = {i: self.mode(i) for i in range(self.size) if self.alive(i) or i in indexes}
            if any(modes[i] not in ("leader", "follower") for i in indexes):
                return False
            return list(modes.values()).count("leader") == 1

        wait_until(serving, timeout, interval=0.2, what=f"ZooKeeper {'ensemble' if index is None else index} "
                                                        "serving with one leader")
        return self

    def alive(self, index: int) -> bool:
        proc = self.procs[index]
        return proc is not None and proc.poll() is None

    def pid(self, index: int) -> int:
        return self.procs[index].pid

    def four_letter(self, index: int, word: str) -> str | None:
        proc = self.procs[index]
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"ZooKeeper {index + 1} exited with {proc.returncode}: "
                               + (self.node_dir(index) / "zookeeper.out").read_text(errors="replace")[-2000:])
        try:
            with socket.create_connection((self.hosts[index], self.ports[index]), timeout=2) as s:
                s.sendall(word.encode())
                chunks = []
                while chunk := s.recv(4096):
                    chunks.append(chunk)
                return b"".join(chunks).decode(errors="replace")
        except OSError:
            return None

    def ruok(self, index: int) -> bool:
        return self.four_letter(index, "ruok") == "imok"

    def mode(self, index: int) -> str | None:
        """``leader``, ``follower``, or None (down, or not serving: no quorum, election under way)."""
        from logbus.local import zookeeper_mode

        if self.procs[index] is None:
            return None
        return zookeeper_mode(self.hosts[index], self.ports[index])

    def leader(self) -> int | None:
        leaders = [i for i in range(self.size) if self.alive(i) and self.mode(i) == "leader"]
        return leaders[0] if len(leaders) == 1 else None

    def rss_kb(self, index: int) -> int:
        """VmRSS of node ``index``'s JVM (``logbus zookeeper`` execs java: the pid is the JVM's)."""
        with open(f"/proc/{self.pid(index)}/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        raise RuntimeError(f"no VmRSS for pid {self.pid(index)}")

    def kill9(self, index: int) -> None:
        proc = self.procs[index]
        if proc is not None and proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
        self.procs[index] = None

    def stop(self, index: int | None = None) -> None:
        """SIGTERM (then SIGKILL) node ``index``, or every node."""
        for i in range(self.size) if index is None else [index]:
            terminate(self.procs[i])
            self.procs[i] = None


class Cluster:
    """A ZooKeeper and ``size`` brokers (ids 0..size-1) under one chroot; brokers stopped and started by id."""

    def __init__(self, workdir: Path, size: int = 3, chroot: str = "/logbus", platform_dir: Path | None = None,
                 **overrides: object):
        self.dir = Path(workdir)
        self.platform_dir = platform_dir
        self.zookeeper = ZooKeeperProcess(self.dir / "zk")
        self.chroot = chroot
        self.overrides = {"zookeeper_session_timeout_ms": 3000, "replica_lag_time_max_ms": 3000,
                          "replica_fetch_wait_max_ms": 100, "replica_fetch_backoff_ms": 200,
                          "num_partitions": 1, **overrides}
        self.brokers: dict[int, BrokerProcess] = {}
        self.size = size

    def start(self) -> "Cluster":
        self.zookeeper.start()
        for i in range(self.size):
            self.brokers[i] = BrokerProcess(self.dir / f"broker{i}", broker_id=i,
                                            zookeeper_connect=self.zookeeper.connect + self.chroot,
                                            platform_dir=self.platform_dir, **self.overrides)
        for proc in self.brokers.values():
            proc.start()
        self.wait_registered(set(self.brokers))
        self.wait_brokers_seen()
        return self

    def wait_brokers_seen(self, timeout: float = 30) -> None:
        """Until every live broker's Metadata lists every live broker (registrations reach each broker through
        a ZooKeeper watch, a moment after they are written: a topic created before that is placed on fewer)."""
        from rawclient import RawClient, request_module

        live = [b for b in self.brokers.values() if b.alive()]

        def seen(b):
            client = RawClient(b.host, b.port)
            try:
                return len(client.request(3, 1, request_module(3, 1).MetadataRequest(topics=())).brokers)
            finally:
                client.close()

        wait_until(lambda: all(seen(b) == len(live) for b in live), timeout, what="every broker seeing all brokers")

    @property
    def bootstrap(self) -> str:
        return ",".join(b.bootstrap for b in self.brokers.values() if b.alive())

    def zk(self):
        from kazoo.client import KazooClient

        client = KazooClient(hosts=self.zookeeper.connect + self.chroot, timeout=5)
        client.start(timeout=10)
        return client

    def registered(self) -> set[int]:
        client = self.zk()
        try:
            return {int(c) for c in client.get_children("/brokers/ids")} if client.exists("/brokers/ids") else set()
        finally:
            client.stop()
            client.close()

    def wait_registered(self, ids: set[int], timeout: float = 30) -> None:
        wait_until(lambda: self.registered() == ids, timeout, what=f"brokers {sorted(ids)} registered")

    def state(self, topic: str, partition: int) -> dict:
        import json

        client = self.zk()
        try:
            data, _ = client.get(f"/brokers/topics/{topic}/partitions/{partition}/state")
            return json.loads(data)
        finally:
            client.stop()
            client.close()

    def stop(self) -> None:
        for proc in self.brokers.values():
            if proc.proc is not None:
                try:
                    os.kill(proc.proc.pid, signal.SIGCONT)  # a test may have paused it
                except ProcessLookupError:
                    pass
            proc.stop()
        self.zookeeper.stop()


def start_with_metrics(c: Cluster) -> Cluster:
    """Start ``c`` with brokers serving /metrics (``metrics.listener`` on a free port each, kept as the broker's
    ``metrics_port``); the caller stops it (``c.stop()``), also when starting failed half-way."""
    c.zookeeper.start()
    for i in range(c.size):
        b = BrokerProcess(c.dir / f"broker{i}", broker_id=i, zookeeper_connect=c.zookeeper.connect + c.chroot,
                          platform_dir=c.platform_dir, **c.overrides)
        b.metrics_port = free_port()
        b.settings["metrics.listener"] = f"http://127.0.0.1:{b.metrics_port}"
        c.brokers[i] = b.start()
    c.wait_registered(set(range(c.size)))
    return c


@contextlib.contextmanager
def metrics_cluster(workdir: Path, **overrides):
    """A running :func:`start_with_metrics` cluster whose brokers all know each other, stopped on exit."""
    c = Cluster(workdir, **overrides)
    try:
        start_with_metrics(c).wait_brokers_seen()
        yield c
    finally:
        c.stop()


class EnsembleCluster(Cluster):
    """``Cluster`` on a ZooKeeper ensemble of ``zookeeper_size`` nodes instead of one ZooKeeper."""

    def __init__(self, workdir: Path, size: int = 3, chroot: str = "/logbus", zookeeper_size: int = 3,
                 **overrides: object):
        super().__init__(workdir, size, chroot, **overrides)
        self.zookeeper = ZooKeeperEnsemble(self.dir / "zk", zookeeper_size)


class RegistryProcess:
    """``logbus schema-registry`` on a free loopback port against ``bootstrap``."""

    def __init__(self, workdir: Path, bootstrap: str, **settings: str):
        self.dir = Path(workdir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.settings = {"listeners": f"http://127.0.0.1:{self.port}", "kafkastore.bootstrap.servers": bootstrap,
                         "kafkastore.timeout.ms": "10000", **{k.replace("_", "."): v for k, v in settings.items()}}
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> "RegistryProcess":
        config = self.dir / "registry.properties"
        config.write_text("".join(f"{k}={v}\n" for k, v in self.settings.items()))
        env = dict(os.environ, PYTHONPATH=str(REPO / "platform"))
        with open(self.dir / "registry.log", "ab") as out:
            self.proc = subprocess.Popen([sys.executable, "-m", "logbus.cli", "schema-registry", str(config)],
                                         stdout=out, stderr=subprocess.STDOUT, env=env)
        wait_for_port("127.0.0.1", self.port, timeout=60, proc=self.proc)
        return self

    def stop(self) -> None:
        terminate(self.proc)
        self.proc = None

    def log_text(self) -> str:
        path = self.dir / "registry.log"
        return path.read_text(errors="replace") if path.exists() else ""


class LogbusProcess:
    """Any ``logbus VERB ...`` in the background, output in ``workdir/NAME.log``; stopped by pid."""

    def __init__(self, workdir: Path, name: str, args: list[str]):
        self.dir = Path(workdir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.name, self.args = name, args
        self.output = self.dir / f"{name}.log"
        self.proc: subprocess.Popen | None = None

    def start(self) -> "LogbusProcess":
        env = dict(os.environ, PYTHONPATH=str(REPO / "platform"))
        with open(self.output, "ab") as out:
            self.proc = subprocess.Popen([sys.executable, "-m", "logbus.cli", *self.args], stdout=out,
                                         stderr=subprocess.STDOUT, env=env, cwd=self.dir)
        return self

    def kill9(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()

    def stop(self, timeout: float = 30) -> None:
        terminate(self.proc, timeout)

    def log_text(self) -> str:
        return self.output.read_text(errors="replace") if self.output.exists() else ""


def mirror_process(workdir: Path, source: str, target: str, whitelist: str, *extra: str) -> LogbusProcess:
    """``logbus mirror`` from ``source`` into ``target`` (consumer group ``mirror-live``, source name ``live``)."""
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    # a killed mirror's streams leave the group after 6 s, not librdkafka's default 45 s; a crash makes the next run
    # copy again at most what one fetch brought (per partition: max.partition.fetch.bytes, 1 MiB by default)
    (workdir / "consumer.properties").write_text(f"bootstrap.servers={source}\ngroup.id=mirror-live\n"
                                                 "session.timeout.ms=6000\nmax.partition.fetch.bytes=65536\n")
    (workdir / "producer.properties").write_text(f"bootstrap.servers={target}\n")
    return LogbusProcess(workdir, "mirror", [
        "mirror", "--consumer.config", str(workdir / "consumer.properties"), "--producer.config",
        str(workdir / "producer.properties"), "--whitelist", whitelist, "--source-name", "live", *extra])


def read_topic(bootstrap: str, topic: str, timeout: float = 60) -> list:
    """Every record of ``topic`` (all partitions, to the end of each at the time) with confluent-kafka, which
    reads committed records only (librdkafka's default read_committed): transaction markers and aborted records
    take offsets without being records, so the end is the partition-EOF event, not a count."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "test-read-topic", "enable.auto.commit": False,
                         "enable.partition.eof": True})
    out = []
    try:
        parts = list(consumer.list_topics(timeout=10).topics[topic].partitions)
        consumer.assign([TopicPartition(topic, part, 0) for part in parts])
        at_end: set[int] = set()
        deadline = time.monotonic() + timeout
        while len(at_end) < len(parts):
            assert time.monotonic() < deadline, f"{topic}: not at the end of every partition in {timeout}s"
            for m in consumer.consume(1000, timeout=1):
                if m.error():
                    assert m.error().code() == -191, m.error()  # _PARTITION_EOF
                    at_end.add(m.partition())
                    continue
                at_end.discard(m.partition())
                out.append(m)
    finally:
        consumer.close()
    return out


class Ledger:
    """An ``acks=all`` idempotent producer on a thread that keeps a ledger of every acknowledged record: values are
    increasing sequence numbers, ``seq % partitions`` picks the partition, so each partition's acknowledged values
    must read back in increasing order. ``check`` reads the topic and compares."""

    def __init__(self, bootstrap: str, topic: str, partitions: int = 2, interval: float = 0.005,
                 message_timeout_ms: int = 120000):
        self.bootstrap, self.topic, self.partitions, self.interval = bootstrap, topic, partitions, interval
        self.message_timeout_ms = message_timeout_ms
        self.acked: dict[int, list[int]] = {p: [] for p in range(partitions)}
        self.failed: Counter = Counter()
        self.produced = 0
        self.acked_at = 0.0  # time.monotonic() of the last acknowledgement
        self.unflushed = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"ledger-{topic}", daemon=True)

    def _on_delivery(self, err, msg) -> None:
        if err is None:
            self.acked[msg.partition()].append(int(msg.value()))
            self.acked_at = time.monotonic()
        else:
            self.failed[err.name()] += 1

    def _run(self) -> None:
        from confluent_kafka import Producer

        # one request in flight per connection: librdkafka (2.16) re-numbers, under a bumped epoch, batches a
        # broker may already have stored when a later pipelined batch is answered OUT_OF_ORDER_SEQUENCE_NUMBER
        # after a leader change (confluentinc/librdkafka#4953, reproduced against Apache Kafka): a duplicate the
        # broker cannot recognise, since the copy comes with a new producer id
        producer = Producer({"bootstrap.servers": self.bootstrap, "acks": "all", "enable.idempotence": True,
                             "max.in.flight.requests.per.connection": 1, "linger.ms": 5,
                             "message.timeout.ms": self.message_timeout_ms, "retry.backoff.ms": 100})
        while not self._stop.is_set():
            try:
                producer.produce(self.topic, str(self.produced).encode(), partition=self.produced % self.partitions,
                                 on_delivery=self._on_delivery)
                self.produced += 1
            except BufferError:
                pass
            producer.poll(self.interval)
        self.unflushed = producer.flush(self.message_timeout_ms / 1000 + 30)

    def start(self) -> "Ledger":
        self._thread.start()
        return self

    def count(self) -> int:
        return sum(map(len, self.acked.values()))

    def progress(self, what: str, count: int = 100, timeout: float = 60) -> None:
        """Until ``count`` more records are acknowledged."""
        before = self.count()
        wait_until(lambda: self.count() >= before + count, timeout, what=what)

    def stop(self, wait: bool = True) -> None:
        """Stop producing and wait for every record in flight to be acknowledged or to fail (``wait=False``: only
        stop, after a failure elsewhere)."""
        self._stop.set()
        if not wait:
            return
        self._thread.join(self.message_timeout_ms / 1000 + 60)
        assert not self._thread.is_alive(), "the ledger producer did not finish"
        assert self.unflushed == 0, f"{self.unflushed} records neither acknowledged nor failed"

    def check(self, bootstrap: str | None = None, duplicates_allowed: bool = False) -> dict:
        """Read the topic (at ``bootstrap``, the producer's cluster by default): every acknowledged record is there,
        in order per partition. Returns acknowledged, lost, duplicated and out-of-order counts (lost and
        out-of-order must be 0; duplicates only where ``duplicates_allowed``)."""
        records = read_topic(bootstrap or self.bootstrap, self.topic)
        out = {"acknowledged": self.count(), "lost": 0, "duplicated": 0, "out_of_order": 0,
               "delivery_failures": dict(self.failed)}
        copies: dict[tuple[int, int], list[int]] = {}  # (partition, value) -> offsets
        for m in records:
            copies.setdefault((m.partition(), int(m.value())), []).append(m.offset())
        out["duplicate_offsets"] = {f"{p}:{v}": offsets for (p, v), offsets in copies.items() if len(offsets) > 1}
        out["duplicated"] = sum(len(offsets) - 1 for offsets in out["duplicate_offsets"].values())
        for p, acked in self.acked.items():
            seen = [int(m.value()) for m in records if m.partition() == p]
            acked_set = set(acked)
            in_ledger = [v for v in seen if v in acked_set]
            first = list(dict.fromkeys(in_ledger))  # each value's first appearance
            out["out_of_order"] += sum(1 for a, b in zip(first, first[1:]) if b < a)
            out["lost"] += len(acked_set - set(seen))
        assert out["lost"] == 0, f"{out['lost']} acknowledged records lost: {out}"
        assert out["out_of_order"] == 0, f"records out of order: {out}"
        assert duplicates_allowed or out["duplicated"] == 0, f"duplicates: {out}"
        return out
