"""What the audit counter costs per message from the broker to its counts: the whole-batch reader
(``--reader batches``: :mod:`audit.batch_reader` + :mod:`audit.bulk`) against librdkafka's consumer (``--reader
records``), on the same topic in the same run (issue 20: the pipeline's per-record Python work).

A standalone broker holds ``--messages`` audited messages (the four audit headers as ``audit.producer`` writes
them, 2 producer ids, a 150-byte value, idempotent producers with ``linger.ms=20`` as the topology's) in 3
partitions. Each run creates a fresh :class:`audit.counter.TierCounter` in this process and lets it count from
the start until it has counted every message (no rounds emitted: the registry is not involved). Measured per
run: the wall time, this process's CPU (every thread: librdkafka's included) and the broker's. The readers
alternate within each round, so the machine's drift hits both; the counts of both readers must be equal.

Usage: .venv/bin/python bench/audit_reading.py [--messages 1000000] [--rounds 3] [--out bench/results/audit_reading]
Results: <out>/audit_reading.{json,md,png}
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO / "bench"), str(REPO / "tests"), str(REPO / "platform")]

from benchkit.machine import self_cpu, tree_cpu  # noqa: E402
from support import BrokerProcess  # noqa: E402

NAME = "audit_reading"
READERS = ("records", "batches")


def fill(bootstrap: str, topic: str, count: int) -> None:
    from audit.events import HOST_HEADER, PRODUCER_HEADER, SEQUENCE_HEADER, TIME_HEADER
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 3, 1)])[topic].result(30)
    now = int(time.time() * 1000)
    for pid in ("frontend-1-6f1c2a", "frontend-2-9b4e7d"):
        p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 20})
        for seq in range(count // 2):
            headers = [(HOST_HEADER, b"bench-host"), (PRODUCER_HEADER, pid.encode()), (SEQUENCE_HEADER, b"%d" % seq),
                       (TIME_HEADER, b"%d" % (now + seq // 20))]
            while True:
                try:
                    p.produce(topic, b"x" * 150, headers=headers)
                    break
                except BufferError:  # librdkafka's queue is full: let it send
                    p.poll(0.05)
        if p.flush(120):
            raise RuntimeError("messages not acknowledged")


def count_once(bootstrap: str, topic: str, reader: str, expected: int, broker_pid: int) -> tuple[dict, dict]:
    from audit.counter import TierCounter
    from logbus.retry import Backoff

    counter = TierCounter("bench", {"bootstrap.servers": bootstrap}, topic, "http://127.0.0.1:9", window_ms=5000,
                          emit_interval_ms=10**12, reader=reader)
    deadline = time.monotonic() + 600
    broker0, cpu0, start = tree_cpu(broker_pid), self_cpu(), time.perf_counter()

    def done() -> bool:
        if time.monotonic() > deadline:
            raise RuntimeError(f"{reader}: counted {sum(counter.counted.values())} of {expected} in 600 s")
        return sum(counter.counted.values()) >= expected

    counter._count_until(done, Backoff(0.1, 1.0))
    wall, cpu, broker = time.perf_counter() - start, self_cpu() - cpu0, tree_cpu(broker_pid) - broker0
    counted = sum(counter.counted.values())
    if counted != expected:
        raise RuntimeError(f"{reader}: counted {counted}, expected {expected}")
    counts = {k: (v["count"], v["seqs"].as_list()) for k, v in counter.counts.items()}
    return {"wall_s": round(wall, 3), "cpu_s": round(cpu, 3), "broker_cpu_s": round(broker, 3),
            "msg_per_s": round(counted / wall), "us_per_msg": round(cpu / counted * 1e6, 3)}, counts


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", default=str(REPO / "bench" / "results" / NAME))
    parser.add_argument("--report-only", action="store_true", help="rebuild the table and plot from the JSON")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.report_only:
        write_report(json.loads((out / f"{NAME}.json").read_text()), out)
        return 0
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True,
                            text=True).stdout.strip()
    dirty = bool(subprocess.run(["git", "status", "--porcelain", "platform"], cwd=REPO, capture_output=True,
                                text=True).stdout.strip())
    results = {"command": "python bench/audit_reading.py " + " ".join(sys.argv[1:]), "messages": args.messages,
               "rounds": args.rounds, "commit": commit, "uncommitted_platform_changes": dirty,
               "loadavg_before": [round(x, 2) for x in os.getloadavg()], "runs": {r: [] for r in READERS}}
    with tempfile.TemporaryDirectory(prefix="logbus-audit-reading-") as tmp:
        broker = BrokerProcess(Path(tmp) / "broker", num_partitions=3).start()
        try:
            fill(broker.bootstrap, "pv", args.messages)
            reference = None
            for r in range(args.rounds):
                for reader in (READERS if r % 2 == 0 else READERS[::-1]):
                    run, counts = count_once(broker.bootstrap, "pv", reader, args.messages, broker.proc.pid)
                    if reference is None:
                        reference = counts
                    elif counts != reference:
                        raise RuntimeError(f"{reader}: counts differ from the first run's")
                    results["runs"][reader].append(run)
                    print(reader, run, flush=True)
        finally:
            broker.stop()
    results["loadavg_after"] = [round(x, 2) for x in os.getloadavg()]
    (out / f"{NAME}.json").write_text(json.dumps(results, indent=2) + "\n")
    write_report(results, out)
    return 0


def median(results: dict, reader: str, field: str) -> float:
    return statistics.median(run[field] for run in results["runs"][reader])


def write_report(results: dict, out: Path) -> None:
    rows = []
    for field, label, fmt, more_is_better in (
            ("us_per_msg", "counter CPU per message, µs (all its threads)", "{:.2f}", False),
            ("msg_per_s", "messages counted per second (wall)", "{:,.0f}", True),
            ("cpu_s", "counter CPU, s", "{:.2f}", False), ("broker_cpu_s", "broker CPU, s", "{:.2f}", False)):
        cells = [f"{fmt.format(median(results, r, field))} ({', '.join(fmt.format(x[field]) for x in results['runs'][r])})"
                 for r in READERS]
        ratio = median(results, "records", field) / median(results, "batches", field)
        rows.append(f"| {label} | {cells[0]} | {cells[1]} | {1 / ratio if more_is_better else ratio:.2f}x |")
    code = f"commit {results['commit']}" + (" with uncommitted changes under platform/" if
                                             results["uncommitted_platform_changes"] else "")
    (out / f"{NAME}.md").write_text(
        f"# The audit counter's reading and counting, per message\n\nCommand: `{results['command']}` ({code}; load "
        f"average {results['loadavg_before'][0]:.2f} before, {results['loadavg_after'][0]:.2f} after). "
        f"{results['messages']:,} audited messages (2 producers, 150-byte values, 3 partitions) on one standalone "
        f"broker; each run is a fresh counter in one process counting all of them from the start (no rounds "
        f"emitted); the readers alternate within each of {results['rounds']} rounds; median (runs). Both readers' "
        f"counts were equal in every run.\n\n| measure | records (librdkafka) | batches | the batch reader's gain |\n"
        f"|---|---|---|---|\n" + "\n".join(rows) + f"\n\nPlot: `{NAME}.png`.\n")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(9, 3.5))
    for ax, field, label in ((axes[0], "us_per_msg", "counter CPU µs per message"),
                             (axes[1], "msg_per_s", "messages counted per second")):
        for k, reader in enumerate(READERS):
            values = [x[field] for x in results["runs"][reader]]
            ax.bar([k], [statistics.median(values)], 0.6, label=reader)
            ax.plot([k] * len(values), values, "k.", ms=5)
        ax.set_xticks(range(len(READERS)), READERS)
        ax.set_title(label)
    fig.suptitle(f"audit counter: librdkafka records vs whole batches ({results['messages']:,} messages)")
    fig.tight_layout()
    fig.savefig(out / f"{NAME}.png", dpi=100)


if __name__ == "__main__":
    sys.exit(main())
