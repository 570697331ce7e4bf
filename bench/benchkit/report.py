"""The benchmark's Markdown table (medians of the runs, spread, ratios) and its plots in the style of the paper's
Figures 4 (producer) and 5 (consumer): throughput over the data sent."""

from __future__ import annotations

import statistics
import subprocess
from pathlib import Path

PAPER = {"batch1": 50_000, "batch50": 400_000, "consumer": 22_000}
PEERS = ("rabbitmq", "activemq")
NAMES = {"logbus": "logbus", "rabbitmq": "RabbitMQ", "activemq": "ActiveMQ"}


def peer_versions() -> dict:
    out = subprocess.run(["dpkg-query", "-W", "-f", "${Package} ${Version}\n", "rabbitmq-server", "activemq",
                          "librabbitmq-client-java", "kcat", "iperf3"], capture_output=True, text=True).stdout
    return dict(line.split(" ", 1) for line in out.splitlines() if " " in line)


def values(runs: list[dict], system: str, phase: str, key: str) -> list[float]:
    return [r[system][phase][key] for r in runs if system in r and phase in r[system]]


def cell(vals: list[float], fmt: str = "{:,.0f}") -> str:
    if not vals:
        return "–"
    med = statistics.median(vals)
    if len(vals) == 1:
        return fmt.format(med)
    return f"{fmt.format(med)} [{fmt.format(min(vals))}–{fmt.format(max(vals))}]"


def ratio(a: list[float], b: list[float] | float | None) -> str:
    if not a or not b:
        return "–"
    top = statistics.median(a)
    bottom = statistics.median(b) if isinstance(b, list) else b
    if not bottom:
        return "–"
    r = top / bottom
    return f"{r:.1f}x" if r >= 1 else f"{r:.2f}x" if r >= 0.01 else f"{r:.4f}x"


