"""The README's main job, ``logbus demo``, as a user runs it (console script, child broker process)."""

import subprocess
import sys

import pytest
from support import REPO

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


def test_demo_round_trip_and_rerun_keeps_data(tmp_path):
    cmd = [sys.executable, "-m", "logbus.cli", "demo", "--state-dir", str(tmp_path / "demo"), "--messages", "3000"]
    env = {"PYTHONPATH": str(REPO / "platform"), "PATH": "/usr/bin:/bin"}
    first = subprocess.run(cmd, capture_output=True, text=True, timeout=100, env=env)
    assert first.returncode == 0, first.stderr
    assert "consumed 3,000 events back" in first.stdout and "broker stopped cleanly" in first.stdout
    second = subprocess.run(cmd, capture_output=True, text=True, timeout=100, env=env)
    assert second.returncode == 0, second.stderr
    assert "after offsets [" in second.stdout and "[0, 0, 0]" not in second.stdout
