"""Batched produce, two broker versions side by side (issue 20: kcat at 2,000,000 msg/s on one partition): a
broker of the working tree and a broker of an earlier commit, alternating in the same run on the same machine.

Producers, each on a fresh topic of one partition, acks=1, 200-byte messages:
- ``kcat``: kcat (C) from a file with librdkafka's batching (``linger.ms=5``, ``batch.num.messages=10000``;
  the paper benchmark's kcat run): batches of thousands of records;
- ``confluent default``: confluent-kafka with librdkafka's default batching (measured until the high watermark
  covers every message);
- ``batch 50``: confluent-kafka at ``batch.num.messages=50`` (small batches: checked record by record, so this
  row shows the small-batch path did not get worse).

Per run: msg/s and the broker's CPU (user + system) per GB. Then, in-process, produce validation of one batch
(``validation.check_records``) record by record, column-wise (numpy) and compiled (numba), per batch size.

Usage: .venv/bin/python bench/batched_produce.py --before <commit> [--messages 1000000] [--rounds 3]
       [--out bench/results] | --report-only
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
import timeit
from types import SimpleNamespace
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO / "bench"), str(REPO / "tests"), str(REPO / "platform")]

from benchkit import logbus_side, side_by_side  # noqa: E402
from paper_benchmark import SIZE, produce_kcat  # noqa: E402
from request_cost import start_broker  # noqa: E402

PRODUCERS = ("kcat", "confluent default", "batch 50")


def measure(workdir: Path, platform_dir: Path, messages: int) -> dict:
    broker, _metrics = start_broker(workdir, platform_dir)
    out = {}
    try:
        time.sleep(1)  # start-up work settles
        out["kcat"] = produce_kcat(broker, "bench-kcat", messages, workdir)
        out["confluent default"] = logbus_side.produce(broker, "bench-default", messages, SIZE, {})
        out["batch 50"] = logbus_side.produce(broker, "bench-batch50", messages // 2, SIZE,
                                              logbus_side.RUNS["batch50"])
        for result in out.values():
            result.pop("samples", None)
        return out
    finally:
        broker.stop()


def validation_micro() -> list[dict]:
    """µs per record of ``check_records`` on one uncompressed batch of n x 200 B, record by record and
    column-wise (best of 5)."""
    import random

    import crc32c

    from broker.protocol import columnar, validation
    from broker.protocol.batch_builder import build_batch, encode_record

    rows = []
    for n in (50, 100, 200, 500, 1000, 5000):
        records = b"".join(encode_record(i, None, random.randbytes(SIZE)) for i in range(n))
        batch = bytearray(build_batch([records], timestamp_ms=int(time.time() * 1000)))
        batch[23:27], batch[57:61] = (n - 1).to_bytes(4, "big"), n.to_bytes(4, "big")
        batch[17:21] = crc32c.crc32c(bytes(batch[21:])).to_bytes(4, "big")
        batch = bytes(batch)
        row = {"records": n}
        saved = columnar.COLUMNAR_MIN_RECORDS, validation.KERNEL_MIN_RECORDS, validation._load_kernels()
        off = SimpleNamespace(ENABLED=False)
        for name, columns, compiled, module in (("record by record", 1 << 30, 1 << 30, off),
                                                ("column-wise", 1, 1, off), ("compiled", 1 << 30, 1, saved[2])):
            columnar.COLUMNAR_MIN_RECORDS, validation.KERNEL_MIN_RECORDS, validation._kernels = columns, compiled, module
            try:
                reps = max(1, 20_000 // n)
                best = min(timeit.repeat(lambda: validation.check_records(batch, 1 << 24), number=reps, repeat=5))
            finally:
                columnar.COLUMNAR_MIN_RECORDS, validation.KERNEL_MIN_RECORDS, validation._kernels = saved
            row[name] = best / reps / n * 1e6
        rows.append(row)
    return rows


def main() -> int:
    args = side_by_side.parser(messages=1_000_000).parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.report_only:
        write_report(json.loads((out / "batched_produce.json").read_text()), out)
        return 0
    if not args.before:
        sys.exit("batched_produce.py: --before is required")
    before_rev, after_rev = side_by_side.short_rev(args.before), side_by_side.short_rev("HEAD")
    started = time.time()
    loads = [os.getloadavg()[0]]

    def said(i: int, name: str, result: dict) -> None:
        loads.append(os.getloadavg()[0])
        print(f"round {i} {name:6} " + ", ".join(f"{p}: {r['msg_per_s']:,.0f} msg/s" for p, r in result.items()),
              flush=True)

    runs = side_by_side.alternate(before_rev, args.rounds, lambda work, tree: measure(work, tree, args.messages),
                                  "logbus-batched-produce-", said)
    results = {"command": "python bench/batched_produce.py " + " ".join(sys.argv[1:]), "before": before_rev,
               "after": f"{after_rev} + working tree", "messages": args.messages, "message_bytes": SIZE,
               "cpus": os.cpu_count(), "runs": runs, "validation": validation_micro(),
               "seconds": round(time.time() - started), "load_average": [round(x, 2) for x in loads],
               "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(started))}
    (out / "batched_produce.json").write_text(json.dumps(results, indent=1) + "\n")
    write_report(results, out)
    print((out / "batched_produce.md").read_text())
    return 0


def write_report(results: dict, out: Path) -> None:
    runs = results["runs"]
    keys = [("msg_per_s", "msg/s", "{:,.0f}"), ("broker_cpu_s_per_GB", "broker CPU s per GB", "{:.1f}")]
    loads = results["load_average"]
    lines = [
        "# Batched produce, before and after (issue 20)",
        "",
        f"Command: `{results['command']}`  ",
        f"Before: `{results['before']}`; after: `{results['after']}`. {results['date']}, {results['seconds']} s. "
        f"{results['messages']:,} messages of {results['message_bytes']} bytes per kcat and default-batching run "
        f"(half of that at batch 50), acks=1, one partition, producer and broker on this {results['cpus']}-core "
        f"machine; {len(runs['after'])} rounds, before and after alternating. Cells: median [min–max]. 1-minute "
        f"load average {min(loads):.2f}–{max(loads):.2f} over the run.",
        "",
        "| producer | measure | before | after | after / before |",
        "|---|---|---|---|---|",
    ]
    for producer in PRODUCERS:
        for key, label, fmt in keys:
            cells, medians = [], []
            for name in ("before", "after"):
                vals = [r[producer][key] for r in runs[name]]
                medians.append(statistics.median(vals))
                cells.append(f"{fmt.format(medians[-1])} [{fmt.format(min(vals))}–{fmt.format(max(vals))}]")
            lines.append(f"| {producer} | {label} | {cells[0]} | {cells[1]} | {medians[1] / medians[0]:.2f}x |")
    lines += ["", "Produce validation of one uncompressed batch of n x 200 B, in-process, µs per record (best of 5):",
              "", "| records in the batch | record by record | column-wise (numpy) | compiled (numba) | "
              "compiled / record by record |", "|---|---|---|---|---|"]
    for row in results["validation"]:
        lines.append(f"| {row['records']:,} | {row['record by record']:.3f} | {row['column-wise']:.3f} | "
                     f"{row['compiled']:.3f} | {row['compiled'] / row['record by record']:.2f}x |")
    lines += ["", "Plot: `batched_produce.png` (msg/s of every run, per producer).", ""]
    (out / "batched_produce.md").write_text("\n".join(lines))

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(PRODUCERS), figsize=(12, 4))
    for ax, producer in zip(axes, PRODUCERS):
        for x, name in enumerate(("before", "after")):
            vals = [r[producer]["msg_per_s"] for r in runs[name]]
            ax.scatter([x] * len(vals), vals, label=name)
            ax.hlines(statistics.median(vals), x - 0.2, x + 0.2)
        ax.set_xticks([0, 1], [f"before\n{results['before']}", "after"])
        ax.set_title(f"{producer}, msg/s")
        ax.set_ylim(bottom=0)
    axes[0].axhline(2_000_000, linestyle="--", color="grey")
    axes[0].text(0.5, 2_000_000, "issue 20 goal: 2,000,000", ha="center", va="bottom")
    axes[0].set_ylim(0, max(axes[0].get_ylim()[1], 2_300_000))
    fig.tight_layout()
    fig.savefig(out / "batched_produce.png", dpi=100)


if __name__ == "__main__":
    sys.exit(main())