def write(results: dict, out: Path) -> None:
    runs = results["runs"]
    n = len(runs)
    lines = [
        "# Paper §5 experiment, side by side: logbus vs RabbitMQ vs ActiveMQ",
        "",
        f"Command: `{results['command']}`  ",
        f"{results['messages']:,} messages of {results['message_bytes']} bytes per test (the paper sent 10 million; "
        f"scaled to this {results['machine']['cpus']}-core machine), {n} run(s); each cell is the median "
        "[min–max] over the runs. Every system ran on this machine in this run; its clients on the same machine.  ",
        f"Machine: {results['machine']}",
        "",
        "| machine ceiling (same run) | value |",
        "|---|---|",
        f"| loopback TCP, iperf3, 1 stream | {cell([r['ceilings']['loopback_tcp_Gbit_s'] for r in runs], '{:.1f}')}"
        " Gbit/s |",
        f"| sequential write, dd 2 GiB + fdatasync | {cell([r['ceilings']['disk_write_MB_s'] for r in runs])}"
        " MB/s |",
        "",
        "| test | logbus | RabbitMQ | ActiveMQ | logbus / RabbitMQ | logbus / ActiveMQ | Kafka in the paper |"
        " logbus / paper |",
        "|---|---|---|---|---|---|---|---|",
    ]

    def row(label: str, ours: list[float], peer_phase: str | None, key: str, paper: float | None = None,
            fmt: str = "{:,.0f}") -> None:
        theirs = {p: values(runs, p, peer_phase, key) if peer_phase else [] for p in PEERS}
        lines.append(f"| {label} | {cell(ours, fmt)} | {cell(theirs['rabbitmq'], fmt)} | "
                     f"{cell(theirs['activemq'], fmt)} | {ratio(ours, theirs['rabbitmq'])} | "
                     f"{ratio(ours, theirs['activemq'])} | {paper and f'{paper:,}' or '–'} | {ratio(ours, paper)} |")

    lb = lambda phase, key: values(runs, "logbus", phase, key)  # noqa: E731
    row("Producer, batch 1, msg/s", lb("producer_batch1", "msg_per_s"), "producer", "msg_per_s", PAPER["batch1"])
    row("Producer, batch 1, MB/s", lb("producer_batch1", "MB_per_s"), "producer", "MB_per_s", None, "{:.1f}")
    row("Producer, batch 50, msg/s (peers: batch 1)", lb("producer_batch50", "msg_per_s"), "producer", "msg_per_s",
        PAPER["batch50"])
    row("Producer, batch 50, MB/s (peers: batch 1)", lb("producer_batch50", "MB_per_s"), "producer", "MB_per_s",
        None, "{:.1f}")
    row("Producer, librdkafka default batching, msg/s", lb("producer_default", "msg_per_s"), None, "msg_per_s")
    row("Producer, kcat (librdkafka batching, C client), msg/s", lb("producer_kcat", "msg_per_s"), None, "msg_per_s")
    row("Consumer, msg/s (logbus: confluent-kafka)", lb("consumer", "msg_per_s"), "consumer", "msg_per_s",
        PAPER["consumer"])
    row("Consumer, msg/s (logbus: kcat)", lb("consumer_kcat", "msg_per_s"), "consumer", "msg_per_s",
        PAPER["consumer"])
    if lb("consumer_kcat_batched", "msg_per_s"):  # results before this row existed do not have it
        row("Consumer, msg/s (logbus: kcat, of the kcat producer's topic: librdkafka's batches)",
            lb("consumer_kcat_batched", "msg_per_s"), "consumer", "msg_per_s", PAPER["consumer"])
    if lb("consumer_kcat_jemalloc", "msg_per_s"):  # kcat with jemalloc (LD_PRELOAD): the client's allocator
        row("Consumer, msg/s (logbus: kcat with jemalloc as its allocator)", lb("consumer_kcat_jemalloc", "msg_per_s"),
            "consumer", "msg_per_s", PAPER["consumer"])
        row("Consumer, msg/s (logbus: kcat with jemalloc, of the kcat producer's topic)",
            lb("consumer_kcat_batched_jemalloc", "msg_per_s"), "consumer", "msg_per_s", PAPER["consumer"])
    row("Bytes on disk per 200-byte message, batch 1", lb("producer_batch1", "disk_bytes_per_msg"), "producer",
        "disk_bytes_per_msg", None, "{:.1f}")
    row("Bytes on disk per 200-byte message, batch 50", lb("producer_batch50", "disk_bytes_per_msg"), "producer",
        "disk_bytes_per_msg", 209, "{:.1f}")
    row("Broker CPU s per GB produced, batch 1", lb("producer_batch1", "broker_cpu_s_per_GB"), "producer",
        "broker_cpu_s_per_GB", None, "{:.1f}")
    row("Broker CPU s per GB produced, batch 50", lb("producer_batch50", "broker_cpu_s_per_GB"), "producer",
        "broker_cpu_s_per_GB", None, "{:.1f}")
    row("Broker CPU s per GB consumed", lb("consumer", "broker_cpu_s_per_GB"), "consumer", "broker_cpu_s_per_GB",
        None, "{:.1f}")
    row("End-to-end latency p50, µs", lb("latency", "p50_us"), "latency", "p50_us")
    row("End-to-end latency p99, µs", lb("latency", "p99_us"), "latency", "p99_us")
    lines += [
        "",
        "For bytes, CPU and latency, lower is better (a ratio below 1x favours logbus). The paper's 9 bytes of "
        "overhead per message is shown as 209 bytes per 200-byte message.",
    ]
    lines += [
        "",
        "## Per Produce request (logbus; counted by the broker's request metrics)",
        "",
        "| producer | Produce requests | messages per request | broker CPU µs per request | msg/s |",
        "|---|---|---|---|---|",
    ]
    for phase, label in (("producer_batch1", "confluent-kafka, batch 1 (one request per message)"),
                         ("producer_batch50", "confluent-kafka, batch 50"),
                         ("producer_default", "confluent-kafka, default batching"),
                         ("producer_kcat", "kcat, librdkafka batching")):
        if lb(phase, "produce_requests"):
            lines.append(f"| {label} | {cell(lb(phase, 'produce_requests'))} | "
                         f"{cell(lb(phase, 'msgs_per_request'), '{:.2f}')} | "
                         f"{cell(lb(phase, 'broker_cpu_us_per_request'), '{:.1f}')} | {cell(lb(phase, 'msg_per_s'))} |")
    goals = [  # issue 20's broker goals, checked against this run's medians
        ("unbatched produce (batch 1) ≥ 50,000 msg/s", lb("producer_batch1", "msg_per_s"), 50_000, "{:,.0f}"),
        ("unbatched produce ≥ 2x RabbitMQ's producer (same run)",
         [statistics.median(lb("producer_batch1", "msg_per_s")) / statistics.median(values(runs, "rabbitmq",
                                                                                           "producer", "msg_per_s"))]
         if lb("producer_batch1", "msg_per_s") and values(runs, "rabbitmq", "producer", "msg_per_s") else [], 2.0,
         "{:.2f}x"),
        ("broker CPU ≤ 20 µs per unbatched request", lb("producer_batch1", "broker_cpu_us_per_request"), -20.0,
         "{:.1f} µs"),
        ("batched produce with kcat ≥ 2,000,000 msg/s", lb("producer_kcat", "msg_per_s"), 2_000_000, "{:,.0f}"),
        ("consume with kcat ≥ 4,000,000 msg/s (the batch-50 topic)", lb("consumer_kcat", "msg_per_s"), 4_000_000,
         "{:,.0f}"),
        ("consume with kcat ≥ 4,000,000 msg/s (the kcat producer's topic)", lb("consumer_kcat_batched", "msg_per_s"),
         4_000_000, "{:,.0f}"),
        ("consume with kcat, jemalloc as its allocator, ≥ 4,000,000 msg/s (the batch-50 topic)",
         lb("consumer_kcat_jemalloc", "msg_per_s"), 4_000_000, "{:,.0f}"),
        ("consume with kcat, jemalloc as its allocator, ≥ 4,000,000 msg/s (the kcat producer's topic)",
         lb("consumer_kcat_batched_jemalloc", "msg_per_s"), 4_000_000, "{:,.0f}"),
    ]
    lines += ["", "## Issue 20's broker goals in this run (medians)", "", "| goal | measured | met |", "|---|---|---|"]
    for label, vals, target, fmt in goals:
        if vals:
            med = statistics.median(vals)
            met = med <= -target if target < 0 else med >= target
            lines.append(f"| {label} | {fmt.format(med)} | {'yes' if met else 'no'} |")
        else:
            lines.append(f"| {label} | not measured | – |")
    lines += [
        "",
        "## Who is the bottleneck: CPU seconds per wall-clock second (1.0 = one core busy)",
        "",
        "| test | system | client CPU / wall | broker CPU / wall |",
        "|---|---|---|---|",
    ]
    phases = [("logbus", "producer_batch1", "producer, batch 1"), ("logbus", "producer_batch50", "producer, batch 50"),
              ("logbus", "producer_default", "producer, default batching"), ("logbus", "producer_kcat", "producer (kcat)"),
              ("logbus", "consumer", "consumer (confluent-kafka)"), ("logbus", "consumer_kcat", "consumer (kcat)"),
              ("logbus", "consumer_kcat_batched", "consumer (kcat, the kcat producer's topic)"),
              ("logbus", "consumer_kcat_jemalloc", "consumer (kcat with jemalloc)"),
              ("logbus", "consumer_kcat_batched_jemalloc", "consumer (kcat with jemalloc, the kcat producer's topic)"),
              ("rabbitmq", "producer", "producer"), ("rabbitmq", "consumer", "consumer"),
              ("activemq", "producer", "producer"), ("activemq", "consumer", "consumer")]
    for system, phase, label in phases:
        secs = values(runs, system, phase, "seconds")
        if not secs:
            continue
        client = [c / s for c, s in zip(values(runs, system, phase, "client_cpu_s"), secs)]
        broker = [c / s for c, s in zip(values(runs, system, phase, "broker_cpu_s"), secs)]
        lines.append(f"| {label} | {NAMES[system]} | {cell(client, '{:.2f}')} | {cell(broker, '{:.2f}')} |")
    lines += ["", "Plots: `paper_fig4_producer.png` (Figure 4 style), `paper_fig5_consumer.png` (Figure 5 style), "
              "from the run with the median batch-1 producer throughput of each system.", ""]
    (out / "paper_benchmark.md").write_text("\n".join(lines))
    plot(results, out)


