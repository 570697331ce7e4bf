"""A tests-only DAG (tests/integration/test_airflow_postgres.py): one task that sleeps long enough for the test to
kill the scheduler while it runs, with retries so that the run can still end in success."""

from datetime import datetime, timedelta

from airflow.sdk import DAG, task

with DAG("logbus_sleeper", schedule=None, start_date=datetime(2026, 1, 1), catchup=False, max_active_runs=1,
         default_args={"retries": 2, "retry_delay": timedelta(seconds=1)}):

    @task
    def sleep(seconds: float = 20.0) -> float:
        import time

        time.sleep(seconds)
        return seconds

    sleep()
