"""What the audit adds to a producer's ``produce`` call (issue 20: the pipeline benchmark's producers are Python
``AuditedProducer``s, the busiest process at its top rates).

In one process, side by side: confluent-kafka's ``Producer.produce``, ``AuditedProducer.produce`` of this tree,
and ``AuditedProducer.produce`` as it was at ``--before`` (the module's source from git, imported under another
name; everything it imports is this tree's). Each call produces a 200-byte value to one topic with a partition
given, as the pipeline benchmark's workers do, into a producer whose bootstrap server does not answer: librdkafka
only queues, so the figure is the Python call, not the network. The audit window is an hour, so no monitoring
event is published while measuring. Each round runs every variant once, the order rotated from round to round;
cells are the median of the rounds, and the before/after ratio is also given round by round (pairs of the same
round).

Usage: .venv/bin/python bench/audited_producer_cost.py [--before a418fe3] [--messages 200000] [--rounds 12]
       [--out bench/results]
Results: <out>/audited_producer_cost.{json,md}
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO / "platform")]

from audit.events import HOST_HEADER, PRODUCER_HEADER, SEQUENCE_HEADER, TIME_HEADER  # noqa: E402

CONF = {"bootstrap.servers": "127.0.0.1:9", "queue.buffering.max.messages": 10_000_000,
        "queue.buffering.max.kbytes": 2_000_000, "linger.ms": 20, "message.timeout.ms": 600_000, "log_level": 0}
AUDIT = {"schema.registry.url": "http://127.0.0.1:9", "audit.window.ms": 3_600_000, "audit.host": "bench-host"}


def before_class(rev: str, workdir: Path):
    source = subprocess.run(["git", "-C", str(REPO), "show", f"{rev}:platform/audit/producer.py"], check=True,
                            capture_output=True, text=True).stdout
    path = workdir / "audited_producer_before.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("audited_producer_before", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.AuditedProducer


class WithHeaders:
    """A plain Producer called with what an audited record carries (four headers, a timestamp), built per call
    as simply as Python allows: the part of the audit's cost that is librdkafka's, not the wrapper's."""

    def __init__(self, producer):
        self._producer = producer
        self.purge, self.poll = producer.purge, producer.poll

    def produce(self, topic, value, partition):
        now = int(time.time() * 1000)
        self._producer.produce(topic, value, partition=partition, timestamp=now,
                               headers=[(HOST_HEADER, b"bench-host"), (PRODUCER_HEADER, b"0" * 32),
                                        (SEQUENCE_HEADER, str(partition).encode()), (TIME_HEADER, str(now).encode())])


def per_call_us(producer, messages: int) -> float:
    value = b"v" * 200
    produce = producer.produce
    start = time.perf_counter()
    for i in range(messages):
        produce("page-views", value, partition=i % 3)
    elapsed = time.perf_counter() - start
    producer.purge()  # nothing will ever be delivered: drop the queue (and its purge reports) before the next round
    producer.poll(0)
    return 1e6 * elapsed / messages


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", default="a418fe3")
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--out", default=str(REPO / "bench" / "results"))
    args = parser.parse_args()
    from confluent_kafka import Producer

    from audit.producer import AuditedProducer

    with tempfile.TemporaryDirectory() as tmp:
        Before = before_class(args.before, Path(tmp))
        variants = {"Producer.produce (no audit)": Producer(CONF),
                    "Producer.produce with the audit's four headers and a timestamp": WithHeaders(Producer(CONF)),
                    f"AuditedProducer.produce at {args.before}": Before({**CONF, **AUDIT}),
                    "AuditedProducer.produce, this tree": AuditedProducer({**CONF, **AUDIT})}
        for producer in variants.values():  # warm-up
            per_call_us(producer, 20_000)
        runs = {name: [] for name in variants}
        names = list(variants)
        for i in range(args.rounds):
            for name in names[i % len(names):] + names[:i % len(names)]:
                runs[name].append(round(per_call_us(variants[name], args.messages), 3))
    medians = {name: statistics.median(v) for name, v in runs.items()}
    plain = medians["Producer.produce (no audit)"]
    pairs = [after / before for before, after in zip(runs[names[2]], runs[names[3]])]
    command = " ".join([".venv/bin/python bench/audited_producer_cost.py", *sys.argv[1:]])
    head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True,
                          text=True).stdout.strip()
    dirty = bool(subprocess.run(["git", "-C", str(REPO), "status", "--porcelain", "--", "platform", "bench",
                                 ":!bench/results"], capture_output=True, text=True).stdout.strip())
    lines = ["# What the audit adds to a producer's produce call (issue 20)", "",
             f"Command: `{command}`; this tree: commit {head}{' with uncommitted changes' if dirty else ''}. "
             f"{args.messages:,} calls of a 200-byte value per round, {args.rounds} rounds, the variants' order "
             "rotated from round to round; µs per call, median "
             "[min–max] of the rounds. Method: the docstring of `bench/audited_producer_cost.py`.", "",
             "| variant | µs per call | audit's cost over the plain call, µs |", "|---|---|---|"]
    for name in names:
        v = runs[name]
        extra = "" if name == names[0] else f"{medians[name] - plain:.2f}"
        lines.append(f"| {name} | {medians[name]:.2f} [{min(v):.2f}–{max(v):.2f}] | {extra} |")
    old, new = medians[names[2]] - plain, medians[names[3]] - plain
    lines += ["", f"The audit's own cost per call, this tree against {args.before}: {new:.2f} against {old:.2f} µs "
              f"({new / old:.2f}x); the whole call {medians[names[3]] / medians[names[2]]:.2f}x. The second row is what librdkafka "
              "itself takes for the headers and timestamp, so the wrappers' own Python is the difference to it: "
              f"{medians[names[3]] - medians[names[1]]:.2f} µs now, {medians[names[2]] - medians[names[1]]:.2f} before.",
              "", f"This tree's call over {args.before}'s, round by round: "
              + ", ".join(f"{p:.2f}x" for p in pairs) + f" (median {statistics.median(pairs):.2f}x; "
              f"{sum(p < 1 for p in pairs)} of {len(pairs)} rounds below 1).", ""]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "audited_producer_cost.md").write_text("\n".join(lines))
    (out / "audited_producer_cost.json").write_text(json.dumps(
        {"command": command, "commit": head, "uncommitted": dirty, "pairs": pairs, "messages": args.messages, "runs_us": runs, "median_us": medians},
        indent=1) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
