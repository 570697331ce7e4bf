"""One load cycle: plan → load → count → reconcile. ``logbus load --config FILE`` and the Airflow DAG both call
:func:`run_cycle` (or its steps).

- plan: per topic-partition, [ledger offset (or the log start), high watermark now); the time of that cut
  (``planned_at``) goes with the plan into the load's manifest, as the time the warehouse tier is judged against;
- load: read the ranges with the ``logbus`` data source, decode the Avro values (quarantine what cannot be
  decoded), write Parquet partitioned by date/hour into the load's staging directory, and the warehouse tier
  counts (per topic, window, producer: count and sequence ranges; taken in the same pass,
  :mod:`spark_jobs.tier_counts`) next to it;
- publish: move into place, manifest, then ledger (see :mod:`spark_jobs.warehouse`);
- reconcile: producers' and tiers' events from ``_audit`` of the configured clusters plus the warehouse counts of
  every published load → ``_audit/report.json``, ``report.parquet`` and ``report.html`` under the warehouse.
"""

from __future__ import annotations

import json
import os
import sys
import time
from spark_jobs import faults
from spark_jobs.config import LoadConfig


def session(config: LoadConfig, master: str | None = None):
    """A Spark session with the ``logbus`` source registered, on ``master`` or else ``config.master`` (``local[*]``
    or a standalone cluster's ``spark://host:port``). The code the tasks import reaches the Python workers as one
    zip through Spark's own mechanism (:mod:`spark_jobs.packaging`, ``addPyFile``), the same on every master; their
    Python is the driver's (``PYSPARK_PYTHON``, default this interpreter), which a cluster's machines must have at
    that path.

    The driver listens on 127.0.0.1 (``spark.driver.host``/``bindAddress``): executors on this machine reach it; on
    other machines set both to an address they can reach (any ``spark.*`` key of the config wins)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    from spark_jobs import packaging

    builder = (SparkSession.builder.master(master or config.master).appName("logbus-load")
               .config("spark.sql.session.timeZone", "UTC").config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.shuffle.partitions", "4").config("spark.driver.bindAddress", "127.0.0.1")
               .config("spark.driver.host", "127.0.0.1"))
    for key, value in config.spark.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    spark.sparkContext.addPyFile(str(packaging.build()))
    from spark_jobs.source import LogbusDataSource

    spark.dataSource.register(LogbusDataSource)
    return spark


def plan(config: LoadConfig, ledger: dict) -> dict[str, dict[str, list[int]]]:
    """{topic: {partition: [from, until]}} from the ledger to the high watermarks, only non-empty ranges."""
    from spark_jobs.source import _Watermarks, consumer_config, plan_ranges

    offsets = ledger["offsets"]
    marks = _Watermarks(consumer_config({"bootstrap.servers": config.bootstrap,
                                         **{f"kafka.{k}": v for k, v in config.client_conf.items()}}))
    try:
        topics = [t for t in sorted(marks.topics()) if config.wants(t)]
        if not topics:
            return {}
        options = {"subscribe": ",".join(topics), "endingOffsets": "latest",
                   "startingOffsets": json.dumps({t: offsets.get(t, {}) for t in topics if offsets.get(t)})
                   if any(offsets.get(t) for t in topics) else "earliest"}
        ranges = plan_ranges(options, marks)
    finally:
        marks.close()
    out: dict[str, dict[str, list[int]]] = {}
    for topic, p, start, until in ranges:
        out.setdefault(topic, {})[str(p)] = [start, until]
    return out


def _reader_schema(registry: dict, topic: str) -> dict | None:
    from confluent_kafka.schema_registry.error import SchemaRegistryError

    from settings.registry_client import client

    try:
        latest = client(registry).get_latest_version(f"{topic}-value")
    except SchemaRegistryError as exc:
        if exc.http_status_code == 404:
            return None
        raise
    return json.loads(latest.schema.schema_str)


def load_topic(spark, config: LoadConfig, staging: str, topic: str, ranges: dict[str, list[int]]) -> dict:
    """Read, decode and write one topic's ranges into ``staging``; returns rows, quarantined and count events.

    One pass: the source's reads write the data and take the warehouse tier's counts on the way
    (:mod:`spark_jobs.tier_counts`); the write's observed metrics give the rows and the undecodable ones. Only
    when some record could not be decoded are the ranges read a second time, for the quarantine."""
    from pyspark.sql import Observation
    from pyspark.sql import functions as F

    from spark_jobs import tier_counts
    from spark_jobs.decode import ERROR, META
    from spark_jobs.source import counting

    reader = _reader_schema(config.registry, topic)
    secured = {f"kafka.{k}": v for k, v in config.client_conf.items()}  # Spark's habit: kafka.<consumer key>
    secured.update({f"schema.registry.{k}": v for k, v in config.registry.items() if k not in ("url",
                                                                                             "basic.auth.credentials.source")})
    counts = spark.sparkContext.accumulator({}, tier_counts.ByRange())
    spark.dataSource.register(counting(counts, config.window_ms))
    df = (spark.read.format("logbus_counted").options(**secured).option("bootstrap.servers", config.bootstrap)
          # the planned partitions only: a partition with nothing new is not in the plan, and unnamed partitions
          # of a subscribed topic would be read from earliest to latest
          .option("assign", json.dumps({topic: sorted(int(p) for p in ranges)}))
          .option("startingOffsets", json.dumps({topic: {p: r[0] for p, r in ranges.items()}}))
          .option("endingOffsets", json.dumps({topic: {p: r[1] for p, r in ranges.items()}}))
          .option("maxRecordsPerPartition", str(config.max_records_per_partition))
          .option("valueFormat", "confluent-avro").option("schema.registry.url", config.registry_url)
          .option("valueSchema", json.dumps(reader)).load())
    dated = (df.withColumn("date", F.date_format("_timestamp", "yyyy-MM-dd"))
             .withColumn("hour", F.date_format("_timestamp", "HH")))
    seen = Observation(f"load-{topic}")
    observed = dated.observe(seen, F.count(F.when(F.col("_error").isNull(), 1)).alias("rows"),
                             F.count(F.when(F.col("_error").isNotNull(), 1)).alias("quarantined"))
    t0 = time.perf_counter()
    (observed.filter(F.col("_error").isNull()).drop("_error", "_value")
     .write.mode("overwrite").partitionBy("date", "hour").parquet(f"{staging}/data/topic={topic}"))
    t1 = time.perf_counter()
    rows, quarantined = seen.get["rows"], seen.get["quarantined"]
    if quarantined:
        written = dict(counts.value)
        bad = dated.filter(F.col("_error").isNotNull()).select(*[f.name for f in META + ERROR], "date", "hour")
        bad.write.mode("overwrite").partitionBy("date", "hour").parquet(f"{staging}/quarantine/topic={topic}")
        if not tier_counts.same(written, counts.value):  # the second read saw other records (compaction)
            raise RuntimeError(f"{topic}: the ranges read differently for the quarantine than for the data; "
                               "the load is not published")
    t2 = time.perf_counter()
    events = tier_counts.events(counts.value, topic, ranges, config.window_ms)
    t3 = time.perf_counter()
    return {"rows": rows, "quarantined": quarantined, "events": events,
            "seconds": {"read_decode_write": round(t1 - t0, 2), "quarantine": round(t2 - t1, 2),
                        "counts": round(t3 - t2, 2)}}


def load(spark, config: LoadConfig, wh, load_id: int, ranges: dict, planned_at: float | None = None) -> dict:
    """Stage one load; ``planned_at`` (epoch seconds): when the plan cut ``ranges``, kept in the manifest."""
    staging = wh.staging(load_id)
    wh.delete(staging)
    summary = {"load_id": load_id, "ranges": ranges, "rows": {}, "quarantined": {}, "started_at": time.time()}
    if planned_at is not None:
        summary["planned_at"] = planned_at
    events = []
    for topic in sorted(ranges):
        out = load_topic(spark, config, staging, topic, ranges[topic])
        summary["rows"][topic], summary["quarantined"][topic] = out["rows"], out["quarantined"]
        summary.setdefault("seconds", {})[topic] = out["seconds"]
        summary.setdefault("bytes", {})[topic] = wh.size(f"{staging}/data/topic={topic}")  # Parquet written
        events.extend(out["events"])
        faults.point("load.topic_written")
    wh.write_text(f"{staging}/counts.json", json.dumps(events))
    summary["finished_at"] = time.time()
    faults.point("load.staged")
    return summary


def warehouse_events(wh) -> list[dict]:
    """Every published load's counts merged per (topic, window, producer), as TIER events of tier 'warehouse'."""
    from audit.ranges import RangeSet

    merged: dict[tuple, dict] = {}
    for f in wh.list_files(wh.path("_audit", "counts")):
        if not f.endswith(".json"):
            continue
        for e in json.loads(wh.read_text(f)):
            key = (e["topic"], e["window_start"], e["producer_id"])
            m = merged.setdefault(key, {"count": 0, "seqs": RangeSet(), "end": e["window_end"]})
            m["count"] += e["count"]
            for a, b in e["sequences"]:
                m["seqs"].add(a, b)
    return [{"kind": "TIER", "tier": "warehouse", "producer_id": pid, "host": "", "topic": topic,
             "window_start": start, "window_end": m["end"], "count": m["count"], "sequences": m["seqs"].as_list(),
             "source": [], "emitted_at": 0}
            for (topic, start, pid), m in merged.items()]


