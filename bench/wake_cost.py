"""What a request costs the broker when requests come one at a time (issue 20; the whole-topology tests' CPU).

The paper benchmark measures the broker's CPU per request at saturation: requests arrive back to back, each pass
of the event loop finds several, the process never sleeps. A topology's brokers mostly see the other case: a
request, then nothing for a millisecond or ten. This measures both sides of that on this machine:

1. ``python``: a fixed piece of pure-Python work (60 dict inserts of packed structs, a JSON dump), run 2,000
   times back to back, then with a sleep of 0.1, 1 and 10 ms between runs: its CPU time per run
   (``time.process_time``). No broker: what sleeping between pieces of work costs any process here.
2. ``broker``: a standalone broker and one confluent-kafka producer sending one 200-byte message per Produce
   request (``linger.ms=0``, acks=1) at a steady rate (100, 1,000, 3,000 a second), then as fast as it can: the
   broker's CPU (user + system, ``/proc``) over the requests its metrics count.

Usage: .venv/bin/python bench/wake_cost.py [--seconds 20] [--out bench/results]
Results: bench/results/wake_cost.{json,md,png}
"""

from __future__ import annotations

import argparse
import json
import struct
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO / "bench"), str(REPO / "tests")]

from benchkit.machine import tree_cpu  # noqa: E402
from paper_benchmark import produce_requests  # noqa: E402
from support import BrokerProcess, free_port  # noqa: E402

GAPS_MS = (0.0, 0.1, 1.0, 10.0)
RATES = (100, 1000, 3000, 0)  # 0: as fast as the producer goes (librdkafka's in-flight window)


def unit() -> str:
    d = {}
    for i in range(60):
        d[i] = struct.pack(">iq", i, i * 7)
    return json.dumps([len(v) for v in d.values()])


def python_side() -> list[dict]:
    out = []
    for gap_ms in GAPS_MS:
        n = 2000 if gap_ms < 10 else 400
        for _ in range(50):
            unit()  # warm
        c0 = time.process_time()
        for _ in range(n):
            unit()
            if gap_ms:
                time.sleep(gap_ms / 1000)
        out.append({"gap_ms": gap_ms, "runs": n, "cpu_us_per_run": round(1e6 * (time.process_time() - c0) / n, 1)})
        print("python", out[-1], flush=True)
    return out


def broker_side(seconds: float) -> list[dict]:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    out = []
    with tempfile.TemporaryDirectory(prefix="logbus-wake-cost-") as tmp:
        port = free_port()
        broker = BrokerProcess(Path(tmp) / "b", num_partitions=1, metrics_listener=f"http://127.0.0.1:{port}")
        broker.start()
        metrics = f"http://127.0.0.1:{port}/metrics"
        try:
            admin = AdminClient({"bootstrap.servers": broker.bootstrap})
            admin.create_topics([NewTopic("wake", 1, 1)])["wake"].result(30)
            producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0, "batch.num.messages": 1,
                                 "acks": 1})
            payload = b"x" * 200

            def produce(rate: float, duration: float) -> int:
                start, n = time.monotonic(), 0
                while time.monotonic() - start < duration:
                    try:
                        producer.produce("wake", payload)
                    except BufferError:
                        producer.poll(0.01)
                        continue
                    producer.poll(0)
                    n += 1
                    if rate:
                        delay = start + n / rate - time.monotonic()
                        if delay > 0:
                            time.sleep(delay)
                producer.flush(30)
                return n

            for rate in RATES:
                produce(rate, 3)  # settle
                c0, r0, t0 = tree_cpu(broker.proc.pid), produce_requests(metrics), time.monotonic()
                sent = produce(rate, seconds)
                c1, r1, t1 = tree_cpu(broker.proc.pid), produce_requests(metrics), time.monotonic()
                requests = r1 - r0
                out.append({"rate": rate or "max", "messages": sent, "requests_per_s": round(requests / (t1 - t0), 1),
                            "broker_cpu_percent": round(100 * (c1 - c0) / (t1 - t0), 1),
                            "broker_cpu_us_per_request": round(1e6 * (c1 - c0) / requests, 1)})
                print("broker", out[-1], flush=True)
        finally:
            broker.stop()
    return out


def write(results: dict, out: Path) -> None:
    (out / "wake_cost.json").write_text(json.dumps(results, indent=2) + "\n")
    py, br = results["python"], results["broker"]
    base = py[0]["cpu_us_per_run"]
    lines = ["# What a request costs when requests come one at a time (issue 20)", "",
             f"Command: `{results['command']}` on this 2-core machine; one run. Method: `bench/wake_cost.py`'s "
             "docstring.", "",
             "Pure Python, the same piece of work with a sleep between runs (CPU time per run):", "",
             "| sleep between runs | CPU µs per run | vs back to back |", "|---|---|---|"]
    lines += [f"| {r['gap_ms']:g} ms | {r['cpu_us_per_run']:,.1f} | {r['cpu_us_per_run'] / base:.2f}x |" for r in py]
    lines += ["", "The broker, one message per Produce request at a steady rate (its CPU over the requests its "
              "metrics count):", "",
              "| producer rate (msg/s) | Produce requests/s | broker CPU (% of one core) | broker CPU µs per request |",
              "|---|---|---|---|"]
    lines += [f"| {r['rate'] if r['rate'] == 'max' else format(r['rate'], ',')} | {r['requests_per_s']:,.1f} | "
              f"{r['broker_cpu_percent']} | {r['broker_cpu_us_per_request']:,.1f} |" for r in br]
    lines += ["", "Plot: `wake_cost.png`."]
    (out / "wake_cost.md").write_text("\n".join(lines) + "\n")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4))
    a.bar([f"{r['gap_ms']:g} ms" for r in py], [r["cpu_us_per_run"] for r in py])
    a.set_xlabel("sleep between runs")
    a.set_ylabel("CPU µs per run")
    a.set_title("pure Python, same work")
    b.bar([str(r["rate"]) for r in br], [r["broker_cpu_us_per_request"] for r in br])
    b.set_xlabel("producer rate, one message a request (msg/s)")
    b.set_ylabel("broker CPU µs per request")
    b.set_title("broker, Produce requests")
    fig.tight_layout()
    fig.savefig(out / "wake_cost.png", dpi=100)
    plt.close(fig)
    print("\n".join(lines))


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--out", default=str(REPO / "bench" / "results"))
    args = parser.parse_args()
    results = {"command": "python bench/wake_cost.py " + " ".join(sys.argv[1:]), "python": python_side(),
               "broker": broker_side(args.seconds)}
    write(results, Path(args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
