"""The warehouse load on a real Spark standalone cluster: a master and two workers started with ``logbus
spark-master`` / ``logbus spark-worker`` (Spark's own daemons from pyspark), a real broker and registry.

- the partitions are read on the cluster's executors (their task counts in the application's REST API, both
  workers' executors busy); ``kill -9`` of an executor JVM in the middle of that load: Spark retries, the load
  publishes every record once, and the warehouse equals a ``local[2]`` load of the same records exactly;
- the executors import the job's code from the pyFiles zip alone (no checkout on their path);
- SIGTERM stops the daemons (exit 143, Java's for SIGTERM) and a worker's executors with it.
"""

from __future__ import annotations

import json
import os
import signal
import struct
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pyarrow.dataset as ds
import pytest
from audit import AuditedProducer
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from support import LogbusProcess, free_port, wait_until

from logbus.spark_cluster import alive_workers, master_status, wait_for_workers
from spark_jobs import packaging

pytestmark = [pytest.mark.integration]
SCHEMA = json.dumps({"type": "record", "name": "PageView", "namespace": "demo", "fields": [
    {"name": "member", "type": "long"}, {"name": "url", "type": "string"},
    {"name": "referrer", "type": ["null", "string"], "default": None}]})
EXECUTOR_CLASS = "org.apache.spark.executor.CoarseGrainedExecutorBackend"


def _cmdline(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return []


def _ppid(pid: int) -> int | None:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None


def executor_pids(worker_pids: set[int]) -> dict[int, list[str]]:
    """{pid: cmdline} of the executor JVMs the given workers started (their children)."""
    out = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and _ppid(int(entry.name)) in worker_pids:
            cmd = _cmdline(int(entry.name))
            if EXECUTOR_CLASS in cmd:
                out[int(entry.name)] = cmd
    return out


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}").exists() and "Z" not in Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1][:3]


class SparkCluster:
    def __init__(self, root: Path, workers: int = 2):
        self.root = root
        self.port, self.webui = free_port(), free_port()
        self.url = f"spark://127.0.0.1:{self.port}"
        self.master = LogbusProcess(root / "master", "spark-master", [
            "spark-master", "--host", "127.0.0.1", "--port", str(self.port), "--webui-port", str(self.webui),
            "--work-dir", str(root / "master")])
        self.worker_ui = [free_port() for _ in range(workers)]
        self.workers = [LogbusProcess(root / f"worker{i}", "spark-worker", [
            "spark-worker", "--master", self.url, "--host", "127.0.0.1", "--webui-port", str(ui), "--cores", "1",
            "--memory", "1g", "--work-dir", str(root / f"worker{i}")]) for i, ui in enumerate(self.worker_ui)]
        self.seen_executors: set[int] = set()

    def start(self) -> "SparkCluster":
        self.master.start()
        for w in self.workers:
            w.start()
        wait_for_workers("127.0.0.1", self.webui, len(self.workers), timeout=90)
        return self

    def worker_pids(self) -> set[int]:
        return {w.proc.pid for w in self.workers if w.proc is not None and w.proc.poll() is None}

    def executors(self) -> dict[int, list[str]]:
        found = executor_pids(self.worker_pids())
        self.seen_executors |= set(found)
        return found

    def stop(self) -> None:
        self.executors()
        for w in self.workers:
            w.stop()
        self.master.stop()
        for pid in self.seen_executors:  # a worker kills its executors when stopped; by pid if one did not
            if _alive(pid) and EXECUTOR_CLASS in _cmdline(pid):
                os.kill(pid, signal.SIGKILL)

    def logs(self) -> str:
        return "\n".join(p.log_text()[-3000:] for p in [self.master, *self.workers])


@pytest.fixture(scope="module")
def spark_cluster(tmp_path_factory):
    cluster = SparkCluster(tmp_path_factory.mktemp("spark"))
    try:
        yield cluster.start()
    finally:
        cluster.stop()


@pytest.fixture
def driver():
    """This process as the Spark driver; its JVM (py4j's gateway) is stopped by pid afterwards."""
    sessions = []
    yield sessions
    from pyspark import SparkContext

    for spark in sessions:
        spark.stop()
    gateway = SparkContext._gateway
    if gateway is not None:
        proc = getattr(gateway, "proc", None)
        gateway.shutdown()
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        SparkContext._gateway = SparkContext._jvm = None


def produce(bootstrap: str, registry_url: str, topic: str, count: int, junk: bool = True) -> list[dict]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 4, 1)])[topic].result(30)
    serializer = AvroSerializer(SchemaRegistryClient({"url": registry_url}), SCHEMA)
    producer = AuditedProducer({"bootstrap.servers": bootstrap, "schema.registry.url": registry_url,
                                "audit.window.ms": 1000, "linger.ms": 20})
    ctx = SerializationContext(topic, MessageField.VALUE)
    sent = []
    for i in range(count):
        record = {"member": i, "url": f"/jobs/{i % 13}", "referrer": None if i % 3 else f"r{i}"}
        while True:
            try:
                producer.produce(topic, serializer(record, ctx), key=str(i).encode())
                break
            except BufferError:
                producer.poll(0.05)
        sent.append(record)
    assert producer.flush(60) == 0
    if junk:  # an unknown schema id: one quarantine row
        bad = Producer({"bootstrap.servers": bootstrap})
        bad.produce(topic, b"\x00" + struct.pack(">I", 424242) + b"\x02\x04ab", key=b"bad", partition=2)
        assert bad.flush(10) == 0
    return sent


