"""Replication's price and failover time on a local 3-broker cluster (real ZooKeeper, broker processes).

Throughput: one producer (confluent-kafka, librdkafka default batching), --messages 200-byte messages, to a
1-partition topic with replication factor 1 and acks=1, then to one with replication factor 3,
min.insync.replicas=2 and acks=all (idempotent); --runs runs each, median and spread.
Failover: --rounds rounds of: kill -9 the partition leader of the RF-3 topic, then send one acks=all message
after another (each waits for its delivery report) until one succeeds; the time from the kill to that success
is the failover time. It is dominated by zookeeper.session.timeout.ms (how long ZooKeeper takes to declare
the dead broker gone), given with --session-timeout-ms. The killed broker is restarted and rejoins the ISR
between rounds.

Usage: .venv/bin/python bench/cluster_benchmark.py [--messages 1000000] [--runs 3] [--rounds 5]
       [--session-timeout-ms 6000] [--out bench/results]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO / "tests")]

from confluent_kafka import Producer  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402
from support import Cluster, wait_until  # noqa: E402

SIZE = 200


def produce(bootstrap: str, topic: str, count: int, conf: dict) -> float:
    producer = Producer({"bootstrap.servers": bootstrap, "queue.buffering.max.messages": 1_000_000, **conf})
    producer.produce(topic, b"warm-up")
    producer.flush(30)
    payload = os.urandom(SIZE)
    start = time.perf_counter()
    for _ in range(count):
        while True:
            try:
                producer.produce(topic, payload)
                break
            except BufferError:
                producer.poll(0.001)
    if producer.flush(300) != 0:
        raise RuntimeError("messages left undelivered")
    return count / (time.perf_counter() - start)


def failover_once(c: Cluster, topic: str) -> float:
    leader = c.state(topic, 0)["leader"]
    producer = Producer({"bootstrap.servers": c.bootstrap, "acks": "all", "enable.idempotence": True,
                         "message.timeout.ms": 2000, "retry.backoff.ms": 50, "topic.metadata.refresh.interval.ms":
                         1000})
    producer.produce(topic, b"before")
    producer.flush(10)
    c.brokers[leader].kill9()
    killed = time.perf_counter()
    while True:
        outcome = []
        producer.produce(topic, b"probe", on_delivery=lambda err, msg: outcome.append(err))
        producer.flush(5)
        if outcome and outcome[0] is None:
            elapsed = time.perf_counter() - killed
            break
        if time.perf_counter() - killed > 120:
            raise RuntimeError("no successful produce within 120 s of the kill")
    del producer
    c.brokers[leader].start()
    c.wait_registered({0, 1, 2})
    wait_until(lambda: len(c.state(topic, 0)["isr"]) == 3, 60, what="full ISR")
    return elapsed


def spread(values: list[float]) -> dict:
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "runs": values}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--session-timeout-ms", type=int, default=6000)
    parser.add_argument("--out", default=str(REPO / "bench" / "results"))
    args = parser.parse_args()
    results: dict = {"command": "python bench/cluster_benchmark.py " + " ".join(sys.argv[1:]),
                     "messages": args.messages, "session_timeout_ms": args.session_timeout_ms}
    with tempfile.TemporaryDirectory(prefix="logbus-cluster-bench-") as work:
        c = Cluster(Path(work), 3, zookeeper_session_timeout_ms=args.session_timeout_ms,
                    auto_leader_rebalance_enable="false")
        try:
            c.start()
            admin = AdminClient({"bootstrap.servers": c.bootstrap})
            for name, rf, conf in (("rf1", 1, {}), ("rf3", 3, {"min.insync.replicas": "2"})):
                admin.create_topics([NewTopic(name, 1, rf, config=conf)])[name].result(30)
            rf1 = [produce(c.bootstrap, "rf1", args.messages, {"acks": 1}) for _ in range(args.runs)]
            rf3 = [produce(c.bootstrap, "rf3", args.messages, {"acks": "all", "enable.idempotence": True})
                   for _ in range(args.runs)]
            results["acks1_rf1_msg_s"] = spread(rf1)
            results["acksall_rf3_msg_s"] = spread(rf3)
            print("throughput", results["acks1_rf1_msg_s"], results["acksall_rf3_msg_s"], flush=True)
            results["failover_s"] = spread([failover_once(c, "rf3") for _ in range(args.rounds)])
            print("failover", results["failover_s"], flush=True)
        finally:
            c.stop()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "cluster_benchmark.json").write_text(json.dumps(results, indent=1) + "\n")
    write(results, out)
    print((out / "cluster_benchmark.md").read_text())
    return 0


def write(r: dict, out: Path) -> None:
    a, b, f = r["acks1_rf1_msg_s"], r["acksall_rf3_msg_s"], r["failover_s"]
    lines = [
        "# Replication on a local 3-broker cluster (real ZooKeeper, 3 broker processes, one 2-core machine)", "",
        f"Command: `{r['command']}`; {r['messages']:,} messages of {SIZE} bytes per run, one confluent-kafka "
        "producer with librdkafka's default batching; median [min–max].", "",
        "| setting | msg/s | MB/s |", "|---|---|---|",
        f"| acks=1, replication factor 1 | {a['median']:,.0f} [{a['min']:,.0f}–{a['max']:,.0f}] | "
        f"{a['median'] * SIZE / 1e6:.1f} |",
        f"| acks=all, replication factor 3, min.insync.replicas=2, idempotent | {b['median']:,.0f} "
        f"[{b['min']:,.0f}–{b['max']:,.0f}] | {b['median'] * SIZE / 1e6:.1f} |",
        f"| ratio acks=all RF 3 / acks=1 RF 1 | {b['median'] / a['median']:.2f}x | |", "",
        f"Failover (kill -9 of the leader → first successful acks=all produce), {len(f['runs'])} rounds, "
        f"zookeeper.session.timeout.ms={r['session_timeout_ms']}: median {f['median']:.2f} s "
        f"[{f['min']:.2f}–{f['max']:.2f}]; rounds: {', '.join(f'{x:.2f}' for x in f['runs'])} s.", "",
        "All four processes (ZooKeeper, three brokers) and the client share the machine's 2 cores: with RF 3 every "
        "message is written three times and fetched twice on the same CPUs.", "",
    ]
    (out / "cluster_benchmark.md").write_text("\n".join(lines))
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(9, 4))
    ax1.bar(["acks=1\nRF 1", "acks=all\nRF 3"], [a["median"], b["median"]],
            yerr=[[a["median"] - a["min"], b["median"] - b["min"]], [a["max"] - a["median"], b["max"] - b["median"]]])
    ax1.set_ylabel("messages / second (200 B)")
    ax1.set_title("Producer throughput, 3 local brokers")
    ax2.plot(range(1, len(f["runs"]) + 1), f["runs"], "o-")
    ax2.axhline(r["session_timeout_ms"] / 1000, color="grey", linestyle="--", label="ZooKeeper session timeout")
    ax2.set_xlabel("round")
    ax2.set_ylabel("seconds")
    ax2.set_ylim(bottom=0)
    ax2.set_title("Failover: leader kill → first acks=all success")
    ax2.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "cluster_benchmark.png", dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    sys.exit(main())
