"""``logbus load --config FILE``: the warehouse load cycle without Airflow. The Spark jobs live in the repository's
``spark_jobs/`` (next to ``platform/``), which Spark's Python workers import too."""

from __future__ import annotations

import sys
import traceback
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
    try:
        run_cycle(config, say=lambda line: print(line, flush=True))
    except Exception as exc:  # noqa: BLE001 (a failed load is one line and exit 1; the next run recovers)
        print("load failed; its trace:\n" + "".join(traceback.format_exception(exc)), flush=True)  # the log
        print(f"logbus: load failed: {failure_line(exc)}", file=sys.stderr, flush=True)
        return 1
    return 0


def failure_line(exc: BaseException) -> str:
    """One line for a failed load: the innermost cause Spark's (Java) error names, else the error itself."""
    try:
        text = str(exc).strip() or type(exc).__name__
    except Exception:  # noqa: BLE001 (a py4j error's text asks the JVM, which may be gone)
        text = type(exc).__name__
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    causes = [line[len("Caused by: "):] for line in lines if line.startswith("Caused by: ")]
    java = [line[2:] for line in lines if line.startswith(": ")]  # py4j: ": java.lang.X: message"
    line = causes[-1] if causes else java[0] if java else lines[0]
    if "No space left on device" in text and "No space left on device" not in line:
        line += " (No space left on device)"
    if isinstance(exc, OSError) or not (causes or java):
        line = f"{type(exc).__name__}: {line}" if not line.startswith(type(exc).__name__) else line
    return line[:400]
