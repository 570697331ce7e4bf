"""Replication's price and failover time on a local 3-broker cluster (real ZooKeeper, broker processes).

Throughput: one producer (confluent-kafka, librdkafka's defaults but for acks), --messages 200-byte messages
per run, to a 1-partition topic. The goal's two settings differ in acks and replication factor only:
  - acks=1, replication factor 1;
  - acks=all (librdkafka's default acks; its producer is not idempotent by default), replication factor 3,
    min.insync.replicas=2.
--runs runs each, median and spread. The runs of the settings alternate (rf1, rf3, ...), so a change in the
machine's load hits every setting alike.

Every run writes to a topic of its own, created for it and deleted after it (file.delete.delay.ms=0), so every run
starts with an empty log and the logs' page cache does not pile up across runs. On this machine (a VM) it
matters: once the runs' logs held about 4 GB of page cache, copying into new page-cache pages
(``copy_folio_from_iter_atomic``) took 59% of a follower's CPU instead of 4%, its CPU per message rose 0.21 →
0.6 CPU-s per million, and replication factor 3 writes three times the bytes of factor 1, so the later runs
measured the machine's memory rather than the brokers. ``--keep-topics`` runs every setting on one topic per
replication factor for the whole benchmark, as this benchmark did before, to show that effect.

Two more settings, measured in the same runs, show what librdkafka's idempotent producer costs (they do not
change the ratio):
  - acks=all, idempotent, replication factor 3;
  - acks=all, idempotent, replication factor 1: the same client behaviour with nothing to replicate.
    librdkafka's idempotent producer keeps at most 5 *messages* in flight per partition (``rktp_msgs_inflight``
    against ``RD_KAFKA_IDEMP_MAX_INFLIGHT``), so with batches of thousands of messages it sends one
    ProduceRequest per partition and waits for its answer (and its broker thread spins meanwhile): throughput is
    one batch per round trip, whatever the brokers do.
For every setting the result records the most ProduceRequests librdkafka had in flight (its statistics,
``waitresp_cnt``) and the CPU seconds each process used (/proc), per million messages.

Failover: --rounds rounds of: kill -9 the partition leader of the RF-3 topic, then send one acks=all message
after another (each waits for its delivery report) until one succeeds; the time from the kill to that success
is the failover time. It is dominated by zookeeper.session.timeout.ms (how long ZooKeeper takes to declare
the dead broker gone), given with --session-timeout-ms. The killed broker is restarted and rejoins the ISR
between rounds.

Usage: .venv/bin/python bench/cluster_benchmark.py [--messages 1000000] [--runs 5] [--rounds 5]
       [--session-timeout-ms 6000] [--keep-topics] [--out bench/results]
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

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402
from support import Cluster, wait_until  # noqa: E402

SIZE = 200
# key: (replication factor, producer config); every other producer setting is librdkafka's default
SETTINGS = {
    "acks1_rf1": (1, {"acks": 1}),
    "acksall_rf3": (3, {"acks": "all"}),
    "acksall_rf3_idempotent": (3, {"acks": "all", "enable.idempotence": True}),
    "acksall_rf1_idempotent": (1, {"acks": "all", "enable.idempotence": True}),
}
LABELS = {"acks1_rf1": "acks=1, replication factor 1",
          "acksall_rf3": "acks=all (not idempotent: librdkafka's default), replication factor 3, "
                         "min.insync.replicas=2",
          "acksall_rf3_idempotent": "*idempotent:* acks=all, idempotent, replication factor 3, "
                                    "min.insync.replicas=2",
          "acksall_rf1_idempotent": "*idempotent, diagnostic:* acks=all, idempotent, replication factor 1 "
                                    "(nothing to replicate)"}


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def produce(bootstrap: str, topic: str, count: int, conf: dict, pids: dict | None = None,
            partition: int = -1) -> dict:
    """One run: {"msg_s", "max_in_flight" (ProduceRequests awaiting an answer, from librdkafka's statistics),
    "cpu_s" (CPU seconds of each process in ``pids`` during the run)}. ``partition``: -1 = the partitioner's."""
    in_flight = [0]
    last: dict = {}  # the last statistics of the run: round trips and batch sizes (librdkafka's windows)

    def stats(text: str) -> None:
        s = json.loads(text)
        for b in s["brokers"].values():
            in_flight[0] = max(in_flight[0], b["waitresp_cnt"])
        leader = max(s["brokers"].values(), key=lambda b: b["tx"])  # the broker the batches went to
        batches = s["topics"].get(topic, {}).get("batchcnt", {})
        if leader["rtt"]["cnt"] and batches.get("cnt"):
            last.update(rtt_ms_p50=leader["rtt"]["p50"] / 1000, rtt_ms_p99=leader["rtt"]["p99"] / 1000,
                        batch_messages=batches["avg"])

    producer = Producer({"bootstrap.servers": bootstrap, "queue.buffering.max.messages": 1_000_000,
                         "statistics.interval.ms": 200, "stats_cb": stats, **conf})
    producer.produce(topic, b"warm-up", partition=partition)
    producer.flush(30)
    stored = stored_messages(bootstrap, topic)
    in_flight[0] = 0
    payload = os.urandom(SIZE)
    pids = pids or {}
    before = {name: cpu_seconds(pid) for name, pid in pids.items()}
    start = time.perf_counter()
    for _ in range(count):
        while True:
            try:
                producer.produce(topic, payload, partition=partition)
                break
            except BufferError:
                producer.poll(0.001)
    if producer.flush(300) != 0:
        raise RuntimeError("messages left undelivered")
    rate = count / (time.perf_counter() - start)
    # a delivery report may carry an error (the run has no per-message callback, which would cost the client CPU):
    # the partitions' high watermarks say how many messages the brokers took
    took = stored_messages(bootstrap, topic) - stored
    if took != count:
        raise RuntimeError(f"{topic}: the brokers took {took} of {count} messages (delivery errors?)")
    return {"msg_s": rate, "max_in_flight": in_flight[0], **last,
            "cpu_s": {name: cpu_seconds(pid) - before[name] for name, pid in pids.items()}}


def new_topic(c: Cluster, admin: AdminClient, name: str, rf: int) -> str:
    """A 1-partition topic for one run, its ISR full; its files go as soon as it is deleted."""
    conf = {"file.delete.delay.ms": "0", **({"min.insync.replicas": "2"} if rf == 3 else {})}
    admin.create_topics([NewTopic(name, 1, rf, config=conf)])[name].result(30)
    wait_until(lambda: len(c.state(name, 0)["isr"]) == rf, 60, what=f"full ISR of {name}")

    def known() -> bool:  # every broker's metadata has the partition (a watermark query may go to any of them)
        try:
            stored_messages(c.bootstrap, name)
            return True
        except KafkaException:
            return False

    wait_until(known, 30, what=f"{name}'s partition in the brokers' metadata")
    return name


def delete_topic(c: Cluster, admin: AdminClient, name: str) -> None:
    """Delete ``name`` and wait until no broker holds its partition's directory (its page cache freed)."""
    admin.delete_topics([name])[name].result(30)
    wait_until(lambda: not any(any(b.log_dir.glob(f"{name}-*")) for b in c.brokers.values()), 60,
               what=f"{name}'s files deleted")


def stored_messages(bootstrap: str, topic: str) -> int:
    """The sum of the topic's partitions' high watermarks."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-watermarks"})
    try:
        partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        return sum(consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in partitions)
    finally:
        consumer.close()


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


def roles(c: Cluster, topic: str) -> dict[str, int]:
    """Process ids by role for ``topic``: its leader, its followers, the other brokers, ZooKeeper, this client."""
    state = c.state(topic, 0)
    replicas = set(state["isr"])
    pids = {"client": os.getpid(), "zookeeper": c.zookeeper.proc.pid}
    for i, b in c.brokers.items():
        role = "leader" if i == state["leader"] else "follower" if i in replicas else "idle broker"
        pids[f"{role} {i}"] = b.proc.pid
    return pids


def spread(values: list[float]) -> dict:
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "runs": values}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--session-timeout-ms", type=int, default=6000)
    parser.add_argument("--keep-topics", action="store_true",
                        help="one topic per replication factor for all runs (the logs' page cache piles up)")
    parser.add_argument("--out", default=str(REPO / "bench" / "results"))
    args = parser.parse_args()
    results: dict = {"command": "python bench/cluster_benchmark.py " + " ".join(sys.argv[1:]),
                     "messages": args.messages, "session_timeout_ms": args.session_timeout_ms,
                     "cpus": os.cpu_count(), "keep_topics": args.keep_topics}
    with tempfile.TemporaryDirectory(prefix="logbus-cluster-bench-") as work:
        c = Cluster(Path(work), 3, zookeeper_session_timeout_ms=args.session_timeout_ms,
                    auto_leader_rebalance_enable="false")
        try:
            c.start()
            admin = AdminClient({"bootstrap.servers": c.bootstrap})
            # rf3 is failover's topic; with --keep-topics both take every run
            kept = {rf: new_topic(c, admin, f"rf{rf}", rf) for rf in ((1, 3) if args.keep_topics else (3,))}
            runs: dict[str, list[dict]] = {key: [] for key in SETTINGS}
            for i in range(args.runs):
                for key, (rf, conf) in SETTINGS.items():
                    topic = kept[rf] if args.keep_topics else new_topic(c, admin, f"{key}-{i}", rf)
                    runs[key].append(produce(c.bootstrap, topic, args.messages, conf, roles(c, topic)))
                    if not args.keep_topics:
                        delete_topic(c, admin, topic)
                    print(key, round(runs[key][-1]["msg_s"]), flush=True)
            for key, outcomes in runs.items():
                results[key + "_msg_s"] = spread([o["msg_s"] for o in outcomes])
                results[key + "_max_in_flight"] = max(o["max_in_flight"] for o in outcomes)
                for measure in ("rtt_ms_p50", "batch_messages"):
                    values = [o[measure] for o in outcomes if measure in o]
                    if values:
                        results[f"{key}_{measure}"] = statistics.median(values)
                results[key + "_cpu_s_per_million"] = {
                    role: statistics.median(sum(v for name, v in o["cpu_s"].items() if name.startswith(role))
                                            for o in outcomes) * 1e6 / args.messages
                    for role in ("leader", "follower", "client", "zookeeper")}
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
    runs = "every setting on one topic per replication factor for all runs (--keep-topics)" if r.get(
        "keep_topics") else "each run on a topic of its own, deleted after it"
    lines = [
        "# Replication on a local 3-broker cluster (real ZooKeeper, 3 broker processes, one 2-core machine)", "",
        f"Command: `{r['command']}`; {r['messages']:,} messages of {SIZE} bytes per run, one confluent-kafka "
        f"producer with librdkafka's defaults but for the settings below; the settings' runs alternate; {runs}; "
        "median [min–max].", "",
        "| setting | msg/s | MB/s | most requests in flight | round trip p50, ms | messages per batch |",
        "|---|---|---|---|---|---|",
    ]
    for key, label in LABELS.items():
        if key + "_msg_s" not in r:
            continue
        m = r[key + "_msg_s"]
        flight = r.get(key + "_max_in_flight", "")
        rtt = f"{r[key + '_rtt_ms_p50']:.2f}" if key + "_rtt_ms_p50" in r else ""
        batch = f"{r[key + '_batch_messages']:,.0f}" if key + "_batch_messages" in r else ""
        lines.append(f"| {label} | {m['median']:,.0f} [{m['min']:,.0f}–{m['max']:,.0f}] | "
                     f"{m['median'] * SIZE / 1e6:.1f} | {flight} | {rtt} | {batch} |")
    pairs = [y / x for x, y in zip(a["runs"], b["runs"])]
    lines += [f"| **ratio acks=all RF 3 / acks=1 RF 1** (the goal: 0.85x) | **{b['median'] / a['median']:.2f}x** "
              f"(run by run: {', '.join(f'{x:.2f}' for x in pairs)}; their median {statistics.median(pairs):.2f}x) "
              "| | | | |"]
    if "acksall_rf3_idempotent_msg_s" in r:
        i3 = r["acksall_rf3_idempotent_msg_s"]
        lines.append(f"| ratio idempotent acks=all RF 3 / acks=1 RF 1 | {i3['median'] / a['median']:.2f}x | | | | |")
    lines.append("")
    lines += [
        "Round trip and batch size: librdkafka's statistics at the end of each run (`rtt` p50 of the leader's "
        "connection: a ProduceRequest sent to its answer, as the client sees it; `batchcnt` average), median "
        "of the runs.", ""]
    if "acksall_rf1_idempotent_msg_s" in r and "acksall_rf3_idempotent_msg_s" in r:
        ceiling = r["acksall_rf1_idempotent_msg_s"]["median"]
        i3 = r["acksall_rf3_idempotent_msg_s"]["median"]
        lines += [
            "The idempotent rows do not enter the goal's ratio: they change the producer, not only acks and the "
            "replication factor. librdkafka's idempotent producer counts *messages* in flight per partition against "
            "a limit of 5, so with batches of thousands of messages it keeps one ProduceRequest in flight "
            "(librdkafka's pull request #4989, open: \"the librdkafka implementation sends only one produce "
            f"request at a time\"; measured here: at most {r['acksall_rf3_idempotent_max_in_flight']}, against "
            f"{r['acksall_rf3_max_in_flight']} for the default producer) and runs at one batch per round trip. "
            f"With nothing to replicate (RF 1) that is {ceiling:,.0f} msg/s, {ceiling / a['median']:.2f}x of "
            f"acks=1 RF 1; replicating to two followers costs {1 - i3 / ceiling:.0%} of that.", ""]
    lines += ["CPU seconds per million messages (median of the runs; /proc):", "",
              "| setting | leader | followers | client | zookeeper | all |", "|---|---|---|---|---|---|"]
    for key, label in LABELS.items():
        if key + "_cpu_s_per_million" in r:
            cpu = r[key + "_cpu_s_per_million"]
            lines.append(f"| {label} | {cpu['leader']:.2f} | {cpu['follower']:.2f} | {cpu['client']:.2f} | "
                         f"{cpu['zookeeper']:.2f} | {sum(cpu.values()):.2f} |")
    cores = r.get("cpus") or os.cpu_count()
    cpu1, cpu3 = (sum(r[k + "_cpu_s_per_million"].values()) for k in ("acks1_rf1", "acksall_rf3"))
    lines += ["", f"A CPU budget: {cores} fully busy cores carry at most {cores / cpu1 * 1e6:,.0f} msg/s of acks=1 "
              f"RF 1 ({cpu1:.2f} CPU-seconds per million) and {cores / cpu3 * 1e6:,.0f} of acks=all RF 3 "
              f"({cpu3:.2f}): {cpu1 / cpu3:.2f}x. The client's CPU per message differs between the settings "
              "(librdkafka's batches fill and its threads wake differently as the answers come sooner or later), "
              "so the rates' ratio is not the brokers' alone.", ""]
    lines += [
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

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 4))
    bars = [(name, r[key + "_msg_s"]) for key, name in (
        ("acks1_rf1", "acks=1\nRF 1"), ("acksall_rf3", "acks=all\nRF 3"),
        ("acksall_rf3_idempotent", "acks=all\nRF 3\nidempotent"),
        ("acksall_rf1_idempotent", "acks=all\nRF 1\nidempotent"))
        if key + "_msg_s" in r]
    ax1.bar([n for n, _ in bars], [m["median"] for _, m in bars],
            color=["C0", "C1", "C7", "C7"][:len(bars)],
            yerr=[[m["median"] - m["min"] for _, m in bars], [m["max"] - m["median"] for _, m in bars]])
    ax1.tick_params(axis="x", labelsize=7)
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
