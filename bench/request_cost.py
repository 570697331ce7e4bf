"""The broker's cost per small request, two versions side by side (issue 20): the unbatched producer of the
paper benchmark (confluent-kafka, ``batch.num.messages=1``, ``linger.ms=0``, acks=1: one Produce request per
200-byte message) against a broker of the working tree and a broker of an earlier commit, alternating in the
same run on the same machine; the batch-50 producer too, to see that batched produce lost nothing.

Each broker serves Prometheus metrics; its Produce request counter, read before and after a run, gives the
requests the run took (so messages per request is measured, not assumed), and the broker's CPU (user + system)
over the run divided by them gives the CPU per request.

Usage: .venv/bin/python bench/request_cost.py --before <commit> [--messages 200000] [--rounds 3] [--out bench/results]
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO / "bench"), str(REPO / "tests")]

from benchkit import logbus_side, side_by_side  # noqa: E402
from paper_benchmark import SIZE, per_request, produce_requests  # noqa: E402
from support import BrokerProcess, free_port, wait_for_port  # noqa: E402


def launch(broker: BrokerProcess, platform_dir: Path, python: str = sys.executable) -> BrokerProcess:
    """Start ``broker`` (configured, not started) with the code under ``platform_dir``, run by ``python``."""
    broker.write_config()
    env = dict(os.environ, PYTHONPATH=str(platform_dir))
    with open(broker.output, "ab") as out:
        broker.proc = subprocess.Popen([python, "-m", "logbus.cli", "broker", str(broker.config_path)],
                                       stdout=out, stderr=subprocess.STDOUT, env=env, cwd=broker.workdir)
    wait_for_port(broker.host, broker.port, proc=broker.proc)
    return broker


def start_broker(workdir: Path, platform_dir: Path, python: str = sys.executable) -> tuple[BrokerProcess, str]:
    """A standalone broker running the code under ``platform_dir``; (broker, its metrics URL)."""
    metrics_port = free_port()
    broker = BrokerProcess(workdir, num_partitions=1, metrics_listener=f"http://127.0.0.1:{metrics_port}")
    return launch(broker, platform_dir, python), f"http://127.0.0.1:{metrics_port}/metrics"


PRODUCERS = ("batch1", "batch50")  # the paper benchmark's unbatched producer, and its batch-50 one (regressions)


def measure(workdir: Path, platform_dir: Path, messages: int, python: str = sys.executable) -> dict:
    broker, metrics_url = start_broker(workdir, platform_dir, python)
    out = {}
    try:
        time.sleep(1)  # start-up work settles
        for producer in PRODUCERS:
            before = produce_requests(metrics_url)
            result = logbus_side.produce(broker, f"bench-{producer}", messages, SIZE, logbus_side.RUNS[producer])
            out[producer] = per_request(result, produce_requests(metrics_url) - before - 1)  # minus the first message
            out[producer].pop("samples")
        return out
    finally:
        broker.stop()


def main() -> int:
    return side_by_side.main("request_cost", 200_000, SIZE, measure, write_report)


def write_report(results: dict, out: Path) -> None:
    runs = results["runs"]
    keys = [("msg_per_s", "msg/s", "{:,.0f}"), ("msgs_per_request", "messages per Produce request", "{:.2f}"),
            ("broker_cpu_us_per_request", "broker CPU µs per request", "{:.1f}"),
            ("broker_cpu_s_per_GB", "broker CPU s per GB", "{:.1f}")]
    lines = [
        "# Broker CPU per small request, before and after (issue 20)",
        "",
        f"Command: `{results['command']}`  ",
        f"Before: `{results['before']}`; after: `{results['after']}`. {results['messages']:,} messages of "
        f"{results['message_bytes']} bytes per run from confluent-kafka, acks=1, one partition: batch 1 = "
        f"`batch.num.messages=1`, `linger.ms=0` (the unbatched producer); batch 50 = `batch.num.messages=50`, "
        f"`linger.ms=5`. {len(runs['after'])} rounds, before and after alternating in the same run on this "
        f"{results['cpus']}-core machine. Cells: median [min–max].",
        "",
        "| producer | measure | before | after | after / before |",
        "|---|---|---|---|---|",
    ]
    lines += side_by_side.table_rows(runs, PRODUCERS, keys)
    lines += ["", "Plot: `request_cost.png` (broker CPU µs per request and msg/s of every run).", ""]
    (out / "request_cost.md").write_text("\n".join(lines))

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for ax, (key, label) in zip(axes, (("broker_cpu_us_per_request", "broker CPU µs per Produce request, batch 1"),
                                       ("msg_per_s", "unbatched produce (batch 1), msg/s"))):
        for x, name in enumerate(("before", "after")):
            vals = [r["batch1"][key] for r in runs[name]]
            ax.scatter([x] * len(vals), vals, label=name)
            ax.hlines(statistics.median(vals), x - 0.2, x + 0.2)
        ax.set_xticks([0, 1], [f"before\n{results['before']}", "after"])
        ax.set_title(label)
        ax.set_ylim(bottom=0)
    for ax, goal, text in ((axes[0], 20, "issue 20 goal: 20 µs"), (axes[1], 50_000, "issue 20 goal: 50,000 msg/s")):
        ax.axhline(goal, linestyle="--", color="grey")
        ax.text(0.5, goal, text, ha="center", va="bottom")
        ax.set_ylim(0, max(ax.get_ylim()[1], goal * 1.15))
    fig.tight_layout()
    fig.savefig(out / "request_cost.png", dpi=100)


if __name__ == "__main__":
    sys.exit(main())