def median_run(runs: list[dict], system: str, phase: str) -> dict | None:
    have = [r[system][phase] for r in runs if system in r and phase in r[system]]
    if not have:
        return None
    return sorted(have, key=lambda x: x["msg_per_s"])[len(have) // 2]


def plot(results: dict, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = results["runs"]
    figures = [
        ("paper_fig4_producer.png", "Producer performance (paper Figure 4 style)", "MB sent",
         [("logbus (batch 1)", "logbus", "producer_batch1"), ("logbus (batch 50)", "logbus", "producer_batch50"),
          ("RabbitMQ", "rabbitmq", "producer"), ("ActiveMQ", "activemq", "producer")]),
        ("paper_fig5_consumer.png", "Consumer performance (paper Figure 5 style)", "MB consumed",
         [("logbus", "logbus", "consumer"), ("RabbitMQ", "rabbitmq", "consumer"),
          ("ActiveMQ", "activemq", "consumer")]),
    ]
    for filename, title, xlabel, series in figures:
        fig, ax = plt.subplots(figsize=(8, 4.5))
        for label, system, phase in series:
            run = median_run(runs, system, phase)
            if run and run["samples"]:
                xs, ys = zip(*run["samples"])
                ax.plot(xs, ys, label=f"{label}: {run['msg_per_s']:,} msg/s overall", linewidth=1.2)
        ax.set_yscale("log")
        ax.set_xlabel(xlabel)
        ax.set_ylabel("throughput (messages/s, log scale)")
        ax.set_title(f"{title}: {results['messages']:,} × {results['message_bytes']} B, one client")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(out / filename, dpi=110)
        plt.close(fig)
