"""``perf record -g`` of a process and the shares of its samples (Linux perf; Debian package ``linux-perf``).

Debian's python3 has no frame pointers, so perf cannot unwind from the interpreter into the C it calls: a kernel
symbol's inclusive share is exact, the interpreter's (``_PyEval_EvalFrameDefault``) is its own loop only."""

from __future__ import annotations

import re
import signal
import subprocess
from pathlib import Path


class Recording:
    """``perf record -g`` of ``pid`` into ``data`` while the ``with`` block runs."""

    def __init__(self, pid: int, data: Path, frequency: int = 999):
        self.cmd = ["perf", "record", "-F", str(frequency), "-g", "-o", str(data), "-p", str(pid)]
        self.data = data

    def __enter__(self) -> "Recording":
        self.proc = subprocess.Popen(self.cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        return self

    def __exit__(self, *exc) -> None:
        self.proc.send_signal(signal.SIGINT)
        self.proc.wait(120)


def _report(data: Path, *args: str) -> str:
    return subprocess.run(["perf", "report", "-i", str(data), "--sort", "sym", "--stdio", "-g", "none", *args],
                          capture_output=True, text=True, check=True, timeout=600).stdout


def shares(data: Path, symbols) -> dict:
    """{"shares": inclusive % of the samples under each of ``symbols`` (``perf report --children``),
    "top_self": the 10 heaviest symbols by their own samples [[symbol, "kernel"|"user", %]], "samples"}."""
    text = _report(data, "--children")
    found = {}
    for line in text.splitlines():
        m = re.match(r"\s*([\d.]+)%\s+([\d.]+)%\s+\[[.k]\]\s+(\S+)", line)
        if m and m.group(3) in symbols and m.group(3) not in found:
            found[m.group(3)] = float(m.group(1))
    top = []
    for line in _report(data, "--no-children").splitlines():
        m = re.match(r"\s*([\d.]+)%\s+\[([.k])\]\s+(\S+)", line)
        if m and len(top) < 10:
            top.append([m.group(3), "kernel" if m.group(2) == "k" else "user", float(m.group(1))])
    samples = re.search(r"# Samples: (\S+)", text)
    return {"shares": {s: found.get(s, 0.0) for s in symbols}, "top_self": top,
            "samples": samples.group(1) if samples else None}
