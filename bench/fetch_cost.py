"""The broker's cost per consumer fetch, two versions side by side (issue 20: kcat consuming 4,000,000 msg/s).

The paper benchmark's kcat consumer reads 200-byte messages (written in batches of 50) with 200 KB fetches
(``fetch.max.bytes = max.partition.fetch.bytes = 204800``): about a thousand messages a fetch, one fetch in
flight, so each fetch's turn in the broker is part of every round trip. This runs that consumer, and
confluent-kafka's consumer with the same fetch sizes, against a broker of the working tree and one of an
earlier commit, alternating in the same run; the broker's Fetch counter (its metrics) gives the fetches a run
took, its CPU (user + system, /proc) over them the CPU per fetch.

Usage: .venv/bin/python bench/fetch_cost.py --before <commit> [--messages 2000000] [--rounds 3] [--out bench/results]
       | --report-only
Results: bench/results/fetch_cost.{json,md,png}
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO / "bench"), str(REPO / "tests")]

from benchkit import logbus_side, side_by_side  # noqa: E402
from paper_benchmark import SIZE, requests_answered  # noqa: E402
from request_cost import start_broker  # noqa: E402

CONSUMERS = ("kcat", "confluent-kafka")


def measure(workdir: Path, platform_dir: Path, messages: int) -> dict:
    broker, metrics_url = start_broker(workdir, platform_dir)
    out = {}
    try:
        time.sleep(1)  # start-up work settles
        logbus_side.produce(broker, "bench-fetch", messages, SIZE, logbus_side.RUNS["batch50"])
        for consumer in CONSUMERS:
            before = requests_answered(metrics_url, "Fetch")
            if consumer == "kcat":
                result = logbus_side.consume_kcat(broker, "bench-fetch", messages, SIZE)
            else:
                result = logbus_side.consume(broker, "bench-fetch", messages, SIZE)
            result.pop("samples", None)
            fetches = requests_answered(metrics_url, "Fetch") - before
            result["fetches"] = fetches
            result["broker_cpu_us_per_fetch"] = round(result["broker_cpu_s"] / max(fetches, 1) * 1e6, 1)
            out[consumer] = result
        return out
    finally:
        broker.stop()


def main() -> int:
    return side_by_side.main("fetch_cost", 2_000_000, SIZE, measure, write_report)


def write_report(results: dict, out: Path) -> None:
    runs = results["runs"]
    keys = [("msg_per_s", "msg/s", "{:,.0f}"), ("fetches", "Fetch requests", "{:,.0f}"),
            ("broker_cpu_us_per_fetch", "broker CPU µs per fetch", "{:.1f}"),
            ("broker_cpu_s_per_GB", "broker CPU s per GB", "{:.2f}"), ("client_cpu_s", "client CPU s", "{:.2f}")]
    lines = [
        "# Broker CPU per consumer fetch, before and after (issue 20)",
        "",
        f"Command: `{results['command']}`  ",
        f"Before: `{results['before']}`; after: `{results['after']}`. {results['messages']:,} messages of "
        f"{results['message_bytes']} bytes (written by confluent-kafka in batches of 50) read from one partition "
        "with 200 KB fetches (the paper benchmark's consumers: kcat, and confluent-kafka in Python), "
        f"{len(runs['after'])} rounds, before and after alternating in the same run on this {results['cpus']}-core "
        "machine. Cells: median [min–max].",
        "",
        "| consumer | measure | before | after | after / before |",
        "|---|---|---|---|---|",
    ]
    lines += side_by_side.table_rows(runs, CONSUMERS, keys)
    lines += ["", "Plot: `fetch_cost.png` (broker CPU µs per fetch and msg/s of every run).", ""]
    (out / "fetch_cost.md").write_text("\n".join(lines))

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for ax, (key, label) in zip(axes, (("broker_cpu_us_per_fetch", "broker CPU µs per 200 KB fetch"),
                                       ("msg_per_s", "consumer msg/s"))):
        for x, (consumer, name) in enumerate((c, n) for c in CONSUMERS for n in ("before", "after")):
            vals = [r[consumer][key] for r in runs[name]]
            ax.scatter([x] * len(vals), vals, color="tab:blue" if name == "before" else "tab:orange")
            ax.hlines(statistics.median(vals), x - 0.2, x + 0.2)
        ax.set_xticks(range(4), [f"{c}\n{n}" for c in CONSUMERS for n in ("before", "after")])
        ax.set_title(label)
        ax.set_ylim(bottom=0)
    axes[1].axhline(4_000_000, linestyle="--", color="grey")
    axes[1].text(0, 4_000_000, "issue 20's kcat goal", va="bottom")
    axes[1].set_ylim(0, 4_600_000)
    fig.tight_layout()
    fig.savefig(out / "fetch_cost.png", dpi=100)


if __name__ == "__main__":
    sys.exit(main())