def load_config(warehouse: Path, broker, registry, topic: str, master: str, **spark: str):
    from spark_jobs.config import LoadConfig

    return LoadConfig({"bootstrap.servers": broker.bootstrap, "schema.registry.url": registry.url,
                       "warehouse.path": str(warehouse), "topics": topic, "spark.master": master,
                       "audit.window.ms": "1000", "audit.grace.ms": "0", "audit.tiers": "warehouse",
                       "audit.cluster.offline.bootstrap.servers": broker.bootstrap,
                       "load.max.records.per.partition": "500", **spark})


def cluster_conf(ui_port: int) -> dict[str, str]:
    return {"spark.ui.enabled": "true", "spark.ui.port": str(ui_port), "spark.executor.memory": "512m",
            "spark.executor.cores": "1", "spark.cores.max": "2"}


def rest(port: int, path: str, timeout: float = 60):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/{path}", timeout=timeout) as response:
        return json.loads(response.read())


def rest_or_none(port: int, path: str, timeout: float = 15):
    """``rest``, or None while the driver's UI is not up yet or is slow to answer (a loaded machine: CI)."""
    try:
        return rest(port, path, timeout)
    except OSError:
        return None


def executors_of_app(ui_port: int) -> list[dict]:
    """Every executor of the application (dead ones included) as its UI's REST API reports them."""
    app = rest(ui_port, "applications")[0]["id"]
    return rest(ui_port, f"applications/{app}/allexecutors")


def warehouse_rows(warehouse: Path, what: str) -> list[dict]:
    root = warehouse / what
    if not root.exists():
        return []
    rows = ds.dataset(str(root), format="parquet", partitioning="hive").to_table().to_pylist()
    return sorted(rows, key=lambda r: (r["_partition"], r["_offset"]))


def published(warehouse: Path, topic: str) -> dict:
    """What a load published, with what may differ between two loads of the same records taken out (file names
    carry no data; times)."""
    manifest = json.loads((warehouse / "_manifests" / "load-000001.json").read_text())
    counts = sorted(json.loads((warehouse / "_audit" / "counts" / "load-000001.json").read_text()),
                    key=lambda e: (e["producer_id"], e["window_start"]))
    return {"rows": warehouse_rows(warehouse, f"topic={topic}"),
            "quarantine": warehouse_rows(warehouse, f"_quarantine/topic={topic}"),
            "ledger": json.loads((warehouse / "_ledger.json").read_text())["offsets"],
            "manifest": {k: manifest[k] for k in ("load_id", "ranges", "rows", "quarantined")},
            "counts": counts}


@pytest.mark.timeout(60)
def test_the_executors_import_the_jobs_code_from_the_zip_alone(tmp_path):
    """A Python without this checkout on its path (no repository, no platform/, no editable install's entry)
    imports every module the tasks use from the zip, as an executor on another machine does."""
    path = packaging.build(tmp_path)
    modules = ["spark_jobs.source", "spark_jobs.fetch", "spark_jobs.columnar", "spark_jobs.avro_bulk",
               "spark_jobs.decode", "broker.protocol.codec", "broker.protocol.messages", "broker.protocol.records",
               "broker.protocol.record_reader", "mirror.wire", "settings.registry_client"]
    script = (
        "import importlib, sys\n"
        f"sys.path[:] = [p for p in sys.path if p and p not in {[str(packaging.REPO), str(packaging.PLATFORM)]!r}]\n"
        f"sys.path.insert(0, {str(path)!r})\n"
        f"for name in {modules!r}:\n"
        "    module = importlib.import_module(name)\n"
        f"    assert module.__file__.startswith({str(path)!r}), (name, module.__file__)\n"
        "print('ok')\n")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=50, cwd=tmp_path,
                         env={"PATH": os.environ["PATH"]})
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-3000:]


