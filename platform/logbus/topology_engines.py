"""The engines a datacenter's loads run on, as topology services (see :mod:`logbus.topology`):

- ``spark_workers: N`` — a Spark standalone cluster: ``<dc>-spark-master`` (``logbus spark-master``, Spark's own
  Master from the Spark pyspark ships) and N ``<dc>-spark-worker<i>`` (``logbus spark-worker``, ``spark_worker_cores``
  cores and ``spark_worker_memory`` each: 1 and 1g by default). The loads submit to ``spark://<master>:<port>``
  (``ports.spark_master``, Spark's 7077); ``spark_workers: 0`` or absent keeps them in ``local[2]`` (or
  ``spark_master`` in the datacenter's spec, e.g. ``local[*]``). Driver and executors share the warehouse: local
  processes share one filesystem; in compose the ``warehouse`` volume is mounted at the same path in the Airflow
  container and every worker (on several machines it would be HDFS or S3, ``warehouse.path=hdfs://...``).
- ``airflow_database: "postgres"`` — Airflow's metadata in PostgreSQL (Debian's, ``logbus postgres``):
  ``<dc>-postgres`` with a dedicated ``airflow`` database and user; the password is generated at the first start
  into the service's data directory and read by Airflow through ``sql_alchemy_conn_cmd`` (never in the
  environment or a config file). In compose the Airflow container mounts that volume read-only. Without it
  Airflow keeps SQLite (development only, as Airflow's documentation says).
"""

from __future__ import annotations

from logbus.topology import Service, TopologyError

WAREHOUSE_VOLUME = "warehouse"


def warehouse_dir(n, dc: str, airflow_data: str) -> str:
    """Where the loads write the warehouse: under the Airflow service's data (local), or the shared volume
    (compose, when a Spark cluster's executors write it)."""
    if n.target == "compose" and spark_worker_count(n.topo["datacenters"][dc], dc):
        return f"/var/lib/logbus/{WAREHOUSE_VOLUME}"
    return f"{airflow_data}/warehouse"


def spark_worker_count(spec: dict, dc: str) -> int:
    count = spec.get("spark_workers", 0)
    if not isinstance(count, int) or isinstance(count, bool) or not 0 <= count <= 9:
        raise TopologyError(f"{dc}: spark_workers must be a number from 0 to 9, not {count!r}")
    return count


def spark(n, dc: str, spec: dict) -> tuple[list[Service], dict[str, str]]:
    """(the cluster's services, the load's spark.* settings for it)."""
    count = spark_worker_count(spec, dc)
    if not count:
        return [], {"spark.master": spec.get("spark_master", "local[2]")}
    listen_all = n.target == "compose"
    master = f"{dc}-spark-master"
    master_host = n.host(dc, "spark-master")
    port, webui = n.port("spark_master", dc), n.port("spark_master_webui", dc)
    out = [Service(master, dc, "spark-master", master_host, [
        "spark-master", "--host", "0.0.0.0" if listen_all else master_host, "--port", str(port),
        "--webui-port", str(webui), "--work-dir", n.data_dir(master)],
        health=("http", webui, "/json/"), port=port, url=f"http://{master_host}:{webui}")]
    cores, memory = str(spec.get("spark_worker_cores", 1)), str(spec.get("spark_worker_memory", "1g"))
    for i in range(1, count + 1):
        name = f"{dc}-spark-worker{i}"
        host = n.host(dc, "spark-worker", i)
        worker_webui = n.port("spark_worker_webui", dc)
        argv = ["spark-worker", "--master", f"spark://{master_host}:{port}", "--host", host,
                "--webui-port", str(worker_webui), "--cores", cores, "--memory", memory,
                "--work-dir", n.data_dir(name)]
        out.append(Service(name, dc, "spark-worker", host, argv, depends_on=[master],
                           health=("spark-worker", master_host, webui), url=f"http://{host}:{worker_webui}",
                           volumes=[f"{WAREHOUSE_VOLUME}:/var/lib/logbus/{WAREHOUSE_VOLUME}"]
                           if n.target == "compose" else []))
    settings = {"spark.master": f"spark://{master_host}:{port}",
                # every worker's cores: one executor per worker (1 core each by default)
                "spark.cores.max": str(count * int(cores)), "spark.executor.memory": _executor_memory(memory)}
    if n.target == "compose":  # executors in other containers connect back to the driver (the Airflow task)
        settings.update({"spark.driver.host": f"{dc}-airflow", "spark.driver.bindAddress": "0.0.0.0"})
    else:
        settings.update({"spark.driver.host": n.host(dc, "airflow"), "spark.driver.bindAddress": n.host(dc, "airflow")})
    return out, settings


def _executor_memory(worker_memory: str) -> str:
    """An executor's heap: what the worker offers minus room for the JVM's overhead, at least 512m."""
    units = {"m": 1, "g": 1024}
    try:
        mb = int(worker_memory[:-1]) * units[worker_memory[-1].lower()]
    except (ValueError, KeyError, IndexError):
        raise TopologyError(f"spark_worker_memory must look like 1g or 1536m, not {worker_memory!r}") from None
    return f"{max(512, mb - 384)}m"


def postgres(n, dc: str, spec: dict) -> tuple[list[Service], dict[str, str]]:
    """(the database's service, Airflow's settings for it) when ``airflow_database`` is ``postgres``."""
    choice = spec.get("airflow_database", "sqlite")
    if choice == "sqlite":
        return [], {}
    if choice != "postgres":
        raise TopologyError(f"{dc}: airflow_database must be sqlite or postgres, not {choice!r}")
    from logbus import postgres as pg

    name = f"{dc}-postgres"
    host, port = n.host(dc, "postgres"), n.port("postgres", dc)
    data = n.data_dir(name)
    password = f"{data}/password"
    service = Service(name, dc, "postgres", host, [
        "postgres", "--data-dir", f"{data}/server", "--host", "0.0.0.0" if n.target == "compose" else host,
        "--port", str(port), "--database", "airflow", "--user", "airflow", "--password-file", password],
        health=("postgres", port), port=port)
    return [service], pg.airflow_env(host, port, "airflow", "airflow", password)