def warehouse_cut_ms(manifests: list[dict]) -> int:
    """When the offsets of the last published load were cut (epoch ms): its plan's ``planned_at``. The load task
    starts later (in Airflow another task, after a Spark start-up), and windows that closed in between are not in
    the warehouse yet. Manifests written before ``planned_at`` existed fall back to the load's ``started_at``."""
    if not manifests:
        return 0
    last = manifests[-1]
    cut = last.get("planned_at")
    return int((last["started_at"] if cut is None else cut) * 1000)


def pending_after_cut(rows: list[dict], cut_ms: int, grace_ms: int) -> None:
    """The warehouse holds what the last load planned: a warehouse row of a window that had not closed (plus the
    grace period) when the offsets were cut is pending there, not lost."""
    for r in rows:
        if r["tier"] == "warehouse" and r["status"] == "lost" and r["window_end"] + grace_ms > cut_ms:
            r["status"] = "pending"


def reconcile_report(config: LoadConfig, wh) -> dict:
    from audit.collector import read_once
    from audit.reconcile import reconcile
    from audit.render import render_page

    store = (read_once(config.audit_clusters, config.registry, client_conf=config.client_conf)
             if config.audit_clusters else None)
    events = (store.events() if store else []) + warehouse_events(wh)
    rows = [r.as_dict() for r in reconcile(events, int(time.time() * 1000), config.grace_ms, config.tiers)]
    rows = [r for r in rows if config.wants(r["topic"])]
    pending_after_cut(rows, warehouse_cut_ms(wh.manifests()), config.grace_ms)
    report = {"generated_at": int(time.time() * 1000), "tiers": config.tiers, "grace_ms": config.grace_ms,
              "malformed": store.stats()["malformed_by_reason"] if store else {}, "rows": rows}
    wh.write_text(wh.path("_audit", "report.json"), json.dumps(report))
    wh.write_text(wh.path("_audit", "report.html"), render_page(rows, config.tiers, title="logbus audit (warehouse)"))
    if rows:
        write_report_parquet(wh, rows)
    return report


