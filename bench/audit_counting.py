"""What the audit counter's counting costs per message, in-process: ``TierCounter._count`` of this tree against
the same module at ``--before`` (a git revision), on the same synthetic messages, in the same run.

The messages are what the counter's consumer hands over: one producer's audited messages (the four audit
headers) spread over 3 partitions by round robin, as ``consume(1000)`` batches, in two orders:

- interleaved: the partitions' messages alternate (a counter that keeps up with live traffic);
- partition by partition: each partition's messages in one run (a backlog read after a restart), so the
  producer's sequence numbers arrive with gaps that the other partitions fill only much later.

"Before" counted one message per call (it is called per message); "after" takes the consumer's batch. The
counting state starts empty for every run; process CPU time per message; the variants alternate within a run.

Usage: .venv/bin/python bench/audit_counting.py --before REV [--messages 300000] [--runs 5] [--out bench/results]
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
sys.path[:0] = [str(REPO / "platform"), str(REPO / "tests")]

from fake_messages import FakeMessage as Message  # noqa: E402


def messages(n: int) -> dict[str, list[Message]]:
    from audit.events import HOST_HEADER, PRODUCER_HEADER, SEQUENCE_HEADER, TIME_HEADER

    now = int(time.time() * 1000)
    live = [Message("page-views", i % 3, i // 3, headers=[
        (PRODUCER_HEADER, b"producer-1"), (SEQUENCE_HEADER, b"%d" % i), (TIME_HEADER, b"%d" % (now + i // 40)),
        (HOST_HEADER, b"host-a")]) for i in range(n)]
    return {"interleaved": live, "partition by partition": sorted(live, key=lambda m: (m.partition(), m.offset()))}


def before_counter(rev: str, root: Path):
    """The TierCounter class of ``audit`` at ``rev`` (its counter.py and ranges.py; the rest of this tree)."""
    import importlib

    pkg = root / "audit"
    pkg.mkdir(parents=True)
    for name in ("counter.py", "ranges.py"):
        (pkg / name).write_text(subprocess.run(["git", "show", f"{rev}:platform/audit/{name}"], cwd=REPO, check=True,
                                               capture_output=True, text=True).stdout)
    for name in os.listdir(REPO / "platform" / "audit"):
        if name.endswith(".py") and not (pkg / name).exists():
            (pkg / name).write_text((REPO / "platform" / "audit" / name).read_text())
    saved = {k: v for k, v in sys.modules.items() if k == "audit" or k.startswith("audit.")}
    for k in saved:
        del sys.modules[k]
    sys.path.insert(0, str(root))
    try:
        module = importlib.import_module("audit.counter")
    finally:
        sys.path.remove(str(root))
        for k in [k for k in sys.modules if k == "audit" or k.startswith("audit.")]:
            del sys.modules[k]
        sys.modules.update(saved)
    return module.TierCounter


def per_message(cls) -> bool:
    import inspect

    return list(inspect.signature(cls._count).parameters)[1] == "m"


def run_once(cls, batch: list[Message]) -> float:
    counter = cls.__new__(cls)  # the counting state only: no clients
    counter.counts, counter.positions, counter.dirty, counter.counted, counter.window_ms = {}, {}, set(), {}, 5000
    single = per_message(cls)
    started = time.process_time()
    if single:
        for m in batch:
            counter._count(m)
    else:
        for i in range(0, len(batch), 1000):
            counter._count(batch[i:i + 1000])
    spent = time.process_time() - started
    counted = sum(e["count"] for e in counter.counts.values())
    if counted != len(batch):  # every message is audited: a count short of them measured the wrong thing
        raise RuntimeError(f"{cls.__module__}: counted {counted} of {len(batch)} messages")
    return spent / len(batch) * 1e6


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--before", required=True, help="git revision of the counter to compare with")
    parser.add_argument("--messages", type=int, default=300_000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--out", default=str(REPO / "bench" / "results"))
    args = parser.parse_args()
    from audit.counter import TierCounter as After

    with tempfile.TemporaryDirectory(prefix="logbus-audit-bench-") as tmp:
        Before = before_counter(args.before, Path(tmp))
    orders = messages(args.messages)
    results: dict = {"command": "python bench/audit_counting.py " + " ".join(sys.argv[1:]), "messages": args.messages,
                     "runs": args.runs, "before": args.before, "loadavg_before": [round(x, 2) for x in os.getloadavg()],
                     "us_per_message": {}}
    for order, batch in orders.items():
        times: dict[str, list[float]] = {"before": [], "after": []}
        for _ in range(args.runs):
            for label, cls in (("before", Before), ("after", After)):
                times[label].append(round(run_once(cls, batch), 3))
        results["us_per_message"][order] = times
        print(order, {k: statistics.median(v) for k, v in times.items()}, flush=True)
    results["loadavg_after"] = [round(x, 2) for x in os.getloadavg()]
    out = Path(args.out)
    (out / "audit_counting.json").write_text(json.dumps(results, indent=2) + "\n")
    rows = []
    for order, times in results["us_per_message"].items():
        b, a = statistics.median(times["before"]), statistics.median(times["after"])
        rows.append(f"| {order} | {b:.2f} ({', '.join(map(str, times['before']))}) | {a:.2f} "
                    f"({', '.join(map(str, times['after']))}) | {b / a:.2f}x |")
    (out / "audit_counting.md").write_text(
        f"# The audit counter's counting, per message\n\nCommand: `{results['command']}` (load average "
        f"{results['loadavg_before'][0]:.2f} before, {results['loadavg_after'][0]:.2f} after); {args.messages:,} "
        f"messages of one producer over 3 partitions, consume batches of 1,000; CPU µs per message, median of "
        f"{args.runs} runs (runs).\n\n| order | before ({args.before}) | after | before / after |\n|---|---|---|---|\n"
        + "\n".join(rows) + "\n")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 3.5))
    names = list(results["us_per_message"])
    for k, label in enumerate(("before", "after")):
        ax.bar([i + 0.38 * k for i in range(len(names))],
               [statistics.median(results["us_per_message"][n][label]) for n in names], 0.38,
               label=f"{label} ({args.before})" if label == "before" else label)
    ax.set_xticks([i + 0.19 for i in range(len(names))], names)
    ax.set_ylabel("CPU µs per message")
    ax.set_title("audit counter: counting cost")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / "audit_counting.png", dpi=100)
    return 0


if __name__ == "__main__":
    sys.exit(main())
