"""Warehouse load throughput: the brokers → Parquet load (the ``logbus`` Spark source, Avro decoding, Parquet by
date/hour, publication) against Spark reading the same records from a local JSON-lines file and writing the same
Parquet layout, in the same run, on this machine.

Setup: one standalone broker, the schema registry, --messages Avro page views (~100-byte values, 4 partitions)
produced through the AuditedProducer. Then, with one Spark session (``local[2]``), in each run:
  1. broker load: ``spark_jobs.load.load()`` + ``publish()`` for all partitions (timed: read, decode, write, move),
     with the source's default fetch path (PLAINTEXT: whole batches, column-wise parse and Avro decode);
  2. the same load through librdkafka, record by record (the path before issue 20, and the one SSL/SASL loads
     take): the load config's client settings get one more, ``fetch.wait.max.ms=500`` (librdkafka's default,
     so nothing else changes), and any client setting the raw fetcher does not know selects librdkafka;
  3. file baseline: the same records (decoded fields + metadata) as JSON lines on local disk,
     ``spark.read.json`` with the schema given → ``partitionBy(date, hour).parquet`` (timed).
Each side is run --runs times (fresh warehouse each time); medians are reported, MB are the Avro value bytes read
from the brokers (the same payload count for all sides).

With ``--cluster-workers 1,2`` the same broker load (default fetch path, the same records) then runs on a Spark
standalone cluster of that many workers, each started as the topology would (``logbus spark-master``,
``logbus spark-worker --cores --worker-cores --memory --worker-memory``) on loopback: the driver (this process) plans
and publishes, the executors read, decode and write; the job's code reaches them as the pyFiles zip. One cluster
per size, started and stopped in turn (their start-up is not timed), --runs runs on each.

Usage: .venv/bin/python bench/load_benchmark.py [--messages 1000000] [--runs 3] [--cluster-workers 1,2]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO / "tests"), str(REPO / "platform"), str(REPO)]

from support import BrokerProcess, LogbusProcess, RegistryProcess, free_port  # noqa: E402

SCHEMA = {"type": "record", "name": "PageView", "namespace": "bench", "fields": [
    {"name": "member", "type": "long"}, {"name": "page", "type": "string"},
    {"name": "referrer", "type": ["null", "string"], "default": None}, {"name": "time", "type": "long"},
    {"name": "agent", "type": "string"}]}


def produce(bootstrap: str, registry_url: str, topic: str, n: int) -> int:
    from audit import AuditedProducer
    from confluent_kafka.admin import AdminClient, NewTopic
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 4, 1)])[topic].result(30)
    serializer = AvroSerializer(SchemaRegistryClient({"url": registry_url}), json.dumps(SCHEMA))
    producer = AuditedProducer({"bootstrap.servers": bootstrap, "schema.registry.url": registry_url,
                                "linger.ms": 20, "batch.size": 1_000_000, "compression.type": "none",
                                "queue.buffering.max.messages": 1_000_000})
    ctx = SerializationContext(topic, MessageField.VALUE)
    total = 0
    now = int(time.time() * 1000)
    for i in range(n):
        value = serializer({"member": i, "page": f"/jobs/view/{i % 5000}", "referrer": None if i % 3 else "/feed",
                            "time": now + i, "agent": "Mozilla/5.0 (X11; Linux x86_64) logbus-bench"}, ctx)
        total += len(value)
        while True:
            try:
                producer.produce(topic, value, key=str(i % 1000).encode())
                break
            except BufferError:
                producer.poll(0.05)
        if i % 10000 == 0:
            producer.poll(0)
    assert producer.flush(120) == 0
    return total


class StandaloneCluster:
    """``logbus spark-master`` and ``workers`` × ``logbus spark-worker`` on loopback, stopped by pid."""

    def __init__(self, root: Path, workers: int, cores: int, memory: str):
        self.port, self.webui = free_port(), free_port()
        self.url = f"spark://127.0.0.1:{self.port}"
        self.master = LogbusProcess(root / "master", "spark-master", [
            "spark-master", "--host", "127.0.0.1", "--port", str(self.port), "--webui-port", str(self.webui),
            "--work-dir", str(root / "master")])
        self.workers = [LogbusProcess(root / f"worker{i}", "spark-worker", [
            "spark-worker", "--master", self.url, "--host", "127.0.0.1", "--webui-port", str(free_port()),
            "--cores", str(cores), "--memory", memory, "--work-dir", str(root / f"worker{i}")])
            for i in range(workers)]

    def __enter__(self) -> "StandaloneCluster":
        from logbus.spark_cluster import wait_for_workers

        self.master.start()
        for w in self.workers:
            w.start()
        try:
            wait_for_workers("127.0.0.1", self.webui, len(self.workers), timeout=120)
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc) -> None:
        for p in [*self.workers, self.master]:
            p.stop()


def broker_load_seconds(spark, config, root: Path, runs: int, messages: int, label: str) -> list[float]:
    """``runs`` broker loads (load + publish) into fresh warehouses under ``root``; their wall times."""
    from spark_jobs.load import load, plan
    from spark_jobs.warehouse import Warehouse

    times = []
    for run in range(runs):
        wh = Warehouse(spark, (root / f"wh{run}").resolve().as_uri())
        t = time.perf_counter()
        summary = load(spark, config, wh, 1, plan(config, wh.ledger()))
        wh.publish(1, summary)
        times.append(time.perf_counter() - t)
        assert summary["rows"]["pageviews"] == messages, summary
        print(f"run {run}: broker load on {label} {times[-1]:.1f} s {summary['seconds']}", flush=True)
    return times


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--out", default=str(REPO / "bench" / "results"))
    parser.add_argument("--cluster-workers", default="", help="comma list of standalone cluster sizes to run the "
                                                              "broker load on too, e.g. 1,2 (default: none)")
    parser.add_argument("--worker-cores", type=int, default=1, help="cores of each cluster worker (default 1)")
    parser.add_argument("--worker-memory", default="2g", help="memory of each cluster worker and its executor")
    args = parser.parse_args()
    sizes = [int(n) for n in args.cluster_workers.split(",") if n.strip()]
    from spark_jobs.config import LoadConfig
    from spark_jobs.load import load, plan, session
    from spark_jobs.warehouse import Warehouse

    results: dict = {"command": "python bench/load_benchmark.py " + " ".join(sys.argv[1:]), "messages": args.messages,
                     "runs": args.runs, "loadavg_before": [round(x, 2) for x in os.getloadavg()]}
    with tempfile.TemporaryDirectory(prefix="logbus-load-bench-") as work:
        work = Path(work)
        broker = BrokerProcess(work / "broker", num_partitions=4).start()
        registry = RegistryProcess(work / "registry", broker.bootstrap, kafkastore_topic_replication_factor="1").start()
        spark = None
        try:
            t = time.perf_counter()
            value_bytes = produce(broker.bootstrap, registry.url, "pageviews", args.messages)
            results["produce_seconds"] = round(time.perf_counter() - t, 2)
            results["value_bytes"] = value_bytes
            config_values = {"bootstrap.servers": broker.bootstrap, "schema.registry.url": registry.url,
                             "warehouse.path": str(work / "wh0"), "topics": "pageviews",
                             "spark.master": "local[2]", "spark.driver.memory": "4g"}
            config = LoadConfig(config_values)
            spark = session(config)
            rdk_config = LoadConfig(config_values)
            rdk_config.client_conf = {**rdk_config.client_conf, "fetch.wait.max.ms": "500"}
            broker_times, rdk_times, file_times, phases = [], [], [], []
            cluster_times: dict[int, list[float]] = {}
            jsonl = work / "pageviews.jsonl"
            for run in range(args.runs):
                wh = Warehouse(spark, (work / f"wh{run}").resolve().as_uri())
                ranges = plan(config, wh.ledger())
                t = time.perf_counter()
                summary = load(spark, config, wh, 1, ranges)
                wh.publish(1, summary)
                broker_times.append(time.perf_counter() - t)
                assert summary["rows"]["pageviews"] == args.messages, summary
                print(f"run {run}: broker load {broker_times[-1]:.1f} s {summary['seconds']}", flush=True)
                phases.append(summary["seconds"]["pageviews"])
                rdk_wh = Warehouse(spark, (work / f"rdk{run}").resolve().as_uri())
                t = time.perf_counter()
                rdk_summary = load(spark, rdk_config, rdk_wh, 1, plan(rdk_config, rdk_wh.ledger()))
                rdk_wh.publish(1, rdk_summary)
                rdk_times.append(time.perf_counter() - t)
                assert rdk_summary["rows"]["pageviews"] == args.messages, rdk_summary
                print(f"run {run}: broker load via librdkafka {rdk_times[-1]:.1f} s {rdk_summary['seconds']}",
                      flush=True)
                if run == 0:  # the baseline's input: the loaded rows, as JSON lines (not timed)
                    from pyspark.sql import functions as F

                    loaded = spark.read.parquet(wh.path("topic=pageviews"))
                    (loaded.drop("date", "hour").withColumn("_timestamp", F.col("_timestamp").cast("string"))
                     .coalesce(1).write.mode("overwrite").json(str(work / "jsonl")))
                    part = next((work / "jsonl").glob("part-*.json"))
                    shutil.move(str(part), jsonl)
                    results["jsonl_bytes"] = jsonl.stat().st_size
                    schema = loaded.drop("date", "hour").schema
                t = time.perf_counter()
                from pyspark.sql import functions as F

                df = spark.read.schema(schema).json(str(jsonl))
                (df.withColumn("date", F.date_format("_timestamp", "yyyy-MM-dd"))
                 .withColumn("hour", F.date_format("_timestamp", "HH"))
                 .write.mode("overwrite").partitionBy("date", "hour").parquet(str(work / f"file{run}")))
                file_times.append(time.perf_counter() - t)
                print(f"run {run}: JSON-lines file {file_times[-1]:.1f} s", flush=True)
            for n in sizes:
                if spark is not None:
                    spark.stop()
                    spark = None
                with StandaloneCluster(work / f"cluster{n}", n, args.worker_cores, args.worker_memory) as cluster:
                    cluster_config = LoadConfig({**config_values, "spark.master": cluster.url,
                                                 "spark.executor.memory": args.worker_memory,
                                                 "spark.executor.cores": str(args.worker_cores),
                                                 "spark.cores.max": str(n * args.worker_cores)})
                    spark = session(cluster_config)
                    try:
                        cluster_times[n] = broker_load_seconds(spark, cluster_config, work / f"on-cluster{n}",
                                                               args.runs, args.messages, f"{n} worker(s)")
                    finally:
                        spark.stop()
                        spark = None
        finally:
            if spark is not None:
                spark.stop()
            registry.stop()
            broker.stop()
    results["loadavg_after"] = [round(x, 2) for x in os.getloadavg()]
    b, f = statistics.median(broker_times), statistics.median(file_times)
    k = statistics.median(rdk_times)
    mb = value_bytes / 1e6
    results.update({
        "broker_seconds": [round(x, 2) for x in broker_times], "file_seconds": [round(x, 2) for x in file_times],
        "broker_msg_per_s": round(args.messages / b), "broker_mb_per_s": round(mb / b, 2),
        "file_msg_per_s": round(args.messages / f), "file_mb_per_s": round(mb / f, 2),
        "librdkafka_seconds": [round(x, 2) for x in rdk_times], "librdkafka_msg_per_s": round(args.messages / k),
        "librdkafka_mb_per_s": round(mb / k, 2), "ratio_broker_to_file": round(f / b, 3),
        "ratio_librdkafka_to_file": round(f / k, 3), "speedup_raw_over_librdkafka": round(k / b, 2),
        "broker_phases": phases})
    for n, times in cluster_times.items():
        c = statistics.median(times)
        results.setdefault("cluster", {})[str(n)] = {
            "workers": n, "worker_cores": args.worker_cores, "worker_memory": args.worker_memory,
            "seconds": [round(x, 2) for x in times], "msg_per_s": round(args.messages / c), "mb_per_s": round(mb / c, 2),
            "ratio_to_local": round(b / c, 3)}
    cluster_rows = "".join(
        f"| brokers → decode → Parquet + publish on a standalone cluster, {r['workers']} worker"
        f"{'s' if r['workers'] > 1 else ''} × {r['worker_cores']} core ({r['worker_memory']}) "
        f"| {statistics.median(r['seconds']):.1f} ({', '.join(map(str, r['seconds']))}) "
        f"| {r['msg_per_s']:,} | {r['mb_per_s']} |\n" for r in results.get("cluster", {}).values())
    cluster_note = ("Standalone cluster runs: the same broker load with `spark.master=spark://...`, a master and "
                    "the workers on this machine (`logbus spark-master`, `logbus spark-worker`), the driver in the "
                    "benchmark process; throughput relative to the local[2] row: "
                    + ", ".join(f"{r['workers']} worker{'s' if r['workers'] > 1 else ''} {r['ratio_to_local']}x"
                                for r in results["cluster"].values()) + ".\n\n") if cluster_times else ""
    out = Path(args.out)
    (out / "load_benchmark.json").write_text(json.dumps(results, indent=2) + "\n")
    (out / "load_benchmark.md").write_text(
        f"# Warehouse load benchmark\n\nCommand: `{results['command']}` (2-core machine, Spark local[2]"
        f"{'; the cluster rows: a Spark standalone cluster on the same machine' if cluster_times else ''}; load "
        f"average {results['loadavg_before'][0]:.2f} before the run, {results['loadavg_after'][0]:.2f} after).\n\n"
        f"{args.messages:,} Avro page views ({mb:.1f} MB of Avro values, 4 partitions, one broker); medians of "
        f"{args.runs} runs.\n\n"
        "| path | seconds (runs) | msg/s | MB/s (Avro values) |\n|---|---|---|---|\n"
        f"| brokers → decode → Parquet + publish (`logbus` source) | {b:.1f} "
        f"({', '.join(map(str, results['broker_seconds']))}) "
        f"| {results['broker_msg_per_s']:,} | {results['broker_mb_per_s']} |\n"
        f"| brokers → Parquet through librdkafka, record by record (the path before; SSL/SASL loads) | {k:.1f} "
        f"({', '.join(map(str, results['librdkafka_seconds']))}) "
        f"| {results['librdkafka_msg_per_s']:,} | {results['librdkafka_mb_per_s']} |\n"
        f"| local JSON-lines file → Parquet (`spark.read.json`) | {f:.1f} "
        f"({', '.join(map(str, results['file_seconds']))}) "
        f"| {results['file_msg_per_s']:,} | {results['file_mb_per_s']} |\n"
        + cluster_rows + "\n" + cluster_note +
        f"Ratio (broker load throughput / file read throughput): **{results['ratio_broker_to_file']}x** "
        f"(through librdkafka: {results['ratio_librdkafka_to_file']}x; the raw fetch path is "
        f"{results['speedup_raw_over_librdkafka']}x the librdkafka path).\n\n"
        "Phases of the default path's load per run (seconds; `read_decode_write` is the Parquet write that "
        "pulls the records through the source, `counts` the audit tier counts):\n\n"
        + "".join(f"- run {i}: {p}\n" for i, p in enumerate(phases)))
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 3.4))
    clusters = list(results.get("cluster", {}).values())
    fig.set_size_inches(7 + 1.6 * len(clusters), 3.4)
    ax.bar(["brokers → Parquet\n(raw fetch, bulk decode)", "brokers → Parquet\n(librdkafka, per record)",
            "JSON-lines file → Parquet"]
           + [f"brokers → Parquet\ncluster, {r['workers']} worker{'s' if r['workers'] > 1 else ''}" for r in clusters],
           [results["broker_msg_per_s"], results["librdkafka_msg_per_s"], results["file_msg_per_s"]]
           + [r["msg_per_s"] for r in clusters],
           color=["#2b6cb0", "#90cdf4", "#999999"] + ["#276749", "#68d391", "#9ae6b4"][:len(clusters)])
    ax.set_ylabel("messages / s")
    ax.set_title(f"Warehouse load, {args.messages:,} records (median of {args.runs})")
    fig.tight_layout()
    fig.savefig(out / "load_benchmark.png", dpi=100)
    print(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
