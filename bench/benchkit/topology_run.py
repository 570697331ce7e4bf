"""Running a copy of the topology from a benchmark: the ``logbus`` CLI, an HTTP session for loopback services, and
the teardown that leaves nothing behind (``bench/pipeline_benchmark.py``, ``bench/prometheus_broker_kill.py``)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent.parent


def logbus(*args: str, timeout: float = 900) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(REPO / "platform"))
    return subprocess.run([sys.executable, "-m", "logbus.cli", *args], env=env, capture_output=True, text=True,
                          timeout=timeout)


def http_session():
    import requests

    http = requests.Session()
    http.trust_env = False  # loopback: never through a proxy
    return http


def down_and_sweep(state: Path) -> dict:
    """``logbus down``, then ``kill -9`` of any process still carrying the state directory; returns
    ``{"exit": ..., "left_behind": [pids]}`` (a non-zero exit or a leftover is printed to stderr)."""
    from logbus.local import leftovers

    down = logbus("down", "--state-dir", str(state), timeout=300)
    left = leftovers(state.resolve())
    for pid in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    if left or down.returncode != 0:
        print(f"logbus down: exit {down.returncode}, processes left behind: {left}", file=sys.stderr)
    return {"exit": down.returncode, "left_behind": left}
