"""Mirror throughput and end-to-end lag between two local clusters (one ZooKeeper, chroots /live and /offline,
one broker each on 127.0.1.1 and 127.0.2.1, one ``logbus mirror`` process).

Throughput: --messages 200-byte messages (3 partitions) written to the live cluster first, then the time until
the mirror has copied them all (msg/s, MB/s). Lag: a producer paced at --rate msg/s for --seconds on the live
cluster, a consumer tailing the offline copy; each payload carries its send time, so the lag is from produce on
live to readable on offline (p50/p99).

Usage: .venv/bin/python bench/mirror_benchmark.py [--messages 500000] [--rate 2000] [--seconds 10]
"""

from __future__ import annotations

import argparse
import json
import os
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO / "tests")]

from confluent_kafka import OFFSET_END, Consumer, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402
from support import BrokerProcess, ZooKeeperProcess, terminate, wait_until  # noqa: E402

SIZE = 200


def count(bootstrap: str, topic: str) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-count"})
    try:
        md = consumer.list_topics(timeout=10).topics.get(topic)
        if md is None:
            return 0
        return sum(consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in md.partitions)
    finally:
        consumer.close()


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=500_000)
    parser.add_argument("--rate", type=int, default=2000)
    parser.add_argument("--seconds", type=int, default=10)
    parser.add_argument("--out", default=str(REPO / "bench" / "results"))
    args = parser.parse_args()
    results: dict = {"command": "python bench/mirror_benchmark.py " + " ".join(sys.argv[1:]),
                     "messages": args.messages, "rate": args.rate, "seconds": args.seconds}
    with tempfile.TemporaryDirectory(prefix="logbus-mirror-bench-") as work:
        work = Path(work)
        zk = ZooKeeperProcess(work / "zk").start()
        live = BrokerProcess(work / "live", 0, host="127.0.1.1", zookeeper_connect=zk.connect + "/live")
        offline = BrokerProcess(work / "offline", 0, host="127.0.2.1", zookeeper_connect=zk.connect + "/offline")
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
            for i in range(args.messages):
                while True:
                    try:
                        producer.produce("bulk", payload, str(i).encode())
                        break
                    except BufferError:
                        producer.poll(0.01)
            producer.flush(120)
            (work / "c.properties").write_text(f"bootstrap.servers={live.bootstrap}\n")
            (work / "p.properties").write_text(f"bootstrap.servers={offline.bootstrap}\n")
            start = time.perf_counter()
            mirror = subprocess.Popen([sys.executable, "-m", "logbus.cli", "--log-level", "WARNING", "mirror",
                                       "--consumer.config", str(work / "c.properties"), "--producer.config",
                                       str(work / "p.properties"), "--whitelist", "bulk|paced", "--source-name",
                                       "live"], env=dict(os.environ, PYTHONPATH=str(REPO / "platform")))
            wait_until(lambda: count(offline.bootstrap, "bulk") >= args.messages, 600, interval=0.5,
                       what="bulk mirrored")
            elapsed = time.perf_counter() - start
            results["throughput_msg_s"] = args.messages / elapsed
            results["throughput_MB_s"] = args.messages * SIZE / elapsed / 1e6
            results["seconds_incl_start"] = elapsed
            print("throughput", results, flush=True)
            results.update(lag(live.bootstrap, offline.bootstrap, args.rate, args.seconds))
        finally:
            terminate(mirror, 30)
            live.stop()
            offline.stop()
            zk.stop()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "mirror_benchmark.json").write_text(json.dumps(results, indent=1) + "\n")
    lines = ["# Mirror: throughput and end-to-end lag (two local clusters, one mirror process, 2 cores)", "",
             f"Command: `{results['command']}`", "",
             "| measure | value |", "|---|---|",
             f"| throughput, {args.messages:,} × {SIZE} B backlog (incl. mirror start-up) | "
             f"{results['throughput_msg_s']:,.0f} msg/s, {results['throughput_MB_s']:.1f} MB/s |",
             f"| lag live produce → readable on offline, p50 ({args.rate} msg/s for {args.seconds} s) | "
             f"{results['lag_p50_ms']:.1f} ms |",
             f"| lag p99 | {results['lag_p99_ms']:.1f} ms |", ""]
    (out / "mirror_benchmark.md").write_text("\n".join(lines))
    print("\n".join(lines))
    return 0


def lag(source: str, target: str, rate: int, seconds: int) -> dict:
    total = rate * seconds
    consumer = Consumer({"bootstrap.servers": target, "group.id": "bench-lag", "enable.auto.commit": False,
                         "fetch.wait.max.ms": 100, "fetch.queue.backoff.ms": 0})
    consumer.assign([TopicPartition("paced", p, OFFSET_END) for p in range(3)])
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
    lags.sort()
    return {"lag_samples": len(lags), "lag_p50_ms": lags[len(lags) // 2], "lag_p99_ms": lags[int(len(lags) * 0.99)]}


if __name__ == "__main__":
    sys.exit(main())
