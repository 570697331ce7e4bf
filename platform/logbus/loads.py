"""``logbus load --config FILE``: the warehouse load cycle without Airflow. The Spark jobs live in the repository's
``spark_jobs/`` (next to ``platform/``), which Spark's Python workers import too."""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def run_load(config_path: str) -> int:
    if not (REPO / "spark_jobs").is_dir():
        print("logbus: spark_jobs/ not found next to platform/ (run from a checkout)", file=sys.stderr)
        return 2
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))
    from spark_jobs.config import LoadConfig, LoadConfigError
    from spark_jobs.load import run_cycle

    try:
        config = LoadConfig.load(config_path)
    except LoadConfigError as exc:
        print(f"logbus: config error: {exc}", file=sys.stderr)
        return 2
    run_cycle(config, say=lambda line: print(line, flush=True))
    return 0
