"""The paper's §5 experiment against one logbus broker, with confluent-kafka (librdkafka).

Producer: one producer process, 200-byte messages, acks=1, measured until the broker's high watermark covers
every message: (a) unbatched (batch.num.messages=1, linger.ms=0: one message per batch, as the paper's batch
size 1), (b) batches of 50 (the paper's batched run), (c) librdkafka's default batching.
Consumer: one consumer over the batch-50 backlog with ~200 KB fetches (fetch.max.bytes = max.partition.fetch.bytes =
204800), as the paper's 1,000 messages / 200 KB per pull.
Reported: msg/s, MB/s, broker CPU seconds per GB (utime+stime of the broker process from /proc), bytes on disk
per message beyond the 200-byte payload, and the client process's own CPU, so a client bottleneck shows.

Usage: .venv/bin/python bench/paper_benchmark.py [--messages N] [--unbatched-messages N] [--out bench/results]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))
from support import BrokerProcess  # noqa: E402

PAYLOAD = 200
PAPER = {"unbatched": 50_000, "batch50": 400_000, "consumer": 22_000}
CLK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK


def self_cpu() -> float:
    t = os.times()
    return t.user + t.system


def high_watermark(bootstrap: str, topic: str) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench"})
    try:
        return consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[1]
    finally:
        consumer.close()


def produce(broker: BrokerProcess, topic: str, count: int, conf: dict) -> dict:
    producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": 1, "queue.buffering.max.messages": 1_000_000,
                         "queue.buffering.max.kbytes": 1_048_576, **conf})
    producer.produce(topic, b"warm-up")
    producer.flush(30)
    payloads = [os.urandom(PAYLOAD) for _ in range(1024)]
    broker_cpu0, client_cpu0 = cpu_seconds(broker.proc.pid), self_cpu()
    start = time.perf_counter()
    produce_fn, poll = producer.produce, producer.poll
    for i in range(count):
        while True:
            try:
                produce_fn(topic, payloads[i & 1023])
                break
            except BufferError:
                poll(0.001)
    producer.flush(600)
    elapsed = time.perf_counter() - start
    assert high_watermark(broker.bootstrap, topic) == count + 1, "not every message reached the broker"
    broker_cpu = cpu_seconds(broker.proc.pid) - broker_cpu0
    gb = count * PAYLOAD / 1e9
    return {"messages": count, "seconds": round(elapsed, 3), "msg_per_s": round(count / elapsed),
            "MB_per_s": round(count * PAYLOAD / elapsed / 1e6, 1), "broker_cpu_s_per_GB": round(broker_cpu / gb, 1),
            "client_cpu_s": round(self_cpu() - client_cpu0, 2), "broker_cpu_s": round(broker_cpu, 2)}


def consume(broker: BrokerProcess, topic: str, count: int) -> dict:
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "bench", "enable.auto.commit": False,
                         "fetch.max.bytes": 204800, "max.partition.fetch.bytes": 204800, "message.max.bytes": 204800,
                         "queued.max.messages.kbytes": 262144, "queued.min.messages": 1_000_000,
                         # librdkafka >= 2.x pauses fetching for fetch.queue.backoff.ms (1 s) whenever its
                         # local queue is over the thresholds: that measures the client's queue, not the broker.
                         "fetch.queue.backoff.ms": 0})
    consumer.assign([TopicPartition(topic, 0, 1)])  # skip the warm-up message
    broker_cpu0, client_cpu0 = cpu_seconds(broker.proc.pid), self_cpu()
    start = time.perf_counter()
    got = 0
    nbytes = 0
    while got < count:
        for msg in consumer.consume(10_000, timeout=5):
            if msg.error():
                raise RuntimeError(msg.error())
            got += 1
            nbytes += len(msg.value())
    elapsed = time.perf_counter() - start
    consumer.close()
    broker_cpu = cpu_seconds(broker.proc.pid) - broker_cpu0
    assert got == count and nbytes == count * PAYLOAD
    return {"messages": count, "seconds": round(elapsed, 3), "msg_per_s": round(count / elapsed),
            "MB_per_s": round(count * PAYLOAD / elapsed / 1e6, 1),
            "broker_cpu_s_per_GB": round(broker_cpu / (count * PAYLOAD / 1e9), 1),
            "client_cpu_s": round(self_cpu() - client_cpu0, 2), "broker_cpu_s": round(broker_cpu, 2)}


def consume_kcat(broker: BrokerProcess, topic: str, count: int) -> dict:
    """The same pull with kcat (C; Debian's build links an older librdkafka without fetch.queue.backoff.ms):
    no Python work per message on the client side."""
    cmd = ["kcat", "-b", broker.bootstrap, "-C", "-t", topic, "-p", "0", "-o", "1", "-c", str(count), "-q",
           "-f", "", "-X", "fetch.max.bytes=204800", "-X", "max.partition.fetch.bytes=204800",
           "-X", "message.max.bytes=204800",
           "-X", "queued.min.messages=1000000"]
    broker_cpu0 = cpu_seconds(broker.proc.pid)
    start = time.perf_counter()
    before = os.times()
    subprocess.run(cmd, check=True, timeout=600, stdout=subprocess.DEVNULL)
    elapsed = time.perf_counter() - start
    after = os.times()
    broker_cpu = cpu_seconds(broker.proc.pid) - broker_cpu0
    return {"messages": count, "seconds": round(elapsed, 3), "msg_per_s": round(count / elapsed),
            "MB_per_s": round(count * PAYLOAD / elapsed / 1e6, 1),
            "broker_cpu_s_per_GB": round(broker_cpu / (count * PAYLOAD / 1e9), 1),
            "client_cpu_s": round(after.children_user + after.children_system - before.children_user
                                  - before.children_system, 2), "broker_cpu_s": round(broker_cpu, 2)}


def disk_overhead(broker: BrokerProcess, topic: str, count: int) -> float:
    size = sum(p.stat().st_size for p in (broker.log_dir / f"{topic}-0").glob("*.log"))
    return round(size / (count + 1) - PAYLOAD, 2)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=2_000_000)
    parser.add_argument("--unbatched-messages", type=int, default=200_000)
    parser.add_argument("--out", default=str(REPO / "bench" / "results"))
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    runs = {
        "unbatched": (args.unbatched_messages, {"batch.num.messages": 1, "linger.ms": 0}),
        "batch50": (args.messages, {"batch.num.messages": 50, "linger.ms": 5}),
        "default": (args.messages, {}),
    }
    results = {}
    with tempfile.TemporaryDirectory(prefix="logbus-bench-") as work:
        broker = BrokerProcess(Path(work), num_partitions=1).start()
        try:
            for name, (count, conf) in runs.items():
                results[f"producer_{name}"] = produce(broker, f"bench-{name}", count, conf)
                results[f"producer_{name}"]["disk_overhead_bytes_per_msg"] = disk_overhead(broker, f"bench-{name}",
                                                                                            count)
                print(name, results[f"producer_{name}"], flush=True)
            results["consumer"] = consume(broker, "bench-batch50", args.messages)
            print("consumer", results["consumer"], flush=True)
            results["consumer_kcat"] = consume_kcat(broker, "bench-batch50", args.messages)
            print("consumer_kcat", results["consumer_kcat"], flush=True)
        finally:
            broker.stop()
    results["machine"] = {"cpus": os.cpu_count(), "python": platform.python_version(),
                          "kernel": platform.release(),
                          "librdkafka": __import__("confluent_kafka").libversion()[0]}
    results["command"] = "python bench/paper_benchmark.py " + " ".join(sys.argv[1:])
    (out / "paper_benchmark.json").write_text(json.dumps(results, indent=2) + "\n")
    write_table(results, out / "paper_benchmark.md")
    plot(results, out / "paper_benchmark.png")
    return 0


def write_table(results: dict, path: Path) -> None:
    rows = [
        ("Producer, unbatched (batch of 1)", results["producer_unbatched"], PAPER["unbatched"]),
        ("Producer, batches of 50", results["producer_batch50"], PAPER["batch50"]),
        ("Producer, librdkafka default batching", results["producer_default"], None),
        ("Consumer (confluent-kafka), ~200 KB fetches", results["consumer"], PAPER["consumer"]),
        ("Consumer (kcat), ~200 KB fetches", results["consumer_kcat"], PAPER["consumer"]),
    ]
    lines = [
        "# Paper §5 experiment: one logbus broker, confluent-kafka, 200-byte messages",
        "",
        f"Command: `{results['command']}` (machine: {results['machine']})",
        "",
        "| run | messages | msg/s | MB/s | paper msg/s | logbus / paper | broker CPU s/GB | client CPU s |"
        " broker CPU s | disk overhead B/msg |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for label, r, paper in rows:
        ratio = f"{r['msg_per_s'] / paper:.1f}x" if paper else "–"
        lines.append(f"| {label} | {r['messages']:,} | {r['msg_per_s']:,} | {r['MB_per_s']} | "
                     f"{paper and f'{paper:,}' or '–'} | {ratio} | {r['broker_cpu_s_per_GB']} | {r['client_cpu_s']} | "
                     f"{r['broker_cpu_s']} | {r.get('disk_overhead_bytes_per_msg', '–')} |")
    path.write_text("\n".join(lines) + "\n")


def plot(results: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = ["producer\nbatch 1", "producer\nbatch 50", "producer\ndefault", "consumer\n(Python)",
              "consumer\n(kcat)"]
    ours = [results[k]["msg_per_s"] for k in ("producer_unbatched", "producer_batch50", "producer_default",
                                               "consumer", "consumer_kcat")]
    paper = [PAPER["unbatched"], PAPER["batch50"], 0, PAPER["consumer"], PAPER["consumer"]]
    fig, ax = plt.subplots(figsize=(9, 4.5))
    x = range(len(labels))
    ax.bar([i - 0.2 for i in x], ours, width=0.4, label="logbus (this machine)")
    ax.bar([i + 0.2 for i in x], paper, width=0.4, label="Kafka, 2011 paper")
    ax.set_xticks(list(x), labels)
    ax.set_ylabel("messages / second (200-byte messages)")
    ax.set_title("Paper §5 experiment: logbus vs the paper's Kafka numbers")
    for i, v in enumerate(ours):
        ax.text(i - 0.2, v, f"{v:,}", ha="center", va="bottom", fontsize=8)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    sys.exit(main())
