"""CPU of one Docker healthcheck-style exec, by probe kind (issue 20, compose healthchecks).

Runs a `logbus:local` container serving HTTP on 127.0.0.1:8000 inside it and execs each probe N times, reading the
machine's busy CPU ticks (`/proc/stat`: user, nice, system, irq, softirq) before and after: the exec path (dockerd,
containerd, runc) plus the probe. Usage: .venv/bin/python bench/healthcheck_cost.py [--runs 20]
Writes bench/results/healthcheck_cost.md. Needs dockerd and the image (bash scripts/docker-setup).
"""

import argparse
import os
import subprocess
import time
from pathlib import Path

PROBES = {
    "true (the exec alone)": ["true"],
    "python -c (socket connect, the old TCP probe)": ["python", "-c",
                                                       "import socket; socket.create_connection(('127.0.0.1', 8000), 2)"],
    "python -c (urllib GET, the old HTTP probe)": ["python", "-c", "import urllib.request; "
                                                   "urllib.request.urlopen('http://127.0.0.1:8000/', timeout=3)"],
    "bash /dev/tcp connect (the TCP probe now)": ["bash", "-c", "exec 3<>/dev/tcp/127.0.0.1/8000"],
    "bash /dev/tcp GET, 200 (the HTTP probe now)": ["bash", "-c", "exec 3<>/dev/tcp/127.0.0.1/8000 && printf 'GET / "
                                                    "HTTP/1.0\\r\\nHost: 127.0.0.1\\r\\n\\r\\n' >&3 && head -n 1 <&3 "
                                                    "| grep -q ' 200 '"],
}


def busy_ticks() -> int:
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    return fields[0] + fields[1] + fields[2] + fields[5] + fields[6]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=20)
    args = ap.parse_args()
    cid = subprocess.run(["docker", "run", "-d", "--rm", "logbus:local", "python", "-m", "http.server", "8000",
                          "--bind", "127.0.0.1"], capture_output=True, text=True, check=True).stdout.strip()
    hz = os.sysconf("SC_CLK_TCK")
    rows = []
    try:
        time.sleep(3)
        for name, cmd in PROBES.items():
            before = busy_ticks()
            for _ in range(args.runs):
                subprocess.run(["docker", "exec", cid, *cmd], check=True, capture_output=True)
            rows.append((name, (busy_ticks() - before) / hz / args.runs * 1000))
    finally:
        subprocess.run(["docker", "rm", "-f", cid], capture_output=True)
    out = Path(__file__).parent / "results" / "healthcheck_cost.md"
    lines = ["# CPU of one healthcheck exec", "",
             f"Command: `.venv/bin/python bench/healthcheck_cost.py --runs {args.runs}` ({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; "
             "machine-wide busy CPU over the execs, so other work on the machine adds noise)", "",
             "| probe | CPU per exec (ms) |", "|---|---|"]
    lines += [f"| {name} | {ms:.0f} |" for name, ms in rows]
    out.write_text("\n".join(lines) + "\n")
    print(out.read_text())


if __name__ == "__main__":
    main()
