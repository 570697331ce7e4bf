"""The warehouse load DAG for Airflow (plan → load → reconcile every hour by default); logic in spark_jobs/dag.py."""

import sys
from pathlib import Path

_REPO = Path(__file__).resolve().parent.parent
for _p in (str(_REPO), str(_REPO / "platform")):
    if _p not in sys.path:
        sys.path.insert(0, _p)

from spark_jobs.dag import build_dag  # noqa: E402

dag = build_dag()
