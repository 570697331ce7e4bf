"""Replication's price, two versions of the broker side by side (issue 20: acks=all with RF 3 at 0.85x of acks=1
with RF 1).

Each round starts a ZooKeeper and three brokers of one version (``bench/cluster_benchmark.py``'s cluster), then
runs that benchmark's two goal settings on topics of their own (created for the run, deleted after it): acks=1 on
a topic with replication factor 1, and acks=all (librdkafka's default producer, not idempotent) on one with
replication factor 3 and min.insync.replicas=2. One confluent-kafka producer, ``--messages`` 200-byte messages per
run, one partition. Reported per setting: msg/s, and CPU seconds per million messages by role (leader, the
followers together, this client); per round: the ratio of the two settings' rates. Before and after alternate in
the same run, so the machine's drift hits both alike.

Usage: .venv/bin/python bench/replication_cost.py --before <commit> [--messages 1000000] [--rounds 3]
       [--out bench/results] | --report-only
Results: <out>/replication_cost.{json,md,png}
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO / "bench"), str(REPO / "tests")]

from benchkit import side_by_side  # noqa: E402
from cluster_benchmark import SETTINGS, delete_topic, new_topic, produce, roles  # noqa: E402
from confluent_kafka.admin import AdminClient  # noqa: E402
from support import Cluster  # noqa: E402

GOAL = ("acks1_rf1", "acksall_rf3")
ROLES = ("leader", "follower", "client")


def measure(workdir: Path, platform_dir: Path, messages: int) -> dict:
    c = Cluster(workdir, 3, platform_dir=platform_dir, zookeeper_session_timeout_ms=6000,
                auto_leader_rebalance_enable="false")
    try:
        c.start()
        admin = AdminClient({"bootstrap.servers": c.bootstrap})
        out: dict = {}
        for key in GOAL:
            rf, conf = SETTINGS[key]
            topic = new_topic(c, admin, key, rf)
            run = produce(c.bootstrap, topic, messages, conf, roles(c, topic))
            delete_topic(c, admin, topic)
            out[key] = {"msg_s": round(run["msg_s"]), "max_in_flight": run["max_in_flight"],
                        **{f"{role}_cpu_s_per_M": round(sum(v for name, v in run["cpu_s"].items()
                                                            if name.startswith(role)) / messages * 1e6, 3)
                           for role in ROLES}}
        out["goal"] = {"ratio": round(out["acksall_rf3"]["msg_s"] / out["acks1_rf1"]["msg_s"], 3)}
        return out
    finally:
        c.stop()


def main() -> int:
    return side_by_side.main("replication_cost", 1_000_000, 200, measure, write_report)


def write_report(results: dict, out: Path) -> None:
    runs = results["runs"]
    keys = [("msg_s", "msg/s", "{:,.0f}"), ("max_in_flight", "most requests in flight", "{:.0f}"),
            *((f"{role}_cpu_s_per_M", f"{role} CPU s per million", "{:.3f}") for role in ROLES)]
    lines = [
        "# Replication's price, before and after (issue 20)",
        "",
        f"Command: `{results['command']}`  ",
        f"Before: `{results['before']}`; after: `{results['after']}`. Each round: a ZooKeeper and 3 brokers of the "
        f"version; {results['messages']:,} messages of {results['message_bytes']} bytes from one confluent-kafka "
        "producer (librdkafka's defaults but for acks) per setting, each on a topic of its own, one partition: "
        "`acks1_rf1` (acks=1, replication factor 1) and `acksall_rf3` (acks=all, not idempotent, replication "
        "factor 3, min.insync.replicas=2); `follower` is both followers together; `goal` is acksall_rf3's rate over "
        f"acks1_rf1's in the same round (goal 0.85x). {len(runs['after'])} rounds, before and after alternating in "
        f"the same run on this {results['cpus']}-core machine. Cells: median [min–max].",
        "",
        "| setting | measure | before | after | after / before |",
        "|---|---|---|---|---|",
    ]
    lines += side_by_side.table_rows(runs, GOAL, keys)
    lines += side_by_side.table_rows(runs, ["goal"], [("ratio", "acks=all RF 3 / acks=1 RF 1", "{:.3f}")])
    lines += ["", "Plot: `replication_cost.png` (each round's ratio and acks=all RF 3 rate).", ""]
    (out / "replication_cost.md").write_text("\n".join(lines))

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(9, 4))
    for x, name in enumerate(("before", "after")):
        color = "tab:blue" if name == "before" else "tab:orange"
        ratios = [r["goal"]["ratio"] for r in runs[name]]
        rates = [r["acksall_rf3"]["msg_s"] / 1000 for r in runs[name]]
        for ax, vals in ((left, ratios), (right, rates)):
            ax.scatter([x] * len(vals), vals, color=color)
            ax.hlines(statistics.median(vals), x - 0.2, x + 0.2)
    left.axhline(0.85, color="gray", linestyle="--", linewidth=1)
    left.set_ylabel("acks=all RF 3 / acks=1 RF 1 (goal 0.85, dashed)")
    right.set_ylabel("acks=all RF 3, thousand msg/s")
    for ax in (left, right):
        ax.set_xticks(range(2), ["before", "after"])
        ax.set_ylim(bottom=0)
    fig.tight_layout()
    fig.savefig(out / "replication_cost.png", dpi=100)


if __name__ == "__main__":
    sys.exit(main())
