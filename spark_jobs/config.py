"""The load job's configuration (Java properties, like every other logbus config):

    bootstrap.servers=127.0.2.1:9092            the cluster loaded from (the offline datacenter)
    schema.registry.url=http://127.0.0.1:8081
    warehouse.path=file:///var/lib/logbus/warehouse   (hdfs://, s3a:// work through Hadoop's FileSystem)
    topics=page-views,clicks                    or topics.pattern=<regex> (default: every topic not starting '_')
    spark.master=local[2]                       (default) Spark in the job's own JVM: local[2], local[*] (every core);
                                                or a standalone cluster, spark://host:7077 (``logbus spark-master``
                                                and ``logbus spark-worker``): the partitions are read on its
                                                executors. The job's code reaches them as a zip (addPyFile, see
                                                spark_jobs.packaging); their Python is the driver's PYSPARK_PYTHON.
                                                On a cluster of several machines warehouse.path must be a shared
                                                filesystem (hdfs://, s3a://): executors write the Parquet files
                                                and the driver moves them; file:// works on one machine only
    spark.cores.max=2, spark.executor.memory=512m, spark.executor.cores=1   (cluster) what the load takes of it
    spark.driver.host=127.0.0.1                 (the default, with spark.driver.bindAddress) where executors reach
                                                the driver: an address of this machine they can connect to
    spark.*                                     any other spark.* key goes to the Spark session
    load.driver.master=local[1]                 the master of the Airflow DAG's plan and reconcile tasks: their work
                                                is the driver's (the ledger, watermarks, the audit report), so by
                                                default they launch no executors on a cluster; the load task (and
                                                ``logbus load``, one session for all three steps) uses spark.master
    load.max.records.per.partition=1000000      larger partition ranges are split into several Spark partitions
    audit.window.ms=60000                       the producers' audit.window.ms
    audit.grace.ms=60000
    audit.tiers=live,offline,warehouse          report column order
    audit.cluster.<name>.bootstrap.servers=...  clusters whose _audit topic is reconciled
    security.protocol, sasl.*, ssl.*            the job's Kafka client security (Kafka's or librdkafka's names),
                                                used with every cluster above
    schema.registry.basic.auth.user.info, schema.registry.ssl.ca.location   a secured registry
"""

from __future__ import annotations

import re
from pathlib import Path

from audit.collector import split_clusters
from settings import registry_client
from settings.properties import ConfigError
from settings.security import ClientSecurity

KNOWN = {"bootstrap.servers", "schema.registry.url", "warehouse.path", "topics", "topics.pattern",
         "load.max.records.per.partition", "audit.window.ms", "audit.grace.ms", "audit.tiers",
         "load.driver.master"}


class LoadConfigError(ValueError):
    pass


class LoadConfig:
    def __init__(self, values: dict[str, str]):
        self.spark = {k: v for k, v in values.items() if k.startswith("spark.") and k != "spark.master"}
        self.audit_clusters, rest = split_clusters(values)
        security, rest = ClientSecurity.split(rest)
        registry, rest = registry_client.split(rest)
        try:  # librdkafka's names of the security settings (none: PLAINTEXT, nothing added)
            self.client_conf = ClientSecurity.from_properties(security).librdkafka() if security else {}
        except ConfigError as exc:
            raise LoadConfigError(str(exc)) from None
        self.registry = registry_client.registry_conf(registry)
        unknown = [key for key in rest if key not in KNOWN and not key.startswith("spark.")]
        if unknown:
            raise LoadConfigError(f"unknown config key {unknown[0]!r}")
        for key in ("bootstrap.servers", "schema.registry.url", "warehouse.path"):
            if not values.get(key):
                raise LoadConfigError(f"{key} is required")
        self.bootstrap = values["bootstrap.servers"]
        self.registry_url = values["schema.registry.url"]
        wh = values["warehouse.path"]
        self.warehouse = wh if "://" in wh else Path(wh).resolve().as_uri()
        self.master = values.get("spark.master", "local[2]")
        self.driver_master = values.get("load.driver.master", "local[1]")
        self.topics = [t.strip() for t in values.get("topics", "").split(",") if t.strip()]
        try:
            self.pattern = re.compile(values.get("topics.pattern", r"[^_].*"))
        except re.error as exc:
            raise LoadConfigError(f"topics.pattern: {exc}") from None
        try:
            self.max_records_per_partition = int(values.get("load.max.records.per.partition", "1000000"))
            self.window_ms = int(values.get("audit.window.ms", "60000"))
            self.grace_ms = int(values.get("audit.grace.ms", "60000"))
        except ValueError as exc:
            raise LoadConfigError(f"expected an integer: {exc}") from None
        default_tiers = [*self.audit_clusters, "warehouse"]
        self.tiers = [t.strip() for t in values.get("audit.tiers", ",".join(default_tiers)).split(",") if t.strip()]

    def wants(self, topic: str) -> bool:
        if topic.startswith("_"):
            return False
        return topic in self.topics if self.topics else bool(self.pattern.fullmatch(topic))

    @classmethod
    def load(cls, path: str, overrides: dict[str, str] | None = None) -> "LoadConfig":
        from settings.properties import ConfigError, parse_properties

        try:
            values = parse_properties(Path(path).read_text())
        except OSError as exc:
            raise LoadConfigError(f"cannot read {path}: {exc.strerror}") from None
        except ConfigError as exc:
            raise LoadConfigError(str(exc)) from None
        return cls({**values, **(overrides or {})})
