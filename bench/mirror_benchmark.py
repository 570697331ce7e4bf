"""Mirror throughput and end-to-end lag between two local clusters (one ZooKeeper, chroots /live and /offline,
one broker each on 127.0.1.1 and 127.0.2.1, one ``logbus mirror`` process), at-least-once and ``--exactly-once``
measured in the same run, each on fresh clusters.

Throughput: --messages 200-byte messages (3 partitions) written to the live cluster first, then the time until
the mirror has copied them all — until its committed offsets (on the source at-least-once, on the target exactly
once) cover every message (msg/s, MB/s). Lag: a producer paced at --rate msg/s for --seconds on the live cluster,
a read_committed consumer tailing the offline copy; each payload carries its send time, so the lag is from
produce on live to readable on offline (p50/p99).

Usage: .venv/bin/python bench/mirror_benchmark.py [--messages 2000000] [--rate 0 (half the copy rate)] [--seconds 10]
[--modes at-least-once,records,exactly-once] [--flamegraph bench/results/flamegraph_mirror_{mode}.svg]
[--out DIR]. Modes: at-least-once, interpreted, records, exactly-once, and exactly-once-wait (``--exactly-once``
with the topologies' mirror fetch settings: a fetch waits for 256 KB or 100 ms). A run of some modes is saved only
with an --out of its own; into bench/results only a run of every mode.

--scaling: the default mode with one mirror process, then with two in the same consumer group (each on fresh
clusters, one run) -> bench/results/mirror_scaling.{json,md}: how the mirror scales out by processes.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO / "tests"), str(REPO / "platform")]

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402
from support import BrokerProcess, ZooKeeperProcess, terminate, wait_until  # noqa: E402
from logbus.topology import mirror_fetch_wait  # noqa: E402

SIZE = 200


MODES = {"at-least-once": [], "interpreted": [], "records": ["--copy", "records"], "exactly-once": ["--exactly-once"],
         "exactly-once-wait": ["--exactly-once"]}
# the topologies' mirror fetch settings: a fetch waits for 256 KB or 100 ms
MODE_CONSUMER = {"exactly-once-wait": mirror_fetch_wait({})}
MODE_ENV = {"interpreted": {"LOGBUS_JIT": "0"}}  # the whole-batch rewrite in Python, not compiled with numba
MODE_TITLES = {"at-least-once": "at-least-once, whole batches (default)",
               "interpreted": "at-least-once, whole batches, `LOGBUS_JIT=0` (the rewrite in Python)",
               "records": "at-least-once, `--copy records` (librdkafka, the path before issue 20)",
               "exactly-once": "`--exactly-once` (whole batches in transactions)",
               "exactly-once-wait": "`--exactly-once`, the topologies' fetch wait (256 KB or 100 ms)"}
GROUP = "logbus-mirror-live"


def committed(bootstrap: str, topic: str) -> int:
    """Messages of ``topic`` the mirror's group has committed on ``bootstrap``."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": GROUP})
    try:
        return sum(max(tp.offset, 0) for tp in consumer.committed([TopicPartition(topic, p) for p in range(3)], 10))
    finally:
        consumer.close()


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=2_000_000)
    parser.add_argument("--rate", type=int, default=0, help="lag phase: msg/s (default 0: half of the copy rate "
                        "just measured for that mode, the issue's 'half of the mirror's capacity')")
    parser.add_argument("--seconds", type=int, default=10)
    parser.add_argument("--out", default=str(REPO / "bench" / "results"))
    parser.add_argument("--modes", default=",".join(MODES), help="comma-separated: at-least-once,exactly-once")
    parser.add_argument("--flamegraph", default="", help="py-spy flamegraph of the mirror process during the "
                        "backlog copy: SVG path with {mode} in it (e.g. bench/results/flamegraph_mirror_{mode}.svg)")
    parser.add_argument("--scaling", action="store_true", help="one vs two mirror processes (mirror_scaling.md)")
    args = parser.parse_args()
    if args.scaling:
        return scaling(args)
    results: dict = {"command": "python bench/mirror_benchmark.py " + " ".join(sys.argv[1:]),
                     "messages": args.messages, "rate": args.rate, "seconds": args.seconds, "modes": {}}
    for mode, flags in MODES.items():
        if mode not in args.modes.split(","):
            continue
        results["modes"][mode] = run_mode(args, flags, mode)
        print(mode, results["modes"][mode], flush=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if len(results["modes"]) < len(MODES) and out == REPO / "bench" / "results":
        print(json.dumps(results, indent=1))  # a partial run is printed, not saved as the committed result
        return 0
    (out / "mirror_benchmark.json").write_text(json.dumps(results, indent=1) + "\n")
    write_markdown(results, args, out / "mirror_benchmark.md")
    plot(results, out / "mirror_benchmark.png")
    print((out / "mirror_benchmark.md").read_text())
    return 0


def write_markdown(results: dict, args, path: Path) -> None:
    modes = results["modes"]
    names = list(modes)
    row = lambda label, fn: f"| {label} | " + " | ".join(fn(modes[m]) for m in names) + " |"  # noqa: E731
    lines = ["# Mirror: throughput and end-to-end lag (two local clusters, one mirror process, 2 cores)", "",
             f"Command: `{results['command']}` (every mode in one run, each on fresh clusters; "
             f"{args.messages:,} × {SIZE} B backlog in 3 partitions)", "",
             "| measure | " + " | ".join(MODE_TITLES[m] for m in names) + " |", "|---|" + "---|" * len(names),
             row("broker: one producer writes the backlog (confluent-kafka, same messages)",
                 lambda r: f"{r['producer_msg_s']:,.0f} msg/s"),
             row("mirror: backlog copy, 10% → 90% on the target", lambda r: f"{r['copy_msg_s']:,.0f} msg/s"),
             row("**copy / produce**", lambda r: f"**{r['copy_msg_s'] / r['producer_msg_s']:.2f}x**"),
             row("mirror: whole backlog incl. process start, group join, last commit",
                 lambda r: f"{r['throughput_msg_s']:,.0f} msg/s ({r['seconds_incl_start']:.1f} s)"),
             row("lag phase: paced producer on live (half the copy rate)", lambda r: f"{r['lag_rate']:,} msg/s "
                 f"for {args.seconds} s"),
             row("lag live produce → readable on offline (read_committed), p50",
                 lambda r: f"{r['lag_p50_ms']:.1f} ms"),
             row("lag p99", lambda r: f"{r['lag_p99_ms']:.1f} ms"),
             row("lag max", lambda r: f"{r['lag_max_ms']:.1f} ms"), "",
             "Lag percentiles are over every message sent in the lag phase: a message not readable on the target "
             "within the deadline fails the run instead of being left out. The copy rate is read from the target's "
             "end offsets every 50 ms.", ""]
    path.write_text("\n".join(lines))


def plot(results: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    modes = list(results["modes"])
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 3.8))
    x = range(len(modes))
    left.bar([i - 0.2 for i in x], [results["modes"][m]["producer_msg_s"] for m in modes], 0.4,
             label="one producer (broker)")
    left.bar([i + 0.2 for i in x], [results["modes"][m]["copy_msg_s"] for m in modes], 0.4, label="mirror copy")
    left.set_xticks(list(x), modes)
    left.legend()
    left.set_ylabel("msg/s")
    left.set_title(f"backlog of {results['messages']:,} × {SIZE} B")
    x = range(len(modes))
    right.bar([i - 0.2 for i in x], [results["modes"][m]["lag_p50_ms"] for m in modes], 0.4, label="p50")
    right.bar([i + 0.2 for i in x], [results["modes"][m]["lag_p99_ms"] for m in modes], 0.4, label="p99")
    right.set_xticks(list(x), modes)
    right.set_ylabel("ms")
    right.set_title("lag at half the copy rate")
    right.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def scaling(args) -> int:
    results: dict = {"command": "python bench/mirror_benchmark.py " + " ".join(sys.argv[1:]),
                     "messages": args.messages, "runs": {}}
    for processes in (1, 2):
        results["runs"][processes] = run_mode(args, [], "at-least-once", processes)
        print(processes, results["runs"][processes], flush=True)
    one, two = results["runs"][1], results["runs"][2]
    results["ratio"] = two["copy_msg_s"] / one["copy_msg_s"]
    out = Path(args.out)
    (out / "mirror_scaling.json").write_text(json.dumps(results, indent=1) + "\n")
    lines = ["# Mirror: one process vs two in the same consumer group", "",
             f"Command: `{results['command']}` (both in one run, each on fresh clusters: one ZooKeeper, one live and "
             f"one offline broker, a topic of 3 partitions, {args.messages:,} x {SIZE} B written first; whole-batch "
             "at-least-once copy; 2 cores shared by the brokers, the mirrors and the benchmark).", "",
             "| mirror processes | backlog copy, steady (msg/s) | whole copy incl. start (msg/s) | "
             "lag p50 / p99 at half capacity (ms) |", "|---|---|---|---|"]
    for processes, r in results["runs"].items():
        lines.append(f"| {processes} | {r['copy_msg_s']:,.0f} | {r['throughput_msg_s']:,.0f} | "
                     f"{r['lag_p50_ms']:.1f} / {r['lag_p99_ms']:.1f} |")
    lines += ["", f"Two processes / one: **{results['ratio']:.2f}x**."]
    (out / "mirror_scaling.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


def run_mode(args, flags: list[str], mode: str, processes: int = 1) -> dict:
    exactly_once = mode.startswith("exactly-once")
    results: dict = {}
    txn = {"transaction_state_log_replication_factor": 1, "transaction_state_log_min_isr": 1,
           "transaction_state_log_num_partitions": 5}
    with tempfile.TemporaryDirectory(prefix="logbus-mirror-bench-") as work:
        work = Path(work)
        zk = ZooKeeperProcess(work / "zk").start()
        live = BrokerProcess(work / "live", 0, host="127.0.1.1", zookeeper_connect=zk.connect + "/live")
        offline = BrokerProcess(work / "offline", 0, host="127.0.2.1", zookeeper_connect=zk.connect + "/offline",
                                **txn)
        mirrors = []
        try:
            live.start()
            offline.start()
            admin = AdminClient({"bootstrap.servers": live.bootstrap})
            for topic in ("bulk", "paced"):
                admin.create_topics([NewTopic(topic, 3, 1)])[topic].result(30)
            producer = Producer({"bootstrap.servers": live.bootstrap, "linger.ms": 5,
                                 "queue.buffering.max.messages": 1_000_000})
            payload = os.urandom(SIZE)
            produce_start = time.perf_counter()
            for i in range(args.messages):
                while True:
                    try:
                        producer.produce("bulk", payload, str(i).encode())
                        break
                    except BufferError:
                        producer.poll(0.01)
            producer.flush(120)
            results["producer_msg_s"] = args.messages / (time.perf_counter() - produce_start)
            (work / "c.properties").write_text(f"bootstrap.servers={live.bootstrap}\ngroup.id={GROUP}\n" + "".join(
                f"{k}={v}\n" for k, v in MODE_CONSUMER.get(mode, {}).items()))
            (work / "p.properties").write_text(f"bootstrap.servers={offline.bootstrap}\n")
            start = time.perf_counter()
            mirrors = [subprocess.Popen([sys.executable, "-m", "logbus.cli", "--log-level", "WARNING", "mirror",
                                         "--consumer.config", str(work / "c.properties"), "--producer.config",
                                         str(work / "p.properties"), "--whitelist", "bulk|paced", "--source-name",
                                         "live", *flags], env=dict(os.environ, PYTHONPATH=str(REPO / "platform"),
                                                                   **MODE_ENV.get(mode, {})))
                       for _ in range(processes)]
            mirror = mirrors[0]
            spy = None
            if args.flamegraph:  # the backlog copy only: attached now, stopped (SIGINT: it writes the SVG) after
                spy = subprocess.Popen([str(Path(sys.executable).parent / "py-spy"), "record", "--rate", "250",
                                        "--pid", str(mirror.pid), "--threads", "--native", "-o",
                                        args.flamegraph.format(mode=mode)])
            offsets_at = offline.bootstrap if exactly_once else live.bootstrap
            samples: list[tuple[float, int]] = []
            sampling = threading.Event()
            sampler = threading.Thread(target=sample_target, args=(offline.bootstrap, samples, sampling, start))
            sampler.start()
            try:
                wait_until(lambda: committed(offsets_at, "bulk") >= args.messages, 600, interval=0.5,
                           what="bulk mirrored")
            finally:
                sampling.set()
                sampler.join()
            elapsed = time.perf_counter() - start
            results["copy_msg_s"], results["copy_window_s"] = steady_rate(samples, args.messages)
            if spy is not None:
                spy.send_signal(signal.SIGINT)
                spy.wait(60)
            results["throughput_msg_s"] = args.messages / elapsed
            results["throughput_MB_s"] = args.messages * SIZE / elapsed / 1e6
            results["seconds_incl_start"] = elapsed
            results["lag_rate"] = args.rate or int(results["copy_msg_s"] / 2)
            results.update(lag(live.bootstrap, offline.bootstrap, results["lag_rate"], args.seconds))
        finally:
            for proc in mirrors:
                terminate(proc, 30)
            live.stop()
            offline.stop()
            zk.stop()
    return results


def sample_target(bootstrap: str, samples: list, done: threading.Event, start: float) -> None:
    """(seconds since the mirror started, records in "bulk" on the target) every 50 ms."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-sampler"})
    try:
        while not done.is_set():
            try:
                total = sum(consumer.get_watermark_offsets(TopicPartition("bulk", p), timeout=5)[1] for p in range(3))
            except Exception:  # noqa: BLE001 - the topic does not exist yet: a new client (librdkafka would keep
                total = 0      # the unknown topic in its metadata cache for minutes)
                consumer.close()
                consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-sampler"})
            samples.append((time.perf_counter() - start, total))
            done.wait(0.05)
    finally:
        consumer.close()


def steady_rate(samples: list[tuple[float, int]], messages: int) -> tuple[float, float]:
    """The copy rate between 10% and 90% of the backlog on the target (start-up and the last commit left out)."""
    t10 = next(t for t, n in samples if n >= messages * 0.1)
    t90 = next((t for t, n in samples if n >= messages * 0.9), samples[-1][0])
    n10 = next(n for t, n in samples if t >= t10)
    n90 = next(n for t, n in samples if t >= t90)
    return (n90 - n10) / max(t90 - t10, 1e-9), t90 - t10


def tail(target: str, total: int, seconds: int, ready, conn) -> None:
    """In its own process (the paced producer must not share a GIL with it): the lag of every copy of "paced"."""
    consumer = Consumer({"bootstrap.servers": target, "group.id": "bench-lag", "enable.auto.commit": False,
                         "fetch.wait.max.ms": 100, "fetch.queue.backoff.ms": 0, "isolation.level": "read_committed"})
    # every copy of "paced" on the target is from this phase (the mirror creates the topic when a stream is
    # assigned the source topic): read from the beginning
    consumer.assign([TopicPartition("paced", p, OFFSET_BEGINNING) for p in range(3)])
    consumer.poll(1)
    ready.set()
    lags: list[float] = []
    deadline = time.monotonic() + seconds + 60
    while len(lags) < total and time.monotonic() < deadline:
        for msg in consumer.consume(10000, 0.2):
            if not msg.error():
                lags.append((time.time() - struct.unpack(">d", msg.value()[:8])[0]) * 1000)
    consumer.close()
    conn.send(lags)
    conn.close()


def lag(source: str, target: str, rate: int, seconds: int) -> dict:
    import multiprocessing

    total = rate * seconds
    ctx = multiprocessing.get_context("spawn")
    receiver, sender = ctx.Pipe(duplex=False)
    ready = ctx.Event()
    reader = ctx.Process(target=tail, args=(target, total, seconds, ready, sender))
    reader.start()
    sender.close()  # the reader's end only: its death ends recv() below with EOFError
    ready.wait(60)
    producer = Producer({"bootstrap.servers": source, "linger.ms": 1, "queue.buffering.max.messages": 1_000_000})
    start = time.perf_counter()
    for i in range(total):
        delay = start + i / rate - time.perf_counter()
        if delay > 0.001:
            time.sleep(delay)
        while True:
            try:
                producer.produce("paced", struct.pack(">d", time.time()) + b"\0" * (SIZE - 8), str(i).encode())
                break
            except BufferError:
                producer.poll(0.001)
        if i % 100 == 0:
            producer.poll(0)
    producer.flush(30)
    lags = receiver.recv()
    reader.join(30)
    if len(lags) < total:  # percentiles of the messages that happened to arrive would flatter the mirror
        raise RuntimeError(f"lag: {total - len(lags)} of {total} messages not readable on the target within "
                           f"{seconds + 60} s: no percentiles")
    lags.sort()
    return {"lag_samples": len(lags), "lag_p50_ms": lags[len(lags) // 2], "lag_p99_ms": lags[int(len(lags) * 0.99)],
            "lag_max_ms": lags[-1], "lag_sent_s": round(time.perf_counter() - start, 2)}


if __name__ == "__main__":
    sys.exit(main())
