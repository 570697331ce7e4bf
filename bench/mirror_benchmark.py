"""Mirror throughput and end-to-end lag between two local clusters (one ZooKeeper, chroots /live and /offline,
one broker each on 127.0.1.1 and 127.0.2.1, one ``logbus mirror`` process), at-least-once and ``--exactly-once``
measured in the same run, each on fresh clusters.

Throughput: --messages 200-byte messages (3 partitions) written to the live cluster first, then the time until
the mirror has copied them all — until its committed offsets (on the source at-least-once, on the target exactly
once) cover every message (msg/s, MB/s). Lag: a producer paced at --rate msg/s for --seconds on the live cluster,
a read_committed consumer tailing the offline copy; each payload carries its send time, so the lag is from
produce on live to readable on offline (p50/p99).

Usage: .venv/bin/python bench/mirror_benchmark.py [--messages 500000] [--rate 2000] [--seconds 10]
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
sys.path[:0] = [str(REPO / "tests")]

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402
from support import BrokerProcess, ZooKeeperProcess, terminate, wait_until  # noqa: E402

SIZE = 200


MODES = {"at-least-once": [], "exactly-once": ["--exactly-once"]}
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
    parser.add_argument("--messages", type=int, default=500_000)
    parser.add_argument("--rate", type=int, default=2000)
    parser.add_argument("--seconds", type=int, default=10)
    parser.add_argument("--out", default=str(REPO / "bench" / "results"))
    parser.add_argument("--modes", default=",".join(MODES), help="comma-separated: at-least-once,exactly-once")
    parser.add_argument("--flamegraph", default="", help="py-spy flamegraph of the mirror process during the "
                        "backlog copy: SVG path with {mode} in it (e.g. bench/results/flamegraph_mirror_{mode}.svg)")
    args = parser.parse_args()
    results: dict = {"command": "python bench/mirror_benchmark.py " + " ".join(sys.argv[1:]),
                     "messages": args.messages, "rate": args.rate, "seconds": args.seconds, "modes": {}}
    for mode, flags in MODES.items():
        if mode not in args.modes.split(","):
            continue
        results["modes"][mode] = run_mode(args, flags, mode == "exactly-once")
        print(mode, results["modes"][mode], flush=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if len(results["modes"]) < len(MODES):
        print(json.dumps(results, indent=1))  # a partial run is printed, not saved as the committed result
        return 0
    (out / "mirror_benchmark.json").write_text(json.dumps(results, indent=1) + "\n")
    alo, eos = results["modes"]["at-least-once"], results["modes"]["exactly-once"]
    lines = ["# Mirror: throughput and end-to-end lag (two local clusters, one mirror process, 2 cores)", "",
             f"Command: `{results['command']}` (both modes in one run, each on fresh clusters)", "",
             "| measure | at-least-once | --exactly-once | ratio |", "|---|---|---|---|",
             f"| throughput, {args.messages:,} × {SIZE} B backlog (incl. mirror start-up) | "
             f"{alo['throughput_msg_s']:,.0f} msg/s, {alo['throughput_MB_s']:.1f} MB/s | "
             f"{eos['throughput_msg_s']:,.0f} msg/s, {eos['throughput_MB_s']:.1f} MB/s | "
             f"{eos['throughput_msg_s'] / alo['throughput_msg_s']:.2f}x |",
             f"| lag live produce → readable on offline (read_committed), p50 ({args.rate} msg/s for "
             f"{args.seconds} s) | {alo['lag_p50_ms']:.1f} ms | {eos['lag_p50_ms']:.1f} ms | "
             f"{eos['lag_p50_ms'] / alo['lag_p50_ms']:.2f}x |",
             f"| lag p99 | {alo['lag_p99_ms']:.1f} ms | {eos['lag_p99_ms']:.1f} ms | "
             f"{eos['lag_p99_ms'] / alo['lag_p99_ms']:.2f}x |",
             f"| lag max | {alo['lag_max_ms']:.1f} ms | {eos['lag_max_ms']:.1f} ms | "
             f"{eos['lag_max_ms'] / alo['lag_max_ms']:.2f}x |", "",
             f"Lag percentiles are over every message sent ({alo['lag_samples']:,} and {eos['lag_samples']:,}): a "
             "message not readable on the target within the deadline fails the run instead of being left out.", ""]
    (out / "mirror_benchmark.md").write_text("\n".join(lines))
    plot(results, out / "mirror_benchmark.png")
    print("\n".join(lines))
    return 0


def plot(results: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    modes = list(results["modes"])
    fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3.5))
    left.bar(modes, [results["modes"][m]["throughput_msg_s"] for m in modes], color=["#4c72b0", "#dd8452"])
    left.set_ylabel("msg/s")
    left.set_title(f"backlog of {results['messages']:,} × {SIZE} B")
    x = range(len(modes))
    right.bar([i - 0.2 for i in x], [results["modes"][m]["lag_p50_ms"] for m in modes], 0.4, label="p50")
    right.bar([i + 0.2 for i in x], [results["modes"][m]["lag_p99_ms"] for m in modes], 0.4, label="p99")
    right.set_xticks(list(x), modes)
    right.set_ylabel("ms")
    right.set_title(f"lag at {results['rate']} msg/s")
    right.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def run_mode(args, flags: list[str], exactly_once: bool) -> dict:
    results: dict = {}
    txn = {"transaction_state_log_replication_factor": 1, "transaction_state_log_min_isr": 1,
           "transaction_state_log_num_partitions": 5}
    with tempfile.TemporaryDirectory(prefix="logbus-mirror-bench-") as work:
        work = Path(work)
        zk = ZooKeeperProcess(work / "zk").start()
        live = BrokerProcess(work / "live", 0, host="127.0.1.1", zookeeper_connect=zk.connect + "/live")
        offline = BrokerProcess(work / "offline", 0, host="127.0.2.1", zookeeper_connect=zk.connect + "/offline",
                                **txn)
        mirror = None
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
            (work / "c.properties").write_text(f"bootstrap.servers={live.bootstrap}\ngroup.id={GROUP}\n")
            (work / "p.properties").write_text(f"bootstrap.servers={offline.bootstrap}\n")
            start = time.perf_counter()
            mirror = subprocess.Popen([sys.executable, "-m", "logbus.cli", "--log-level", "WARNING", "mirror",
                                       "--consumer.config", str(work / "c.properties"), "--producer.config",
                                       str(work / "p.properties"), "--whitelist", "bulk|paced", "--source-name",
                                       "live", *flags], env=dict(os.environ, PYTHONPATH=str(REPO / "platform")))
            spy = None
            if args.flamegraph:  # the backlog copy only: attached now, stopped (SIGINT: it writes the SVG) after
                spy = subprocess.Popen([str(Path(sys.executable).parent / "py-spy"), "record", "--rate", "250",
                                        "--pid", str(mirror.pid), "--threads", "--native", "-o",
                                        args.flamegraph.format(mode="exactly-once" if exactly_once else
                                                               "at-least-once")])
            offsets_at = offline.bootstrap if exactly_once else live.bootstrap
            wait_until(lambda: committed(offsets_at, "bulk") >= args.messages, 600, interval=0.5,
                       what="bulk mirrored")
            elapsed = time.perf_counter() - start
            if spy is not None:
                spy.send_signal(signal.SIGINT)
                spy.wait(60)
            results["throughput_msg_s"] = args.messages / elapsed
            results["throughput_MB_s"] = args.messages * SIZE / elapsed / 1e6
            results["seconds_incl_start"] = elapsed
            results.update(lag(live.bootstrap, offline.bootstrap, args.rate, args.seconds))
        finally:
            terminate(mirror, 30)
            live.stop()
            offline.stop()
            zk.stop()
    return results


def lag(source: str, target: str, rate: int, seconds: int) -> dict:
    total = rate * seconds
    consumer = Consumer({"bootstrap.servers": target, "group.id": "bench-lag", "enable.auto.commit": False,
                         "fetch.wait.max.ms": 100, "fetch.queue.backoff.ms": 0, "isolation.level": "read_committed"})
    # every copy of "paced" on the target is from this phase (the mirror creates the topic with its first record):
    # read from the beginning. OFFSET_END resolved once the topic appeared, after the first copies: those were
    # missed, and the percentiles came from the ~90% that were seen.
    consumer.assign([TopicPartition("paced", p, OFFSET_BEGINNING) for p in range(3)])
    consumer.poll(1)
    lags: list[float] = []

    def tail() -> None:
        deadline = time.monotonic() + seconds + 60
        while len(lags) < total and time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is not None and not msg.error():
                lags.append((time.time() - struct.unpack(">d", msg.value()[:8])[0]) * 1000)

    thread = threading.Thread(target=tail)
    thread.start()
    producer = Producer({"bootstrap.servers": source, "linger.ms": 0})
    start = time.perf_counter()
    for i in range(total):
        delay = start + i / rate - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        producer.produce("paced", struct.pack(">d", time.time()) + b"\0" * (SIZE - 8), str(i).encode())
        producer.poll(0)
    producer.flush(30)
    thread.join()
    consumer.close()
    if len(lags) < total:  # percentiles of the messages that happened to arrive would flatter the mirror
        raise RuntimeError(f"lag: {total - len(lags)} of {total} messages not readable on the target within "
                           f"{seconds + 60} s: no percentiles")
    lags.sort()
    return {"lag_samples": len(lags), "lag_p50_ms": lags[len(lags) // 2], "lag_p99_ms": lags[int(len(lags) * 0.99)],
            "lag_max_ms": lags[-1]}


if __name__ == "__main__":
    sys.exit(main())