def write_report_parquet(wh, rows: list[dict]) -> None:
    """``_audit/report.parquet``: a directory of one Parquet file, as Spark writes one (Spark, pandas and pyarrow
    read it), made by pyarrow (a report is small; no Spark job for it), columns in name order as Spark's
    ``createDataFrame`` of dicts made them. Written beside, then moved in place of the old one (not atomic: a crash
    in between leaves no report until the next reconcile, as Spark's overwrite did)."""
    import io

    import pyarrow as pa
    import pyarrow.parquet as pq

    flat = [dict(sorted({**r, "missing_sequences": json.dumps(r["missing_sequences"])}.items())) for r in rows]
    out = io.BytesIO()
    pq.write_table(pa.Table.from_pylist(flat), out, compression="snappy")
    target = wh.path("_audit", "report.parquet")
    fresh = target + ".new"
    wh.delete(fresh)
    wh.write_bytes(f"{fresh}/part-00000.snappy.parquet", out.getvalue())
    wh.delete(target)
    wh.move(fresh, target)


def status_counts(rows: list[dict]) -> dict[str, int]:
    out: dict[str, int] = {}
    for r in rows:
        out[r["status"]] = out.get(r["status"], 0) + 1
    return dict(sorted(out.items()))


def plan_step(spark, config: LoadConfig, say=print) -> dict:
    """Finish or discard what a killed load left, then plan the next load: {"load_id", "ranges", "planned_at"}
    (``planned_at``: epoch seconds taken just before the high watermarks are read, so never after the cut)."""
    from spark_jobs.warehouse import Warehouse

    wh = Warehouse(spark, config.warehouse)
    for line in wh.recover():
        say(f"recovery: {line}")
    ledger = wh.ledger()
    planned_at = time.time()
    ranges = plan(config, ledger)
    load_id = ledger["load_id"] + 1
    if ranges:
        say(f"load {load_id}: " + ", ".join(f"{t}[{p}] {a}..{b}" for t, parts in sorted(ranges.items())
                                            for p, (a, b) in sorted(parts.items(), key=lambda kv: int(kv[0]))))
    else:
        say("nothing new to load")
    return {"load_id": load_id, "ranges": ranges, "planned_at": planned_at}


