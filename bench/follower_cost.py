"""A follower's CPU per message replicated, two versions side by side (issue 20: acks=all with RF 3 at 0.85x of
acks=1 with RF 1, which the machine's CPU budget bounds).

A ZooKeeper and two brokers of the version under test; one topic of one partition with replication factor 2;
confluent-kafka (a Python ``produce()`` loop, ``acks=all``, ``linger.ms=5``) writes 200-byte messages to the
leader, and the follower copies them with its replica fetcher. The follower's and the leader's CPU (user + system,
/proc) over the run, per million messages. Before and after alternate in the same run.

Usage: .venv/bin/python bench/follower_cost.py --before <commit> [--messages 1000000] [--rounds 3] [--out bench/results]
       | --report-only
Results: bench/results/follower_cost.{json,md,png}
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO / "bench"), str(REPO / "tests")]

from benchkit import logbus_side, side_by_side  # noqa: E402
from benchkit.machine import tree_cpu  # noqa: E402
from confluent_kafka import Producer  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402
from paper_benchmark import SIZE  # noqa: E402
from request_cost import launch  # noqa: E402
from support import BrokerProcess, ZooKeeperProcess, wait_until  # noqa: E402

TOPIC = "replicated"


def measure(workdir: Path, platform_dir: Path, messages: int) -> dict:
    zk = ZooKeeperProcess(workdir / "zk").start()
    brokers: list[BrokerProcess] = []
    try:
        for i in range(2):  # one by one: a broker started before a failure is stopped in the finally
            brokers.append(launch(BrokerProcess(workdir / f"broker{i}", broker_id=i, num_partitions=1,
                                                zookeeper_connect=zk.connect + "/bench"), platform_dir))
        bootstrap = ",".join(b.bootstrap for b in brokers)
        admin = AdminClient({"bootstrap.servers": bootstrap})
        wait_until(lambda: len(admin.list_topics(timeout=10).brokers) == 2, 30, what="both brokers registered")
        admin.create_topics([NewTopic(TOPIC, 1, 2)])[TOPIC].result(30)

        def in_sync():
            p = admin.list_topics(TOPIC, timeout=10).topics[TOPIC].partitions[0]
            return len(p.isrs) == 2 and p.leader >= 0

        wait_until(in_sync, 30, what="both replicas in sync")
        leader = admin.list_topics(TOPIC, timeout=10).topics[TOPIC].partitions[0].leader
        producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5,
                             "queue.buffering.max.messages": 1_000_000, "queue.buffering.max.kbytes": 1_048_576})
        producer.produce(TOPIC, b"x" * SIZE)
        producer.flush(30)
        time.sleep(1)
        payloads = [os.urandom(SIZE) for _ in range(1024)]
        pids = {"leader": brokers[leader].proc.pid, "follower": brokers[1 - leader].proc.pid}
        cpu0 = {role: tree_cpu(pid) for role, pid in pids.items()}
        started = time.perf_counter()
        logbus_side.send_all(producer, TOPIC, messages, payloads)
        if producer.flush(600):
            raise RuntimeError("messages left unacknowledged")
        elapsed = time.perf_counter() - started
        cpu = {role: tree_cpu(pid) - cpu0[role] for role, pid in pids.items()}
        return {"replicated": {"msg_per_s": round(messages / elapsed),
                               "follower_cpu_s_per_M": round(cpu["follower"] / messages * 1e6, 3),
                               "leader_cpu_s_per_M": round(cpu["leader"] / messages * 1e6, 3)}}
    finally:
        for b in brokers:
            b.stop()
        zk.stop()


def main() -> int:
    return side_by_side.main("follower_cost", 1_000_000, SIZE, measure, write_report)


def write_report(results: dict, out: Path) -> None:
    runs = results["runs"]
    keys = [("follower_cpu_s_per_M", "follower CPU s per million messages", "{:.3f}"),
            ("leader_cpu_s_per_M", "leader CPU s per million messages", "{:.3f}"),
            ("msg_per_s", "msg/s (acks=all)", "{:,.0f}")]
    lines = [
        "# A follower's CPU per message replicated, before and after (issue 20)",
        "",
        f"Command: `{results['command']}`  ",
        f"Before: `{results['before']}`; after: `{results['after']}`. Two brokers and a ZooKeeper; one partition "
        f"with replication factor 2; {results['messages']:,} messages of {results['message_bytes']} bytes from "
        "confluent-kafka (acks=all, linger.ms=5). "
        f"{len(runs['after'])} rounds, before and after alternating in the same run on this {results['cpus']}-core "
        "machine. Cells: median [min–max].",
        "",
        "| run | measure | before | after | after / before |",
        "|---|---|---|---|---|",
    ]
    lines += side_by_side.table_rows(runs, ["replicated"], keys)
    lines += ["", "Plot: `follower_cost.png` (CPU per million messages of every run).", ""]
    (out / "follower_cost.md").write_text("\n".join(lines))

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for x, (role, name) in enumerate((r, n) for r in ("follower", "leader") for n in ("before", "after")):
        vals = [r["replicated"][f"{role}_cpu_s_per_M"] for r in runs[name]]
        ax.scatter([x] * len(vals), vals, color="tab:blue" if name == "before" else "tab:orange")
        ax.hlines(statistics.median(vals), x - 0.2, x + 0.2)
    ax.set_xticks(range(4), [f"{r}\n{n}" for r in ("follower", "leader") for n in ("before", "after")])
    ax.set_ylabel("CPU s per million messages")
    ax.set_ylim(bottom=0)
    fig.tight_layout()
    fig.savefig(out / "follower_cost.png", dpi=100)


if __name__ == "__main__":
    sys.exit(main())
