"""``--log-format json`` (issue 21 item 5): a real broker started with ``LOGBUS_LOG_FORMAT=json`` (how the
topology's ``log_format`` reaches every service) writes only JSON objects, one per line, named after its service,
from start-up to its clean stop; the CLI flag takes precedence; an unknown format is a one-line error."""

import json
import os
import subprocess
import sys

import pytest
from support import REPO, BrokerProcess

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]


def test_broker_logs_one_json_object_per_line(tmp_path, monkeypatch):
    monkeypatch.setenv("LOGBUS_LOG_FORMAT", "json")
    monkeypatch.setenv("LOGBUS_SERVICE", "test-broker")
    b = BrokerProcess(tmp_path / "b").start()
    b.stop()
    lines = [line for line in b.output.read_text().splitlines() if line.strip()]
    events = [json.loads(line) for line in lines]  # every line parses
    assert len(events) >= 2
    assert all({"ts", "level", "logger", "message", "pid"} <= set(e) and e["service"] == "test-broker"
               for e in events)
    assert any("listening on PLAINTEXT://127.0.0.1" in e["message"] for e in events)
    assert any("stopped cleanly" in e["message"] for e in events)
    assert events[0]["ts"].endswith("Z") and "T" in events[0]["ts"]


def test_text_is_the_default_and_a_bad_format_is_one_line():
    env = dict(os.environ, PYTHONPATH=str(REPO / "platform"), LOGBUS_LOG_FORMAT="xml")
    bad = subprocess.run([sys.executable, "-m", "logbus.cli", "broker", "/nonexistent.properties"], env=env,
                         capture_output=True, text=True, timeout=30)
    assert bad.returncode == 2 and bad.stderr.strip().count("\n") == 0 and "json" in bad.stderr
    flag = subprocess.run([sys.executable, "-m", "logbus.cli", "--log-format", "yaml", "broker", "x"], env=env,
                          capture_output=True, text=True, timeout=30)
    assert flag.returncode == 2  # argparse: invalid choice