def load_step(spark, config: LoadConfig, planned: dict, say=print) -> dict:
    """Load and publish a planned load. Recovers first (a retried task may follow a killed one); a load that an
    earlier try already published is not loaded again."""
    from spark_jobs.warehouse import Warehouse

    wh = Warehouse(spark, config.warehouse)
    for line in wh.recover():
        say(f"recovery: {line}")
    load_id, ranges = planned["load_id"], planned["ranges"]
    if not ranges:
        return {"load_id": load_id, "rows": {}, "quarantined": {}}
    if wh.ledger()["load_id"] >= load_id:
        say(f"load {load_id}: already published")
        return {"load_id": load_id, "skipped": "already published"}
    summary = load(spark, config, wh, load_id, ranges, planned.get("planned_at"))  # absent: planned by older code
    wh.publish(load_id, summary)
    say(f"load {load_id}: published " + ", ".join(
        f"{t}: {summary['rows'][t]} rows, {summary['quarantined'][t]} quarantined" for t in sorted(ranges)))
    return {"load_id": load_id, "rows": summary["rows"], "quarantined": summary["quarantined"]}


def reconcile_step(spark, config: LoadConfig, say=print) -> dict:
    from spark_jobs.warehouse import Warehouse

    wh = Warehouse(spark, config.warehouse)
    report = reconcile_report(config, wh)
    say(f"audit report: {len(report['rows'])} rows " + json.dumps(status_counts(report["rows"]))
        + f" -> {wh.path('_audit', 'report.json')}")
    return report


def run_cycle(config: LoadConfig, spark=None, say=print) -> dict:
    """plan → load → reconcile in one Spark session (``logbus load``); the DAG runs the same steps as tasks."""
    own = spark is None
    spark = spark or session(config)
    try:
        loaded = load_step(spark, config, plan_step(spark, config, say), say)
        return {"load": loaded, "report": reconcile_step(spark, config, say)}
    finally:
        if own:
            spark.stop()
