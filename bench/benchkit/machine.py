"""What the benchmark measures about processes and the machine: CPU of a process tree, bytes allocated on disk,
client processes with their own CPU, and the machine's ceilings (loopback TCP with iperf3, sequential write
with dd + fdatasync)."""

from __future__ import annotations

import json
import os
import re
import statistics
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import psutil


def tree_cpu(pid: int) -> float:
    """user+system CPU seconds of a process and its live descendants."""
    total = 0.0
    root = psutil.Process(pid)
    for proc in [root, *root.children(recursive=True)]:
        try:
            t = proc.cpu_times()
            total += t.user + t.system
        except psutil.NoSuchProcess:
            pass
    return total


def self_cpu() -> float:
    t = os.times()
    return t.user + t.system


def allocated_bytes(path: Path) -> int:
    """Bytes the files under ``path`` occupy on disk (st_blocks, so sparse preallocation is not counted)."""
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_blocks * 512
            except FileNotFoundError:
                pass
    return total


def settled_bytes(path: Path, quiet: float = 3.0, limit: float = 60.0) -> int:
    """allocated_bytes once it has stopped changing for ``quiet`` seconds (brokers flush in the background)."""
    deadline = time.monotonic() + limit
    last, since = allocated_bytes(path), time.monotonic()
    while time.monotonic() < deadline:
        time.sleep(0.5)
        now = allocated_bytes(path)
        if now != last:
            last, since = now, time.monotonic()
        elif time.monotonic() - since >= quiet:
            break
    return last


def run_client(cmd: list[str], timeout: float = 1800, env: dict | None = None) -> tuple[dict, float]:
    """Run a benchmark client that prints one JSON line; return (that JSON, the client's own CPU seconds)."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(cmd, stdout=out, stderr=err, env=env)
        timer = threading.Timer(timeout, proc.kill)
        timer.start()
        try:
            _pid, status, usage = os.wait4(proc.pid, 0)
        finally:
            timer.cancel()
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        if proc.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd[-7:])} exited {proc.returncode}: "
                               f"{err.read().decode(errors='replace')[-2000:]}")
        line = [ln for ln in out.read().decode().splitlines() if ln.startswith("{")][-1]
    return json.loads(line), usage.ru_utime + usage.ru_stime


def loopback_tcp(seconds: int = 5) -> float:
    """iperf3 over 127.0.0.1, one stream: Gbit/s received."""
    from support import free_port  # tests/support.py

    port = free_port()
    server = subprocess.Popen(["iperf3", "-s", "-1", "-B", "127.0.0.1", "-p", str(port)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(0.5)
        out = subprocess.run(["iperf3", "-c", "127.0.0.1", "-p", str(port), "-t", str(seconds), "-J"],
                             capture_output=True, check=True, timeout=seconds + 30).stdout
        return json.loads(out)["end"]["sum_received"]["bits_per_second"] / 1e9
    finally:
        server.kill()
        server.wait()


def disk_write(directory: Path, megabytes: int = 2048) -> float:
    """dd of zeros with conv=fdatasync (the data is on disk when dd ends): MB/s."""
    target = directory / "dd-test"
    try:
        err = subprocess.run(["dd", "if=/dev/zero", f"of={target}", "bs=1M", f"count={megabytes}", "conv=fdatasync"],
                             capture_output=True, text=True, check=True, timeout=600).stderr
    finally:
        target.unlink(missing_ok=True)
    m = re.search(r"(\d+) bytes .* copied, ([\d.]+) s", err)
    if not m:
        raise RuntimeError(f"unexpected dd output: {err!r}")
    return int(m.group(1)) / float(m.group(2)) / 1e6


def page_cache_write(directory: Path, megabytes: int = 256) -> dict:
    """CPU milliseconds per MB of buffered 1 MB writes into the page cache, in three states of the memory:
    ``fresh`` (a new file: new page-cache pages; on a VM whose free memory is handed back to the host, each new
    page may first have to be backed again), ``overwrite`` (the same file again: its pages are cached) and
    ``recycled`` (another new file just after the first was deleted, so its freed pages are at hand)."""
    chunk = os.urandom(1 << 20)

    def write(path: Path, flags: int) -> float:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | flags)
        try:
            start = time.process_time()
            for i in range(megabytes):
                os.pwrite(fd, chunk, i << 20)
            return (time.process_time() - start) / megabytes * 1000
        finally:
            os.close(fd)

    first, second = directory / "page-cache-1", directory / "page-cache-2"
    try:
        out = {"fresh": write(first, os.O_TRUNC), "overwrite": write(first, 0)}
        first.unlink()
        out["recycled"] = write(second, os.O_TRUNC)
        return {k: round(v, 3) for k, v in out.items()}
    finally:
        first.unlink(missing_ok=True)
        second.unlink(missing_ok=True)


def summary(values: list[float]) -> dict:
    """Median and spread of repeated runs."""
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "runs": values}
