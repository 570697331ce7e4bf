"""Memory and CPU of a topology on this machine (the default two-datacenter one, or --topology, e.g.
topology/three-dc.json), under demo load and at idle.

Starts ``logbus up`` (a temporary state directory), waits --settle seconds, then samples every
process of the topology (found by the LOGBUS_TOPOLOGY_STATE marker in its environment, children included) for
--seconds: RSS (sum, per service kind) and CPU (process CPU seconds / wall seconds). Then it stops the demo
frontends and samples again ("idle": brokers, ZooKeeper, mirror, counters, registry, audit service and Airflow
running, no traffic). Finally ``logbus down``.

``--test-settings`` applies what the whole-topology tests set (tests/topology_checks.py ``SMALL_WINDOWS``: 4 s
audit windows, 1 s emit interval, no scheduled load) and ``--demo-rate`` the frontends' events a second; the
brokers' requests a second by API (their metrics endpoints) are reported too.

Usage: .venv/bin/python bench/topology_resources.py [--seconds 60] [--settle 30] [--topology FILE]
           [--test-settings] [--demo-rate N]
Results: bench/results/topology_resources.{json,md} (default topology) or topology_resources_<topology name>.*,
with ``_tests`` and ``_rate<N>`` appended for those options; a bar plot of CPU by service kind (.png).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO / "platform")]

import psutil  # noqa: E402
from logbus.local import leftovers  # noqa: E402


def kind_of(proc: psutil.Process, pid_kinds: dict[int, str]) -> str:
    try:
        for p in [proc, *proc.parents()]:
            if p.pid in pid_kinds:
                return pid_kinds[p.pid]
    except psutil.Error:
        pass
    return "other"


def broker_requests(state: Path) -> dict[str, float]:
    """Requests handled so far by API, summed over the topology's brokers (their Prometheus endpoints)."""
    import re
    import urllib.request

    out: dict[str, float] = defaultdict(float)
    for props in state.glob("*broker*/server.properties"):
        url = next((line.split("=", 1)[1].strip() for line in props.read_text().splitlines()
                    if line.startswith("metrics.listener=")), None)
        if not url:
            continue
        try:
            text = urllib.request.urlopen(url.rstrip("/") + "/metrics", timeout=10).read().decode()
        except OSError:
            continue
        for m in re.finditer(r'requests_total\{request="(\w+)"\} (\S+)', text):
            out[m.group(1)] += float(m.group(2))
    return dict(out)


