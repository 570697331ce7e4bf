"""The paper's claim that performance does not degrade with data size: one partition's log grows from empty to
--gigabytes (default 20, capped at half the free disk) while one producer (librdkafka default batching) writes
and one consumer (its own process) reads from offset 0. Every --interval seconds the high watermark and the
consumer's position are sampled; the plot shows both throughputs against the log's size. Flat is the goal.

Usage: .venv/bin/python bench/data_size.py [--gigabytes 20] [--out bench/results]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import shutil
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO / "bench"), str(REPO / "tests")]

from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: E402
from support import BrokerProcess  # noqa: E402

SIZE = 200
TOPIC = "grow"


def consumer_main(bootstrap: str, position: "mp.sharedctypes.Synchronized", stop: "mp.synchronize.Event") -> None:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "grow", "enable.auto.commit": False,
                         "fetch.queue.backoff.ms": 0, "queued.max.messages.kbytes": 262144})
    consumer.assign([TopicPartition(TOPIC, 0, 0)])
    got = 0
    while not stop.is_set():
        for msg in consumer.consume(10_000, timeout=0.5):
            if msg.error():
                raise RuntimeError(msg.error())
            got += 1
        position.value = got
    consumer.close()


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--gigabytes", type=float, default=20.0)
    parser.add_argument("--interval", type=float, default=2.0)
    parser.add_argument("--work", default=str(REPO / "bench" / "work" / "data-size"))
    parser.add_argument("--out", default=str(REPO / "bench" / "results"))
    args = parser.parse_args()
    work = Path(args.work)
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    free_gb = shutil.disk_usage(work).free / 1e9
    gigabytes = min(args.gigabytes, free_gb / 2)
    count = int(gigabytes * 1e9 / SIZE)
    broker = BrokerProcess(work, num_partitions=1, log_retention_ms=-1, log_retention_bytes=-1).start()
    samples = []
    try:
        producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": 1,
                             "queue.buffering.max.messages": 1_000_000})
        producer.produce(TOPIC, b"x" * SIZE)
        producer.flush(30)
        watermarks = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "grow-sampler"})
        tp = TopicPartition(TOPIC, 0)
        ctx = mp.get_context("spawn")  # librdkafka's threads do not survive fork
        position, stop = ctx.Value("q", 0, lock=False), ctx.Event()
        reader = ctx.Process(target=consumer_main, args=(broker.bootstrap, position, stop))
        reader.start()
        payloads = [os.urandom(SIZE) for _ in range(1024)]
        last_t, last_hw, last_pos = time.perf_counter(), 1, 0
        start = last_t
        for i in range(count):
            while True:
                try:
                    producer.produce(TOPIC, payloads[i & 1023])
                    break
                except BufferError:
                    producer.poll(0.001)
            if i & 0xFFFF == 0 and time.perf_counter() - last_t >= args.interval:
                now = time.perf_counter()
                hw = watermarks.get_watermark_offsets(tp, timeout=10)[1]
                pos = position.value
                log_bytes = sum(p.stat().st_size for p in (broker.log_dir / f"{TOPIC}-0").glob("*.log"))
                samples.append({"t": round(now - start, 1), "log_GB": round(log_bytes / 1e9, 3),
                                "producer_msg_s": round((hw - last_hw) / (now - last_t)),
                                "consumer_msg_s": round((pos - last_pos) / (now - last_t)),
                                "consumer_lag": hw - 1 - pos})
                print(samples[-1], flush=True)
                last_t, last_hw, last_pos = now, hw, pos
        producer.flush(600)
        stop.set()
        reader.join(60)
        watermarks.close()
        del producer  # librdkafka's client closes before the broker stops
    finally:
        broker.stop()
        shutil.rmtree(work, ignore_errors=True)
    write(samples, gigabytes, count, Path(args.out), " ".join(sys.argv[1:]))
    return 0


def write(samples: list[dict], gigabytes: float, count: int, out: Path, argv: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out.mkdir(parents=True, exist_ok=True)
    result = {"command": f"python bench/data_size.py {argv}".strip(), "gigabytes": round(gigabytes, 1),
              "messages": count, "samples": samples}
    (out / "data_size.json").write_text(json.dumps(result, indent=1) + "\n")
    deciles = [samples[len(samples) * k // 10: len(samples) * (k + 1) // 10] for k in range(10)]
    lines = [f"# Throughput as one partition's log grows to {gigabytes:.1f} GB", "",
             f"Command: `{result['command']}`; {count:,} messages of {SIZE} bytes, one producer (librdkafka "
             "default batching) and one consumer from offset 0 at the same time, one broker on this 2-core machine.",
             "", "| log size (GB) | producer msg/s (median) | consumer msg/s (median) |", "|---|---|---|"]
    for part in deciles:
        if part:
            lines.append(f"| {part[0]['log_GB']:.1f}–{part[-1]['log_GB']:.1f} | "
                         f"{statistics.median(s['producer_msg_s'] for s in part):,.0f} | "
                         f"{statistics.median(s['consumer_msg_s'] for s in part):,.0f} |")
    (out / "data_size.md").write_text("\n".join(lines) + "\n")
    fig, ax = plt.subplots(figsize=(8, 4.5))
    xs = [s["log_GB"] for s in samples]
    ax.plot(xs, [s["producer_msg_s"] for s in samples], label="producer (received by the broker)")
    ax.plot(xs, [s["consumer_msg_s"] for s in samples], label="consumer (from offset 0)")
    ax.set_xlabel("log size of the partition (GB)")
    ax.set_ylabel("messages / second")
    ax.set_ylim(bottom=0)
    ax.set_title("Throughput does not depend on the amount of data kept (paper §3.1)")
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / "data_size.png", dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    sys.exit(main())