@pytest.mark.timeout(600)
def test_a_cluster_load_with_an_executor_killed_mid_load_reads_on_both_workers_and_equals_a_local_load(
        spark_cluster, broker, registry, driver, tmp_path):
    """One cluster load with ``kill -9`` of an executor JVM once it finished a task (Spark retries, every record is
    published once), its tasks on both workers' executors and none in the driver; then a ``local[2]`` load of the
    same records: both publish the same rows, quarantine, ledger, manifest and counts. (One load for both checks:
    a cluster load costs about two minutes of the suite on two cores.)"""
    from spark_jobs.load import run_cycle, session

    reg = registry(broker.bootstrap)
    sent = produce(broker.bootstrap, reg.url, "pageviews", 30000)
    ui = free_port()
    config = load_config(tmp_path / "wh-cluster", broker, reg, "pageviews", spark_cluster.url, **cluster_conf(ui))
    spark = session(config)
    driver.append(spark)
    done = threading.Event()
    killed: dict = {}

    def kill_an_executor_once_tasks_ran() -> None:
        """As soon as an executor finished a task of the load: ``kill -9`` of its JVM, found by its executor
        id and application id among the workers' children."""
        try:
            app = wait_until(lambda: rest_or_none(ui, "applications"), 120, interval=0.2,
                             what="the application's UI")
            while not done.is_set():
                executors = rest_or_none(ui, f"applications/{app[0]['id']}/executors")
                if executors is None:  # the driver's UI slow to answer on a loaded machine (CI): ask again
                    time.sleep(0.2)
                    continue
                busy = [e for e in executors if e["id"] != "driver" and e["completedTasks"] > 0]
                if busy:
                    victim = busy[0]
                    for pid, cmd in spark_cluster.executors().items():
                        if app[0]["id"] in cmd and cmd[cmd.index("--executor-id") + 1] == victim["id"]:
                            os.kill(pid, signal.SIGKILL)
                            killed.update(pid=pid, executor=victim["id"], tasks=victim["completedTasks"],
                                          load_running=not done.is_set())
                            return
                time.sleep(0.1)
        except Exception as exc:  # reported by the test's assertion
            killed["error"] = repr(exc)

    killer = threading.Thread(target=kill_an_executor_once_tasks_ran, daemon=True)
    killer.start()
    said: list[str] = []
    try:
        out = run_cycle(config, spark=spark, say=said.append)
    finally:
        done.set()
        killer.join(30)
    assert killed.get("load_running"), (killed, said)
    assert out["load"]["rows"] == {"pageviews": 30000} and out["load"]["quarantined"] == {"pageviews": 1}, said
    executors = executors_of_app(ui)
    spark.stop()
    by_id = {e["id"]: e for e in executors}
    victim = by_id[killed["executor"]]
    assert not victim["isActive"] and victim["completedTasks"] >= killed["tasks"] > 0
    assert len([e for e in by_id if e != "driver"]) >= 3, executors  # a replacement executor was started
    workers = {str(ui_port): 0 for ui_port in spark_cluster.worker_ui}
    for e in executors:
        if e["id"] == "driver":
            assert e["totalTasks"] == 0, e  # nothing ran in the driver
            continue
        port = e["executorLogs"]["stdout"].split("//", 1)[1].split("/", 1)[0].rsplit(":", 1)[1]
        workers[port] += e["totalTasks"]
    assert all(n > 0 for n in workers.values()), (workers, executors)  # 60 ranges of 500 records: work for both
    status = master_status("127.0.0.1", spark_cluster.webui)
    assert [a["name"] for a in status["completedapps"]] == ["logbus-load"] and len(alive_workers(status)) == 2
    report = out["report"]["rows"]
    assert report and all(r["status"] == "complete" for r in report) and sum(r["expected"] for r in report) == 30000

    local = load_config(tmp_path / "wh-local", broker, reg, "pageviews", "local[2]")
    spark = session(local)
    driver.append(spark)
    run_cycle(local, spark=spark, say=said.append)
    spark.stop()
    on_cluster, on_local = published(tmp_path / "wh-cluster", "pageviews"), published(tmp_path / "wh-local",
                                                                                       "pageviews")
    rows = on_cluster["rows"]
    assert len(rows) == 30000 and len({(r["_partition"], r["_offset"]) for r in rows}) == 30000
    assert len(on_cluster["quarantine"]) == 1
    assert sorted(r["member"] for r in rows) == [r["member"] for r in sent]
    assert on_cluster == on_local
    assert on_cluster["manifest"]["load_id"] == 1 and sum(on_cluster["ledger"]["pageviews"].values()) == 30001


@pytest.mark.timeout(120)
def test_sigterm_stops_the_daemons_and_a_workers_executors(spark_cluster, driver):
    """Last in this module: stops the module's cluster (its fixture then finds nothing left to stop)."""
    from pyspark.sql import SparkSession

    spark = (SparkSession.builder.master(spark_cluster.url).appName("idle").config("spark.ui.enabled", "false")
             .config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
             .config("spark.executor.memory", "512m").config("spark.cores.max", "2").getOrCreate())
    driver.append(spark)
    first, rest_ = spark_cluster.workers[0], spark_cluster.workers[1:]
    executors = wait_until(lambda: {pid for pid in spark_cluster.executors() if _ppid(pid) == first.proc.pid}, 90,
                           what="an executor on the first worker")
    first.proc.send_signal(signal.SIGTERM)
    assert first.proc.wait(30) == 143  # the JVM's own exit code on SIGTERM: the verb exec'd it
    assert wait_until(lambda: not any(_alive(pid) for pid in executors), 30, what="its executor stopped")
    assert wait_until(lambda: len(alive_workers(master_status("127.0.0.1", spark_cluster.webui))) == 1, 30)
    spark.stop()
    for daemon in [*rest_, spark_cluster.master]:
        daemon.proc.send_signal(signal.SIGTERM)
        assert daemon.proc.wait(30) == 143
    assert master_status("127.0.0.1", spark_cluster.webui) is None