def sample(state: Path, seconds: float, kinds: dict[str, str]) -> dict:
    """``kinds``: service name -> the kind it is counted under."""
    pid_kinds = {}
    for rec in (state / "pids").glob("*.json"):
        if rec.stem in kinds:
            pid_kinds[json.loads(rec.read_text())["pid"]] = kinds[rec.stem]
    procs = {pid: psutil.Process(pid) for pid in leftovers(state)}
    cpu0 = {}
    for pid, p in procs.items():
        try:
            t = p.cpu_times()
            cpu0[pid] = t.user + t.system + t.children_user + t.children_system
        except psutil.Error:
            pass
    requests0 = broker_requests(state)
    start = time.monotonic()
    machine0 = psutil.cpu_times()
    rss_samples = []
    while time.monotonic() - start < seconds:
        total, per_kind = 0, defaultdict(int)
        for pid in leftovers(state):
            try:
                p = procs.setdefault(pid, psutil.Process(pid))
                rss = p.memory_info().rss
            except psutil.Error:
                continue
            total += rss
            per_kind[kind_of(p, pid_kinds)] += rss
        rss_samples.append((total, dict(per_kind)))
        time.sleep(2)
    wall = time.monotonic() - start
    machine1 = psutil.cpu_times()
    requests1 = broker_requests(state)
    rates = {k: round((v - requests0.get(k, 0.0)) / wall, 1) for k, v in sorted(requests1.items())
             if v > requests0.get(k, 0.0)}
    busy = sum(getattr(machine1, f) - getattr(machine0, f) for f in ("user", "system", "nice", "irq", "softirq"))
    cpu = defaultdict(float)
    for pid, p in procs.items():
        try:
            t = p.cpu_times()
            used = t.user + t.system + t.children_user + t.children_system - cpu0.get(pid, 0.0)
        except psutil.Error:
            continue
        cpu[kind_of(p, pid_kinds)] += used
    peak = max(rss_samples, key=lambda s: s[0])
    return {"seconds": round(wall, 1), "processes": len(procs),
            "rss_mb_mean": round(sum(s[0] for s in rss_samples) / len(rss_samples) / 2**20),
            "rss_mb_peak": round(peak[0] / 2**20),
            "rss_mb_by_kind_at_peak": {k: round(v / 2**20) for k, v in sorted(peak[1].items())},
            "cpu_percent_of_one_core": round(100 * sum(cpu.values()) / wall, 1),
            "machine_cpu_percent_of_one_core": round(100 * busy / wall, 1),
            "cpu_percent_by_kind": {k: round(100 * v / wall, 1) for k, v in sorted(cpu.items())},
            "broker_requests_per_s": rates}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--settle", type=float, default=30)
    parser.add_argument("--out", default=str(REPO / "bench" / "results"))
    parser.add_argument("--topology", help="topology JSON (default topology/default.json)")
    parser.add_argument("--test-settings", action="store_true",
                        help="the whole-topology tests' settings (tests/topology_checks.py SMALL_WINDOWS)")
    parser.add_argument("--demo-rate", type=float, help="events a second per demo frontend")
    args = parser.parse_args()
    from logbus.topology import load, services

    topo = load(args.topology)
    stem = "topology_resources" if not args.topology else f"topology_resources_{topo.get('name', 'topology')}"
    if args.test_settings or args.demo_rate:
        if args.test_settings:
            sys.path.insert(0, str(REPO / "tests"))
            from topology_checks import SMALL_WINDOWS

            topo.update(json.loads(json.dumps(SMALL_WINDOWS)))
            stem += "_tests"
        if args.demo_rate:
            topo["demo"] = {**topo.get("demo", {}), "rate": args.demo_rate}
            stem += f"_rate{args.demo_rate:g}"
        args.topology = str(Path(tempfile.mkdtemp(prefix="logbus-topology-file-")) / "topology.json")
        Path(args.topology).write_text(json.dumps(topo))
    env = dict(os.environ, PYTHONPATH=str(REPO / "platform"))
    logbus = [sys.executable, "-m", "logbus.cli"]
    results: dict = {"command": "python bench/topology_resources.py " + " ".join(sys.argv[1:]),
                     "machine": {"cores": psutil.cpu_count(),
                                 "memory_gb": round(psutil.virtual_memory().total / 2**30, 1)}}
    with tempfile.TemporaryDirectory(prefix="logbus-topology-") as tmp:
        os.chmod(tmp, 0o711)  # as root, PostgreSQL runs as the postgres user: it must reach the state dir
        state = Path(tmp) / "state"
        try:
            t = time.monotonic()
            out = subprocess.run([*logbus, "up", "--state-dir", str(state),
                                  *(["--topology", args.topology] if args.topology else [])],
                                 env=env, capture_output=True, text=True)
            if out.returncode != 0:
                print(out.stdout, out.stderr)
                return 1
            results["up_seconds"] = round(time.monotonic() - t, 1)
            # a service counts under its kind; a mirror under its source ("mirror-live"), as the first results did
            kinds = {sv.name: sv.kind + (f"-{sv.name.rsplit('-mirror-', 1)[1]}" if sv.kind == "mirror" else "")
                     for sv in services(topo, "local", state)}
            kinds = {k: {"counter": "audit-counter", "audit": "audit-service", "lag": "lag-exporter"}.get(v, v)
                     for k, v in kinds.items()}
            time.sleep(args.settle)
            results["demo_load"] = sample(state, args.seconds, kinds)
            print("demo load:", json.dumps(results["demo_load"]), flush=True)
            for rec in (state / "pids").glob("*frontend*.json"):
                os.killpg(json.loads(rec.read_text())["pid"], signal.SIGTERM)
            time.sleep(10)
            results["idle"] = sample(state, args.seconds, kinds)
            print("idle:", json.dumps(results["idle"]), flush=True)
        finally:
            subprocess.run([*logbus, "down", "--state-dir", str(state)], env=env, capture_output=True, text=True)
    out_dir = Path(args.out)
    (out_dir / f"{stem}.json").write_text(json.dumps(results, indent=2) + "\n")
    lines = [f"# Resources of the {'default' if not args.topology else topo.get('name')} topology", "",
             f"Command: `{results['command']}` on {results['machine']['cores']} cores, "
             f"{results['machine']['memory_gb']} GiB. `logbus up` took {results['up_seconds']} s.", "",
             "CPU: of the topology's processes alive at the end of the window (short-lived Airflow task processes and",
             "their Spark JVMs are missed), and of the whole machine (nothing else runs; this catches them).", "",
             "| phase | processes | RSS mean (MB) | RSS peak (MB) | CPU, processes (% of one core) "
             "| CPU, machine (% of one core) |", "|---|---|---|---|---|---|"]
    for phase in ("demo_load", "idle"):
        r = results[phase]
        lines.append(f"| {phase.replace('_', ' ')} | {r['processes']} | {r['rss_mb_mean']} | {r['rss_mb_peak']} | "
                     f"{r['cpu_percent_of_one_core']} | {r['machine_cpu_percent_of_one_core']} |")
    for phase in ("demo_load", "idle"):
        r = results[phase]
        lines += ["", f"{phase.replace('_', ' ')} by service kind: RSS MB at peak "
                  + ", ".join(f"{k} {v}" for k, v in r["rss_mb_by_kind_at_peak"].items())
                  + "; CPU % " + ", ".join(f"{k} {v}" for k, v in r["cpu_percent_by_kind"].items()) + "."]
        if r.get("broker_requests_per_s"):
            lines += ["", f"{phase.replace('_', ' ')}: requests a second, all brokers: "
                      + ", ".join(f"{k} {v}" for k, v in r["broker_requests_per_s"].items()) + "."]
    lines += ["", f"Plot: `{stem}.png` (CPU by service kind, both phases)."]
    (out_dir / f"{stem}.md").write_text("\n".join(lines) + "\n")
    plot(results, out_dir / f"{stem}.png", stem)
    print("\n".join(lines))
    return 0


def plot(results: dict, path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    kinds = sorted(set(results["demo_load"]["cpu_percent_by_kind"]) | set(results["idle"]["cpu_percent_by_kind"]))
    fig, ax = plt.subplots(figsize=(10, 4.5))
    width = 0.4
    for i, phase in enumerate(("demo_load", "idle")):
        values = [results[phase]["cpu_percent_by_kind"].get(k, 0.0) for k in kinds]
        ax.bar([x + (i - 0.5) * width for x in range(len(kinds))], values, width, label=phase.replace("_", " "))
    ax.set_xticks(range(len(kinds)), kinds, rotation=40, ha="right")
    ax.set_ylabel("CPU, % of one core")
    ax.set_title(f"{title}: CPU by service kind")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


if __name__ == "__main__":
    sys.exit(main())
