"""Where replication's CPU goes: the brokers of a local 3-broker cluster under ``perf record -g`` (issue 20).

The cluster benchmark (``bench/cluster_benchmark.py``) finds acks=all with replication factor 3 bounded by the
CPU of two shared cores. This records, for one run of each of its two goal settings (the same producer:
confluent-kafka, librdkafka's default batching, ``--messages`` 200-byte messages, one partition), every broker
that holds the partition under perf, and reports per role (leader, followers) its CPU seconds per million
messages (/proc) and the share of its samples under:

- ``tcp_sendmsg``: socket sends, which on Linux 6.x also carry ``sendfile`` (the leader answering its followers'
  fetches, about 1 MB each) and, on loopback, the receiving side's TCP work that runs in the sender's context;
- ``tcp_recvmsg``: socket receives (the leader reading produce requests, a follower reading fetch responses);
- ``generic_perform_write``: the kernel's buffered file write (every replica appends every byte);
- ``_PyEval_EvalFrameDefault``: the interpreter's own loop (perf cannot unwind the C it calls).

Settings: the cluster benchmark's ``acks1_rf1`` (acks=1, replication factor 1) and ``acksall_rf3`` (acks=all,
librdkafka's default producer, not idempotent; replication factor 3, min.insync.replicas=2). Runs alternate,
``--runs`` each; each run records fresh, on a topic of its own that is deleted after it (see the cluster
benchmark: on this VM the logs' page cache piling up across runs slowed the later runs' writes).

Usage: .venv/bin/python bench/cluster_profile.py [--messages 1000000] [--runs 2] [--out bench/results/cluster_profile]
       | --report-only
(needs perf: ``apt-get install -y linux-perf``; root or kernel.perf_event_paranoid <= 1)
Results: <out>/cluster_profile.{json,md,png}
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO / "bench"), str(REPO / "tests")]

from benchkit import perf  # noqa: E402
from cluster_benchmark import SETTINGS as BENCHMARK_SETTINGS  # noqa: E402
from cluster_benchmark import delete_topic, new_topic, produce, roles  # noqa: E402
from confluent_kafka.admin import AdminClient  # noqa: E402
from support import Cluster  # noqa: E402

SYMBOLS = {"tcp_sendmsg": "socket sends (and sendfile)", "tcp_recvmsg": "socket receives",
           "generic_perform_write": "buffered file writes", "_PyEval_EvalFrameDefault": "interpreter loop"}
SETTINGS = {key: BENCHMARK_SETTINGS[key] for key in ("acks1_rf1", "acksall_rf3")}


def one_run(c: Cluster, key: str, messages: int, work: Path, topic: str) -> dict:
    conf = SETTINGS[key][1]
    pids = roles(c, topic)
    brokers = {name: pid for name, pid in pids.items() if name.startswith(("leader", "follower"))}
    with contextlib.ExitStack() as stack:
        for name, pid in brokers.items():
            stack.enter_context(perf.Recording(pid, work / f"{key}-{name.replace(' ', '-')}.data", 499))
        result = produce(c.bootstrap, topic, messages, conf, pids)
    out = {"msg_s": round(result["msg_s"]), "roles": {}}
    for name, pid in brokers.items():
        role = name.split()[0]
        profile = perf.shares(work / f"{key}-{name.replace(' ', '-')}.data", list(SYMBOLS))
        profile["cpu_s_per_million"] = round(result["cpu_s"][name] / messages * 1e6, 3)
        out["roles"].setdefault(role, []).append(profile)
    out["client_cpu_s_per_million"] = round(result["cpu_s"]["client"] / messages * 1e6, 3)
    print(key, out["msg_s"], {r: [p["cpu_s_per_million"] for p in ps] for r, ps in out["roles"].items()},
          flush=True)
    return out


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--messages", type=int, default=1_000_000)
    p.add_argument("--runs", type=int, default=2)
    p.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "cluster_profile")
    p.add_argument("--report-only", action="store_true")
    args = p.parse_args()
    if args.report_only:
        write_report(json.loads((args.out / "cluster_profile.json").read_text()), args.out)
        return 0
    runs: dict[str, list] = {key: [] for key in SETTINGS}
    with tempfile.TemporaryDirectory(prefix="logbus-cluster-profile-") as tmp:
        work = Path(tmp)
        c = Cluster(work / "cluster", 3, zookeeper_session_timeout_ms=6000, auto_leader_rebalance_enable="false")
        try:
            c.start()
            admin = AdminClient({"bootstrap.servers": c.bootstrap})
            for i in range(args.runs):
                for key, (rf, _) in SETTINGS.items():
                    topic = new_topic(c, admin, f"{key}-{i}", rf)
                    runs[key].append(one_run(c, key, args.messages, work, topic))
                    delete_topic(c, admin, topic)
        finally:
            c.stop()
    head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True,
                          text=True).stdout.strip()
    out_arg = args.out.relative_to(REPO) if args.out.is_relative_to(REPO) else args.out
    results = {"command": f"python bench/cluster_profile.py --messages {args.messages} --runs {args.runs} "
                          f"--out {out_arg}", "commit": head, "messages": args.messages, "runs": runs}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "cluster_profile.json").write_text(json.dumps(results, indent=1) + "\n")
    write_report(results, args.out)
    print((args.out / "cluster_profile.md").read_text())
    return 0


def role_median(runs: list, role: str, pick) -> float:
    return statistics.median(pick(p) for run in runs for p in run["roles"].get(role, []))


def write_report(r: dict, out: Path) -> None:
    lines = ["# Where replication's CPU goes: the brokers under perf (issue 20)", "",
             f"Command: `{r['command']}` (commit {r['commit']}); {r['messages']:,} messages of 200 bytes per run, "
             "one confluent-kafka producer (librdkafka's default batching), one partition; perf at 499 Hz on every "
             "broker holding the partition. Cells: median over the runs (and over both followers).", "",
             "| setting | role | msg/s | CPU s per million | " + " | ".join(SYMBOLS.values()) + " |",
             "|---|---|---|---|" + "---|" * len(SYMBOLS)]
    bars = []
    for key, runs in r["runs"].items():
        rate = statistics.median(run["msg_s"] for run in runs)
        for role in ("leader", "follower"):
            if not any(run["roles"].get(role) for run in runs):
                continue
            cpu = role_median(runs, role, lambda p: p["cpu_s_per_million"])
            shares = [role_median(runs, role, lambda p, s=s: p["shares"][s]) for s in SYMBOLS]
            lines.append(f"| {key} | {role} | {rate:,.0f} | {cpu:.2f} | "
                         + " | ".join(f"{v:.1f}%" for v in shares) + " |")
            bars.append((f"{key}\n{role}", cpu, shares))
        client = statistics.median(run["client_cpu_s_per_million"] for run in runs)
        lines.append(f"| {key} | client | | {client:.2f} | | | | |")
    budget = []
    for key, runs in r["runs"].items():
        rate = statistics.median(run["msg_s"] for run in runs)
        total = statistics.median(run["client_cpu_s_per_million"] + sum(p["cpu_s_per_million"] for ps in
                                  run["roles"].values() for p in ps) for run in runs)
        budget.append(f"{key} {total:.2f} CPU-s per million (client and brokers; ZooKeeper is idle), so 2 busy "
                      f"cores carry at most {2e6 / total:,.0f} msg/s; measured {rate:,.0f} "
                      f"({rate / (2e6 / total):.0%} of that)")
    lines += ["", "CPU budget: " + "; ".join(budget) + "."]
    lines += ["", "Shares are inclusive (a kernel symbol's share holds what it calls) and overlap only where one "
              "calls another. The leader's heaviest symbols by their own samples, acks=all RF 3 (first run):", "",
              "| symbol | where | share |", "|---|---|---|"]
    leader = r["runs"]["acksall_rf3"][0]["roles"]["leader"][0]
    for symbol, where, share in leader["top_self"]:
        lines.append(f"| `{symbol}` | {where} | {share:.1f}% |")
    lines += ["", "Plot: `cluster_profile.png` (CPU seconds per million messages by role, split by the shares)."]
    (out / "cluster_profile.md").write_text("\n".join(lines) + "\n")
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(8, 4))
    for i, (label, cpu, shares) in enumerate(bars):
        bottom = 0.0
        for k, (name, share) in enumerate(zip(SYMBOLS.values(), shares)):
            part = cpu * share / 100
            ax.bar(i, part, bottom=bottom, color=f"C{k}", label=name if i == 0 else None)
            bottom += part
        ax.bar(i, max(cpu - bottom, 0), bottom=bottom, color="lightgrey", label="the rest" if i == 0 else None)
    ax.set_xticks(range(len(bars)), [b[0] for b in bars], fontsize=8)
    ax.set_ylabel("CPU seconds per million messages")
    ax.set_title("Broker CPU by role and where it goes (perf)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "cluster_profile.png", dpi=110)


if __name__ == "__main__":
    raise SystemExit(main())
