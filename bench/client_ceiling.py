"""How fast the benchmarks' clients go on this machine when the broker costs next to nothing (issue 20).

Issue 20's batched goals are client runs: kcat producing 2,000,000 messages a second, and the replication ratio
measured with a confluent-kafka producer. On a 2-core machine the client shares the cores with the broker, so a
goal can lie beyond what the client itself can do here. This measures that ceiling: the same clients, the same
200-byte messages, against two servers in alternating rounds of one run:

- ``logbus``: a standalone logbus broker (one partition, acks=1 unless said);
- ``C mock``: librdkafka's own mock cluster (``test.mock.num.brokers=1``), a Kafka broker written in C that keeps
  messages in memory and does no disk I/O, hosted by an idle kcat process. Its CPU is measured like the broker's.

Settings (partition 0 of one topic each):
- ``kcat``: the paper benchmark's kcat producer (``bench/paper_benchmark.py``: linger.ms=5,
  batch.num.messages=10000, from a file), 2 x ``--messages``;
- ``confluent acks=1``: the cluster benchmark's producer (``bench/cluster_benchmark.py``: confluent-kafka, default
  batching, a Python loop of ``produce()``), ``--messages``;
- ``confluent acks=all idempotent``: the same with acks=all and enable.idempotence (the cluster benchmark's goal
  setting; against one broker nothing is replicated).

The consumer side has no counterpart here: the mock keeps only the last few MB of a partition.

Usage: .venv/bin/python bench/client_ceiling.py [--messages 1000000] [--rounds 3] [--out bench/results]
       | --report-only
Results: bench/results/client_ceiling.{json,md,png}
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO / "bench"), str(REPO / "tests")]

from benchkit import side_by_side  # noqa: E402
from cluster_benchmark import produce  # noqa: E402
from paper_benchmark import produce_kcat  # noqa: E402
from request_cost import start_broker  # noqa: E402

SERVERS = ("logbus", "C mock")
SETTINGS = {"kcat": None, "confluent acks=1": {"acks": 1},
            "confluent acks=all idempotent": {"acks": "all", "enable.idempotence": True}}


def start_mock() -> SimpleNamespace:
    """librdkafka's mock cluster inside an idle ``kcat -P`` (it lives while kcat's stdin is open)."""
    proc = subprocess.Popen(["kcat", "-P", "-b", "unused:9092", "-X", "test.mock.num.brokers=1", "-t", "keep",
                             "-p", "0"], stdin=subprocess.PIPE, stderr=subprocess.PIPE)
    line = proc.stderr.readline().decode()
    found = re.search(r"127\.0\.0\.1:\d+", line)
    if not found:
        proc.kill()
        raise RuntimeError(f"kcat did not start a mock cluster: {line!r}")
    return SimpleNamespace(bootstrap=found.group(0), proc=proc, stop=lambda: (proc.stdin.close(), proc.wait(30)))


def run(server, setting: str, topic: str, messages: int, work: Path) -> dict:
    if setting == "kcat":
        r = produce_kcat(server, topic, 2 * messages, work)
        return {"msg_s": r["msg_per_s"], "server_cpu_s_per_million": r["broker_cpu_s"] / (2 * messages) * 1e6,
                "client_cpu_s_per_million": r["client_cpu_s"] / (2 * messages) * 1e6}
    r = produce(server.bootstrap, topic, messages, SETTINGS[setting],
                {"server": server.proc.pid, "client": os.getpid()}, partition=0)
    cpu = {k: v / messages * 1e6 for k, v in r["cpu_s"].items()}
    return {"msg_s": round(r["msg_s"]), "server_cpu_s_per_million": cpu["server"],
            "client_cpu_s_per_million": cpu["client"], "max_in_flight": r["max_in_flight"]}


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--messages", type=int, default=1_000_000)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--out", default=str(REPO / "bench" / "results"))
    p.add_argument("--report-only", action="store_true")
    args = p.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.report_only:
        write_report(json.loads((out / "client_ceiling.json").read_text()), out)
        return 0
    runs: dict = {s: {name: [] for name in SERVERS} for s in SETTINGS}
    with tempfile.TemporaryDirectory(prefix="logbus-client-ceiling-") as tmp:
        work = Path(tmp)
        broker, _ = start_broker(work / "broker", REPO / "platform")
        mock = start_mock()
        try:
            time.sleep(2)  # start-up work settles
            servers = {"logbus": broker, "C mock": mock}
            for i in range(1, args.rounds + 1):
                for setting in SETTINGS:
                    for name in (SERVERS if i % 2 else SERVERS[::-1]):  # who goes first alternates
                        topic = f"ceiling-{setting.replace(' ', '-').replace('=', '')}-{i}"
                        result = run(servers[name], setting, topic, args.messages, work)
                        runs[setting][name].append(result)
                        print(f"round {i} {setting:30} {name:7} {result}", flush=True)
        finally:
            mock.stop()
            broker.stop()
    results = {"command": "python bench/client_ceiling.py " + " ".join(sys.argv[1:]), "messages": args.messages,
               "message_bytes": 200, "cpus": os.cpu_count(), "rounds": args.rounds, "runs": runs}
    (out / "client_ceiling.json").write_text(json.dumps(results, indent=1) + "\n")
    write_report(results, out)
    print((out / "client_ceiling.md").read_text())
    return 0


def write_report(results: dict, out: Path) -> None:
    runs = results["runs"]
    lines = [
        "# The clients' ceiling on this machine: logbus against librdkafka's C mock broker (issue 20)",
        "",
        f"Command: `{results['command']}`  ",
        f"200-byte messages to partition 0; kcat {2 * results['messages']:,} per run, confluent-kafka "
        f"{results['messages']:,}; {results['rounds']} rounds, the two servers alternating in one run on this "
        f"{results['cpus']}-core machine. Cells: median [min–max]. CPU: user + system seconds per million "
        "messages (/proc). The C mock is librdkafka's mock cluster: in memory, no disk, no Python.",
        "",
        "| client setting | server | msg/s | server CPU s / M | client CPU s / M | logbus / C mock |",
        "|---|---|---|---|---|---|",
    ]
    for setting, by_server in runs.items():
        mock = statistics.median(r["msg_s"] for r in by_server["C mock"])
        for name in SERVERS:
            rs = by_server[name]
            rate = statistics.median(r["msg_s"] for r in rs)
            ratio = f"{rate / mock:.2f}x" if name == "logbus" else ""
            lines.append(f"| {setting} | {name} | {side_by_side.cell([r['msg_s'] for r in rs], '{:,.0f}')} | "
                         f"{side_by_side.cell([r['server_cpu_s_per_million'] for r in rs], '{:.2f}')} | "
                         f"{side_by_side.cell([r['client_cpu_s_per_million'] for r in rs], '{:.2f}')} | {ratio} |")
    kcat = {name: statistics.median(r["msg_s"] for r in runs["kcat"][name]) for name in SERVERS}
    mock_cpu = statistics.median(r["server_cpu_s_per_million"] for r in runs["kcat"]["C mock"])
    lines += [
        "",
        f"Against the C mock, which took {mock_cpu:.2f} CPU-seconds per million messages, kcat produced "
        f"{kcat['C mock']:,.0f} msg/s (median): that is kcat's ceiling with this command on this machine (the mock "
        "shares the cores with it), "
        f"{kcat['C mock'] / 2_000_000:.2f}x of issue 20's kcat goal (2,000,000 msg/s). logbus reached "
        f"{kcat['logbus'] / kcat['C mock']:.2f}x of it in the same run.",
        "",
        "Plot: `client_ceiling.png` (msg/s of every run).",
        "",
    ]
    (out / "client_ceiling.md").write_text("\n".join(lines))

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 4))
    for x, (setting, by_server) in enumerate(runs.items()):
        for dx, name, color in ((-0.15, "logbus", "tab:blue"), (0.15, "C mock", "tab:orange")):
            vals = [r["msg_s"] for r in by_server[name]]
            ax.bar(x + dx, statistics.median(vals), width=0.3, color=color, label=name if x == 0 else None)
            ax.scatter([x + dx] * len(vals), vals, color="black", s=8, zorder=3)
    ax.axhline(2_000_000, linestyle="--", color="grey")
    ax.text(-0.4, 2_000_000, "issue 20's kcat goal", va="bottom")
    ax.set_xticks(range(len(runs)), list(runs))
    ax.set_ylabel("msg/s")
    ax.set_ylim(0, 2_300_000)
    ax.set_title("The same clients against logbus and librdkafka's in-memory C mock broker")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / "client_ceiling.png", dpi=100)


if __name__ == "__main__":
    sys.exit(main())
