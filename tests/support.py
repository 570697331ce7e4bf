"""Helpers for tests that run real broker processes: free ports, start/stop by pid, wait for readiness."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def wait_for_port(host: str, port: int, timeout: float = 20.0, proc: subprocess.Popen | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"process exited with {proc.returncode} before listening on {port}")
        try:
            with socket.create_connection((host, port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise TimeoutError(f"nothing listening on {host}:{port} after {timeout}s")


class BrokerProcess:
    """One ``logbus broker`` process on a free loopback port, data under ``workdir``."""

    def __init__(self, workdir: Path, broker_id: int = 0, **overrides: object):
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.host = "127.0.0.1"
        self.port = free_port()
        self.log_dir = self.workdir / "logs"
        self.settings = {
            "broker.id": broker_id,
            "listeners": f"PLAINTEXT://{self.host}:{self.port}",
            "log.dirs": str(self.log_dir),
            **{k.replace("_", "."): v for k, v in overrides.items()},
        }
        self.config_path = self.workdir / "server.properties"
        self.proc: subprocess.Popen | None = None
        self.output = self.workdir / "broker.log"

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    def write_config(self) -> None:
        self.config_path.write_text("".join(f"{k}={v}\n" for k, v in self.settings.items()))

    def start(self) -> "BrokerProcess":
        self.write_config()
        env = dict(os.environ, PYTHONPATH=str(REPO / "platform"))
        with open(self.output, "ab") as out:
            self.proc = subprocess.Popen([sys.executable, "-m", "logbus.cli", "broker", str(self.config_path)],
                                         stdout=out, stderr=subprocess.STDOUT, env=env, cwd=self.workdir)
        wait_for_port(self.host, self.port, proc=self.proc)
        return self

    def stop(self, timeout: float = 20.0) -> int | None:
        """SIGTERM (clean shutdown) and wait; SIGKILL if it does not exit in time."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        code, self.proc = self.proc.returncode, None
        return code

    def kill9(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        self.proc = None

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log_text(self) -> str:
        return self.output.read_text(errors="replace") if self.output.exists() else ""
