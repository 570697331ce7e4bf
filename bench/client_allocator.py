"""confluent-kafka (librdkafka) in Python with glibc's malloc and with jemalloc preloaded (issue 20: the client side
of the benchmarks; ``bench/kcat_allocator.py`` does the same for kcat).

librdkafka frees most messages in another thread than the one that allocated them: a produced message is copied by
the caller's ``produce`` and freed by the broker thread once acknowledged; a fetched one is allocated by the fetch
thread and freed by the caller after ``consume``. glibc's malloc then takes the allocating arena's lock, a futex
wait and wake-up when the threads collide. jemalloc does not.

Per round, on one standalone broker of this tree, a child Python process with confluent-kafka (the paper
benchmark's clients: ``benchkit.logbus_side.produce`` with librdkafka's default batching, acks=1, then
``consume`` of the same topic, ~200 KB per fetch) sends and then reads ``--messages`` 200-byte messages on a topic
of its own, once with glibc's malloc and once with Debian's jemalloc preloaded (``benchkit.logbus_side.JEMALLOC_ENV``,
installed when missing); the order alternates between rounds. Each child reports its rates and its own CPU seconds
and whether jemalloc is mapped in it.

Usage: .venv/bin/python bench/client_allocator.py [--messages 1000000] [--rounds 5]
       [--out bench/results/client_allocator] | --report-only
Results: <out>/client_allocator.{json,md,png}
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO / "bench"), str(REPO / "tests")]

from benchkit import rounds_cli  # noqa: E402
from benchkit.logbus_side import JEMALLOC_ENV  # noqa: E402

ALLOCATORS = {"glibc": {}, "jemalloc": JEMALLOC_ENV}
PHASES = {"producer": "confluent-kafka producer, librdkafka's default batching, acks=1",
          "consumer": "confluent-kafka consumer, ~200 KB a fetch"}


def child(bootstrap: str, topic: str, pid: int, log_dir: str, count: int) -> None:
    """Runs in the measured process: produce then consume ``count`` messages; prints the results as JSON."""
    from benchkit import logbus_side

    class Broker:  # what logbus_side needs of tests/support.BrokerProcess
        pass

    broker = Broker()
    broker.bootstrap, broker.log_dir = bootstrap, Path(log_dir)
    broker.proc = type("Proc", (), {"pid": pid})()
    maps = Path("/proc/self/maps").read_text()
    produced = logbus_side.produce(broker, topic, count, 200, logbus_side.RUNS["default"])
    consumed = logbus_side.consume(broker, topic, count, 200)
    print(json.dumps({"jemalloc_loaded": "libjemalloc" in maps,
                      "producer": {k: produced[k] for k in ("msg_per_s", "client_cpu_s", "broker_cpu_s")},
                      "consumer": {k: consumed[k] for k in ("msg_per_s", "client_cpu_s", "broker_cpu_s")}}))


def measure(args) -> dict:
    from kcat_allocator import install
    from request_cost import start_broker

    install()
    work = Path(tempfile.mkdtemp(prefix="client-allocator-"))
    broker, _ = start_broker(work / "broker", REPO / "platform")
    rounds = []
    try:
        for r in range(args.rounds):
            order = list(ALLOCATORS) if r % 2 == 0 else list(reversed(ALLOCATORS))
            rnd = {}
            for name in order:
                done = subprocess.run([sys.executable, __file__, "--child", broker.bootstrap, f"alloc-{name}-{r}",
                                       str(broker.proc.pid), str(broker.log_dir), str(args.messages)],
                                      env={**os.environ, **ALLOCATORS[name]}, capture_output=True, text=True,
                                      timeout=900)
                if done.returncode:
                    raise RuntimeError(f"child ({name}) failed: {done.stderr[-1500:]}")
                rnd[name] = json.loads(done.stdout.strip().splitlines()[-1])
                if rnd[name]["jemalloc_loaded"] != (name == "jemalloc"):
                    raise RuntimeError(f"{name}: jemalloc loaded = {rnd[name]['jemalloc_loaded']}")
                print(r, name, {p: rnd[name][p]["msg_per_s"] for p in PHASES}, flush=True)
            rounds.append(rnd)
    finally:
        broker.stop()
    head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True,
                          text=True).stdout.strip()
    import confluent_kafka

    return {"command": f"python bench/client_allocator.py --messages {args.messages} --rounds {args.rounds} "
                       f"--out {args.out.relative_to(REPO) if args.out.is_relative_to(REPO) else args.out}",
            "commit": head, "librdkafka": confluent_kafka.libversion()[0], "messages": args.messages,
            "rounds": rounds}


def cell(vals: list[float], spec: str) -> str:
    return f"{spec.format(statistics.median(vals))} [{spec.format(min(vals))}–{spec.format(max(vals))}]"


def write_report(results: dict, out: Path) -> None:
    rounds = results["rounds"]
    lines = ["# confluent-kafka's allocator: glibc's malloc or jemalloc (issue 20, the benchmarks' clients)",
             "", f"Command: `{results['command']}` (code of commit {results['commit']}; librdkafka "
             f"{results['librdkafka']}); {results['messages']:,} messages of 200 bytes per run, one partition, one "
             f"standalone broker; {len(rounds)} rounds, the order alternating; median [min–max]. Method: "
             "`bench/client_allocator.py`'s docstring.", "",
             "| run | allocator | msg/s | client CPU s per million | msg/s vs glibc, same round | "
             "client CPU vs glibc, same round |", "|---|---|---|---|---|---|"]
    per_million = 1e6 / results["messages"]
    for phase, label in PHASES.items():
        for name in ALLOCATORS:
            rates = [r[name][phase]["msg_per_s"] for r in rounds]
            cpu = [r[name][phase]["client_cpu_s"] * per_million for r in rounds]
            rate_ratio = [r[name][phase]["msg_per_s"] / r["glibc"][phase]["msg_per_s"] for r in rounds]
            cpu_ratio = [r[name][phase]["client_cpu_s"] / r["glibc"][phase]["client_cpu_s"] for r in rounds]
            lines.append(f"| {label} | {name} | {cell(rates, '{:,.0f}')} | {cell(cpu, '{:.2f}')} | "
                         f"{cell(rate_ratio, '{:.2f}x')} | {cell(cpu_ratio, '{:.2f}x')} |")
    lines += ["", "Plot: `client_allocator.png`.", ""]
    (out / "client_allocator.md").write_text("\n".join(lines))

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(9, 4))
    for ax, (key, title, scale) in zip(axes, (("msg_per_s", "msg/s (millions)", 1e6),
                                               ("client_cpu_s", "client CPU s per million", 1 / per_million))):
        for i, name in enumerate(ALLOCATORS):
            meds = [statistics.median(r[name][p][key] for r in rounds) / scale for p in PHASES]
            ax.bar([x + i * 0.4 for x in range(len(PHASES))], meds, 0.4, label=name)
        ax.set_xticks([x + 0.2 for x in range(len(PHASES))], list(PHASES))
        ax.set_title(title)
        ax.legend(fontsize=8)
    fig.suptitle("confluent-kafka with glibc's malloc and with jemalloc (median of the rounds)")
    fig.tight_layout()
    fig.savefig(out / "client_allocator.png", dpi=110)


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        bootstrap, topic, pid, log_dir, count = sys.argv[2:7]
        child(bootstrap, topic, int(pid), log_dir, int(count))
        return 0
    return rounds_cli.run("client_allocator", measure, write_report)


if __name__ == "__main__":
    raise SystemExit(main())
