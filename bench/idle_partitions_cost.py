"""What idle partitions cost a cluster's brokers per acks=all request (issue 20: the whole pipeline's per-request
costs).

In the default topology most broker CPU goes to requests that come alone, and their count follows the producers'
batching and the fetches it wakes, not the message rate (``bench/wake_cost.py``). Without a fetch session (KIP-227)
a follower's Fetch names every partition it follows from that leader: the leader reads each partition's state and
the follower encodes, decodes and applies each, whether it moved or not. The offline datacenter carries
``__transaction_state`` (50 partitions by default, ``transaction.state.log.num.partitions``) for the exactly-once
mirror, so its followers' fetches name about 17 idle partitions per leader more than the live ones'.

Fetch sessions (``--sessions on,off``): since issue 20's KIP-227 work the followers keep an incremental fetch
session with each leader, so an idle partition is named in neither direction after the first fetch, and the leader
passes over a session's quiet partitions cheaply (``broker.handlers.fetch._quiet``). ``off`` starts the brokers with ``max.incremental.fetch.session.cache.slots=0``:
every fetch full, as before.

Each round starts a ZooKeeper and three brokers per setting (fresh, so the settings do not share a page cache or
a process's history), creates ``active`` (3 partitions, replication factor 3, min.insync.replicas=2) and ``idle``
(``N`` partitions, replication factor 3, never written), waits for every ISR to be full, then one confluent-kafka
producer sends ``--rate`` one-message acks=all requests a second (``linger.ms=0``, round-robin over the 3 active
partitions) for ``--seconds``. Measured: the three brokers' CPU (``/proc``, user + system) and the Produce and
Fetch requests their metrics count. The settings alternate in each round, so the machine's drift hits both.

Usage: .venv/bin/python bench/idle_partitions_cost.py [--idle 0,50] [--sessions on] [--rate 300] [--seconds 20]
       [--rounds 3]
       [--out bench/results/idle_partitions_cost]
Results: <out>/idle_partitions_cost.{json,md,png}
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO / "bench"), str(REPO / "tests")]

from benchkit.machine import tree_cpu  # noqa: E402
from paper_benchmark import requests_answered  # noqa: E402
from support import Cluster, start_with_metrics, wait_until  # noqa: E402

NAME = "idle_partitions_cost"
ACTIVE = 3


def measure(idle: int, rate: int, seconds: float, sessions: str = "on") -> dict:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    with tempfile.TemporaryDirectory(prefix="logbus-idle-partitions-") as tmp:
        extra = {} if sessions == "on" else {"max_incremental_fetch_session_cache_slots": 0}
        c = Cluster(Path(tmp), 3, zookeeper_session_timeout_ms=6000, auto_leader_rebalance_enable="false", **extra)
        try:
            start_with_metrics(c)
            admin = AdminClient({"bootstrap.servers": c.bootstrap})
            topics = [NewTopic("active", ACTIVE, 3, config={"min.insync.replicas": "2"})]
            topics += [NewTopic("idle", idle, 3)] if idle else []
            for future in admin.create_topics(topics).values():
                future.result(60)
            for name, count in (("active", ACTIVE), ("idle", idle)):
                for p in range(count):
                    wait_until(lambda: len(c.state(name, p)["isr"]) == 3, 60, what=f"full ISR of {name}[{p}]")
            producer = Producer({"bootstrap.servers": c.bootstrap, "acks": "all", "linger.ms": 0})
            for i in range(200):  # every leader known, every connection up
                producer.produce("active", b"w" * 100, partition=i % ACTIVE)
            producer.flush(30)
            time.sleep(3)
            urls = [f"http://127.0.0.1:{b.metrics_port}/metrics" for b in c.brokers.values()]

            def counts() -> tuple[int, int]:
                return (sum(requests_answered(u, "Produce") for u in urls),
                        sum(requests_answered(u, "Fetch") for u in urls))

            cpu0, (produce0, fetch0) = sum(tree_cpu(b.proc.pid) for b in c.brokers.values()), counts()
            start, sent = time.monotonic(), 0
            payload = b"x" * 100
            while time.monotonic() - start < seconds:
                due = int((time.monotonic() - start) * rate)
                while sent < due:
                    producer.produce("active", payload, partition=sent % ACTIVE)
                    sent += 1
                producer.poll(0.001)
            producer.flush(30)
            elapsed = time.monotonic() - start
            cpu = sum(tree_cpu(b.proc.pid) for b in c.brokers.values()) - cpu0
            produce1, fetch1 = counts()
            produces, fetches = produce1 - produce0, fetch1 - fetch0
            return {"idle": idle, "sessions": sessions, "messages": sent, "seconds": round(elapsed, 2),
                    "produce_requests": produces,
                    "fetch_requests": fetches, "broker_cpu_s": round(cpu, 3), "broker_cores": round(cpu / elapsed, 3),
                    "cpu_us_per_produce": round(1e6 * cpu / produces, 1),
                    "fetches_per_produce": round(fetches / produces, 2)}
        finally:
            c.stop()


def med(runs: list[dict], key: str) -> str:
    values = [r[key] for r in runs]
    m = statistics.median(values)
    return f"{m:,.3f} [{min(values):,.3f}–{max(values):,.3f}]" if m < 10 else \
        f"{m:,.0f} [{min(values):,.0f}–{max(values):,.0f}]"


def write(results: dict, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{NAME}.json").write_text(json.dumps(results, indent=2) + "\n")
    s = results["settings"]
    idles, modes = s["idle"], s.get("sessions", ["on"])
    keys = [(n, m) for n in idles for m in modes]
    by = {k: [r for r in results["runs"] if (r["idle"], r.get("sessions", "off")) == k] for k in keys}
    lines = ["# What idle partitions cost the brokers per acks=all request (issue 20)", "",
             f"Command: `{results['command']}` (commit {results['commit']}); three brokers and a ZooKeeper per "
             f"setting and round, fresh each time; `active`: {ACTIVE} partitions, replication factor 3, "
             f"min.insync.replicas=2; `idle`: N partitions, replication factor 3, never written; one confluent-kafka "
             f"producer, {s['rate']:,} one-message acks=all requests a second (`linger.ms=0`) for {s['seconds']:g} s; "
             f"{s['rounds']} rounds, the settings alternating. Cells: median [min–max] over the rounds. Method: the "
             "docstring of `bench/idle_partitions_cost.py`.", "",
             "| idle partitions | followers' fetch sessions | Produce requests | Fetch requests per Produce | "
             "the 3 brokers' CPU (cores) | broker CPU µs per Produce request |", "|---|---|---|---|---|---|"]
    for n, m in keys:
        lines.append(f"| {n} | {m} | {med(by[n, m], 'produce_requests')} | {med(by[n, m], 'fetches_per_produce')} | "
                     f"{med(by[n, m], 'broker_cores')} | {med(by[n, m], 'cpu_us_per_produce')} |")

    def ratio_line(what: str, top: tuple, base: tuple) -> str:
        ratios = [t["cpu_us_per_produce"] / b["cpu_us_per_produce"] for b, t in zip(by[base], by[top])]
        return (f"{what}, round by round: " + ", ".join(f"{r:.2f}x" for r in ratios)
                + f" (median {statistics.median(ratios):.2f}x).")

    lines.append("")
    for m in modes:
        lines.append(ratio_line(f"Broker CPU per Produce request with {idles[-1]} idle partitions over {idles[0]} "
                                f"(sessions {m})", (idles[-1], m), (idles[0], m)))
    if "on" in modes and "off" in modes:
        for n in idles:
            lines.append(ratio_line(f"With {n} idle partitions, sessions on over off", (n, "on"), (n, "off")))
    lines += ["", f"Plot: `{NAME}.png`."]
    (out / f"{NAME}.md").write_text("\n".join(lines) + "\n")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for i, k in enumerate(keys):
        values = [r["cpu_us_per_produce"] for r in by[k]]
        ax.bar(i, statistics.median(values), color="#9ecae1" if k[1] == "on" else "#fdae6b")
        ax.scatter([i] * len(values), values, color="#08519c", zorder=3, s=14)
    ax.set_xticks(range(len(keys)), [f"{n} idle\nsessions {m}" for n, m in keys])
    ax.set_ylabel("the brokers' CPU µs per acks=all Produce request")
    ax.set_title(f"3 brokers, RF 3, {s['rate']:,} one-message requests/s")
    fig.tight_layout()
    fig.savefig(out / f"{NAME}.png", dpi=100)
    plt.close(fig)
    print("\n".join(lines))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--idle", default="0,50", help="idle partition counts, comma-separated")
    parser.add_argument("--sessions", default="on", help="the followers' fetch sessions: on, off or on,off")
    parser.add_argument("--rate", type=int, default=300, help="acks=all one-message requests a second")
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", default=str(REPO / "bench" / "results" / NAME))
    args = parser.parse_args()
    import subprocess

    idles = [int(x) for x in args.idle.split(",")]
    modes = args.sessions.split(",")
    if not set(modes) <= {"on", "off"}:
        parser.error("--sessions: on, off or on,off")
    keys = [(n, m) for n in idles for m in modes]
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True,
                            text=True).stdout.strip()
    results = {"command": "python bench/idle_partitions_cost.py " + " ".join(sys.argv[1:]), "commit": commit,
               "settings": {"idle": idles, "sessions": modes, "rate": args.rate, "seconds": args.seconds,
                            "rounds": args.rounds},
               "runs": []}
    for r in range(args.rounds):
        for n, m in (keys if r % 2 == 0 else keys[::-1]):
            run = measure(n, args.rate, args.seconds, m)
            run["round"] = r
            results["runs"].append(run)
            print(run, flush=True)
    write(results, Path(args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
