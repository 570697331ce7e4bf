"""Where kcat's consume time goes: the broker's answer or the client's own work (issue 20's 4M msg/s goal).

librdkafka (kcat's client) keeps one FetchRequest in flight per broker: it sends the next one only after it has
parsed the previous response and queued its messages. So a consume of one partition is a chain of fetch cycles,
each one a round trip (request sent -> response read, which includes the broker's work) followed by the client's
work on that response. This splits the chain with librdkafka's own debug log (``-d fetch,protocol``: the
``rtt`` of every FetchResponse, and the time of every line).

Per round, on one standalone broker of this tree, for each topic (1,000,000 messages of 200 bytes, one
partition): the paper benchmark's ``bench-batch50`` topic (batches of 50, ~200 KB per fetch) and its
``bench-kcat`` topic (kcat's own batches of ~4,700):
- ``plain``: kcat consumes the topic as the paper benchmark does (``bench/benchkit/logbus_side.consume_kcat``),
  timed from kcat's start to its exit;
- ``debug``: the same with the debug log, which gives the fetch count and the sum of the round trips.

``instant broker`` is what the plain run would reach if every round trip took no time at all:
messages / (plain seconds - sum of round trips). It is an upper bound on what any broker could give this client
on this machine. But the round trip is not all Python: the broker's CPU during the runs is split into user time
(the interpreter: decoding the request, finding the batches, the response header) and system time (the kernel:
``sendfile`` of the batches into the loopback socket, where the receiving side's TCP work also runs), per fetch.

Usage: .venv/bin/python bench/kcat_consume_cycle.py [--messages 1000000] [--rounds 3] [--out bench/results]
Results: <out>/kcat_consume_cycle.{json,md,png}
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO / "bench"), str(REPO / "tests")]

from benchkit import logbus_side, side_by_side  # noqa: E402
from paper_benchmark import SIZE, produce_kcat  # noqa: E402
from request_cost import start_broker  # noqa: E402

TOPICS = ("bench-batch50", "bench-kcat")
LINE = re.compile(r"^%7\|(\d+\.\d+)\|(\w+)\|")
RTT = re.compile(r"Received FetchResponse \(v\d+, (\d+) bytes, CorrId \d+, rtt ([\d.]+)ms\)")


def kcat_command(bootstrap: str, topic: str, count: int) -> list[str]:
    return ["kcat", "-b", bootstrap, "-C", "-t", topic, "-p", "0", "-o", "1", "-c", str(count), "-q", "-f", "",
            *(x for k, v in logbus_side.FETCH_200KB.items() for x in ("-X", f"{k}={v}")),
            "-X", "queued.min.messages=1000000"]


def cycles(log: str) -> dict:
    """Fetch count, bytes and round trips from a ``-d fetch,protocol`` log; the span from the first FetchRequest
    sent to the last FetchResponse read."""
    rtts, sizes, first, last = [], [], None, None
    for line in log.splitlines():
        head = LINE.match(line)
        if not head:
            continue
        stamp = float(head.group(1))
        if "Sent FetchRequest" in line and first is None:
            first = stamp
        found = RTT.search(line)
        if found:
            sizes.append(int(found.group(1)))
            rtts.append(float(found.group(2)) / 1000)
            last = stamp
    if not rtts:
        raise RuntimeError("no FetchResponse in kcat's debug log")
    return {"fetches": len(rtts), "bytes_per_fetch": round(statistics.mean(sizes)),
            "rtt_sum_s": round(sum(rtts), 4), "rtt_ms_p50": round(statistics.median(rtts) * 1000, 3),
            "fetch_span_s": round(last - first, 4)}


def one_round(broker, count: int) -> dict:
    out = {}
    proc = psutil.Process(broker.proc.pid)
    for topic in TOPICS:
        cmd = kcat_command(broker.bootstrap, topic, count)
        cpu0 = proc.cpu_times()
        start = time.perf_counter()
        subprocess.run(cmd, check=True, timeout=600, stdout=subprocess.DEVNULL)
        plain = time.perf_counter() - start
        debug = subprocess.run([*cmd, "-d", "fetch,protocol"], check=True, timeout=600, stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, text=True)
        c = cycles(debug.stderr)
        cpu1 = proc.cpu_times()
        fetches = 2 * c["fetches"]  # both runs fetched the same batches
        c["broker_user_us_per_fetch"] = round((cpu1.user - cpu0.user) / fetches * 1e6)
        c["broker_system_us_per_fetch"] = round((cpu1.system - cpu0.system) / fetches * 1e6)
        out[topic] = {"plain_s": round(plain, 4), "msg_s": round(count / plain), **c,
                      "rtt_share_of_span": round(c["rtt_sum_s"] / c["fetch_span_s"], 3),
                      "instant_broker_msg_s": round(count / (plain - c["rtt_sum_s"]))}
        print(topic, out[topic], flush=True)
    return out


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--messages", type=int, default=1_000_000)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--out", type=Path, default=REPO / "bench" / "results")
    args = p.parse_args()
    work = Path(tempfile.mkdtemp(prefix="kcat-cycle-"))
    broker, _ = start_broker(work / "broker", REPO / "platform")
    try:
        logbus_side.produce(broker, "bench-batch50", args.messages, SIZE, logbus_side.RUNS["batch50"])
        produce_kcat(broker, "bench-kcat", args.messages, work)
        rounds = [one_round(broker, args.messages) for _ in range(args.rounds)]
    finally:
        broker.stop()
    head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True,
                          text=True).stdout.strip()
    results = {"messages": args.messages, "rounds": rounds, "commit": head,
               "command": f"python bench/kcat_consume_cycle.py --messages {args.messages} --rounds {args.rounds}"
                          f" --out {args.out.relative_to(REPO) if args.out.is_relative_to(REPO) else args.out}"}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "kcat_consume_cycle.json").write_text(json.dumps(results, indent=1) + "\n")
    write_report(results, args.out)
    return 0


def values(rounds: list[dict], topic: str, key: str) -> list[float]:
    return [r[topic][key] for r in rounds]


def write_report(results: dict, out: Path) -> None:
    rounds = results["rounds"]
    rows = [("kcat consume, msg/s (plain run)", "msg_s", ",.0f"),
            ("fetches per run (debug run)", "fetches", ",.0f"),
            ("bytes per fetch response", "bytes_per_fetch", ",.0f"),
            ("round trip p50, ms", "rtt_ms_p50", ".3f"),
            ("sum of round trips, s", "rtt_sum_s", ".3f"),
            ("first request to last response, s (debug run)", "fetch_span_s", ".3f"),
            ("round trips' share of that span", "rtt_share_of_span", ".2f"),
            ("instant broker: msg/s if every round trip took 0", "instant_broker_msg_s", ",.0f"),
            ("broker user CPU per fetch, µs (the interpreter)", "broker_user_us_per_fetch", ",.0f"),
            ("broker system CPU per fetch, µs (the kernel: sendfile, loopback TCP)", "broker_system_us_per_fetch",
             ",.0f")]
    lines = ["# Where kcat's consume time goes: broker round trips against the client's own work (issue 20)", "",
             f"Command: `{results['command']}` (commit {results['commit']}); {results['messages']:,} messages "
             f"of 200 bytes per topic, one partition, one standalone broker; {len(rounds)} rounds; median "
             "[min–max].", "",
             "librdkafka keeps one FetchRequest in flight and sends the next only after parsing the last "
             "response, so the consume is a chain of round trips (the broker's part: request sent to response "
             "read, as librdkafka's debug log reports it) and client work.", "",
             "| measure | " + " | ".join(f"`{t}`" for t in TOPICS) + " |", "|---|---|---|"]
    for label, key, fmt in rows:
        cells = (side_by_side.cell(values(rounds, t, key), "{:" + fmt + "}") for t in TOPICS)
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    best = max(statistics.median(values(rounds, t, "instant_broker_msg_s")) for t in TOPICS)
    lines += ["", f"The issue's goal is 4,000,000 msg/s. The best median *instant broker* figure here is "
              f"{best:,.0f} msg/s: what this client reaches on this machine if the broker's answers cost nothing.",
              "", "Plot: `kcat_consume_cycle.png`."]
    (out / "kcat_consume_cycle.md").write_text("\n".join(lines) + "\n")
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(7, 4))
    for i, topic in enumerate(TOPICS):
        client = [r[topic]["plain_s"] - r[topic]["rtt_sum_s"] for r in rounds]
        broker = [r[topic]["rtt_sum_s"] for r in rounds]
        xs = [i * (len(rounds) + 1) + j for j in range(len(rounds))]
        ax.bar(xs, client, color="tab:blue", label="client work and start-up" if i == 0 else None)
        ax.bar(xs, broker, bottom=client, color="tab:orange", label="round trips (broker)" if i == 0 else None)
        ax.text(xs[0], max(c + b for c, b in zip(client, broker)) * 1.02, topic, fontsize=8)
    ax.axhline(results["messages"] / 4e6, color="k", ls="--", lw=1, label="4M msg/s goal")
    ax.set_ylabel(f"seconds for {results['messages']:,} messages")
    ax.set_xticks([])
    ax.legend(fontsize=8)
    ax.set_title("kcat consume: where the time goes (one bar per round)")
    fig.tight_layout()
    fig.savefig(out / "kcat_consume_cycle.png", dpi=110)


if __name__ == "__main__":
    raise SystemExit(main())
