"""The ``logbus_load`` DAG's logic; ``dags/logbus_load.py`` only calls :func:`build_dag`.

Tasks: ``plan`` (finish or discard a killed load, then the ranges from the ledger to the high watermarks, as
XCom) → ``load`` (Spark: read, decode, Parquet + the warehouse tier counts into staging, publish; the counts are
published with the data so they can never disagree with it) → ``reconcile`` (the audit report: Parquet, JSON and
HTML under ``<warehouse>/_audit/``, shown by the Airflow "Audit" page). On a ``file://`` warehouse, ``plan`` and
``reconcile`` start no Spark session. A retried ``load`` whose load was already published (the previous try died
after publication) does not load it again.

Configuration: the load properties file named by the Airflow Variable ``logbus_load_config`` or the environment
variable ``LOGBUS_LOAD_CONFIG``; the schedule by ``LOGBUS_LOAD_SCHEDULE`` (cron or preset, default ``@hourly``;
``none``: no schedule, runs only when triggered, e.g. through the REST API).
"""

from __future__ import annotations

import os
from datetime import datetime, timedelta

DAG_ID = "logbus_load"


def config_path() -> str:
    path = os.environ.get("LOGBUS_LOAD_CONFIG")
    if not path:
        from airflow.sdk import Variable

        path = Variable.get("logbus_load_config", default=None)
    if not path:
        raise RuntimeError("set the Airflow Variable logbus_load_config or LOGBUS_LOAD_CONFIG to a load config file")
    return path


def _with_spark(fn, driver_only: bool = False):
    """``fn(config, spark)`` in a Spark session of its own; ``driver_only``: for the tasks whose work is the
    driver's (a few small files, the watermarks, the audit events): on a ``file://`` warehouse they run with no
    session at all (``spark`` is None: no JVM to start, :mod:`spark_jobs.files`); elsewhere (``hdfs://``,
    ``s3a://``: Hadoop's FileSystem) on ``load.driver.master`` (default ``local[1]``), because on a standalone
    cluster a session launches an executor on every worker (a JVM each) whether or not a job runs."""
    from spark_jobs.config import LoadConfig
    from spark_jobs.files import is_local
    from spark_jobs.load import session

    config = LoadConfig.load(config_path())
    if driver_only and is_local(config.warehouse):
        return fn(config, None)
    spark = session(config, config.driver_master if driver_only else None)
    try:
        return fn(config, spark)
    finally:
        spark.stop()


def plan_step() -> dict:
    from spark_jobs import load as cycle

    return _with_spark(lambda config, spark: cycle.plan_step(spark, config), driver_only=True)


def load_step(planned: dict) -> dict:
    from spark_jobs import load as cycle

    return _with_spark(lambda config, spark: cycle.load_step(spark, config, planned))


def reconcile_step() -> dict:
    from spark_jobs import load as cycle

    report = _with_spark(lambda config, spark: cycle.reconcile_step(spark, config), driver_only=True)
    return {"rows": len(report["rows"]), "statuses": cycle.status_counts(report["rows"])}  # XCom: the summary


def build_dag(schedule: str | None = None):
    from airflow.sdk import DAG, task

    schedule = schedule or os.environ.get("LOGBUS_LOAD_SCHEDULE", "@hourly")
    if schedule.strip().lower() == "none":
        schedule = None  # Airflow's "no schedule": triggered runs only
    with DAG(DAG_ID, schedule=schedule, start_date=datetime(2026, 1, 1), catchup=False, max_active_runs=1,
             default_args={"retries": 2, "retry_delay": timedelta(seconds=30)},
             doc_md=__doc__, tags=["logbus"]) as dag:
        @task
        def plan() -> dict:
            return plan_step()

        @task
        def load(planned: dict) -> dict:
            return load_step(planned)

        @task
        def reconcile(loaded: dict) -> dict:
            return reconcile_step()

        reconcile(load(plan()))
    return dag
