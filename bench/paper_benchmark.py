"""The paper's §5 experiment, side by side in one run: logbus vs RabbitMQ vs ActiveMQ on this machine.

For each of --runs runs: the machine's ceilings (iperf3 over loopback, dd with fdatasync), then a fresh logbus
broker, a fresh RabbitMQ and a fresh ActiveMQ (Debian packages, installed if missing, each started here as our own
process with its data under the work directory and stopped afterwards), each given the same workload:
--messages 200-byte messages from one producer (logbus: batch 1, batch 50, default batching; peers: batch 1,
they have no producer batching API, as the paper notes), one consumer over that backlog (~1,000 messages /
200 KB per pull), bytes on disk per message, broker CPU, and end-to-end latency at a fixed moderate rate.
Clients: confluent-kafka (librdkafka) and kcat for logbus; each peer's own Java client from Debian
(bench/peers/PeerBench.java). Client and broker CPU are measured separately.

Usage: .venv/bin/python bench/paper_benchmark.py [--messages 2000000] [--runs 3] [--latency-rate 2000]
       [--latency-seconds 10] [--systems logbus,rabbitmq,activemq] [--out bench/results]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO / "bench"), str(REPO / "tests")]

from benchkit import logbus_side, machine, peers, report  # noqa: E402
from support import BrokerProcess  # noqa: E402

SIZE = 200


def run_logbus(work: Path, args: argparse.Namespace) -> dict:
    broker = BrokerProcess(work / "logbus", num_partitions=1).start()
    out: dict = {}
    try:
        for name, conf in logbus_side.RUNS.items():
            out[f"producer_{name}"] = logbus_side.produce(broker, f"bench-{name}", args.messages, SIZE, conf)
            log("logbus", f"producer_{name}", out[f"producer_{name}"])
        out["consumer"] = logbus_side.consume(broker, "bench-batch50", args.messages, SIZE)
        log("logbus", "consumer", out["consumer"])
        out["consumer_kcat"] = logbus_side.consume_kcat(broker, "bench-batch50", args.messages, SIZE)
        log("logbus", "consumer_kcat", out["consumer_kcat"])
        out["latency"] = logbus_side.latency(broker, "bench-latency", args.latency_rate, args.latency_seconds, SIZE)
        log("logbus", "latency", out["latency"])
    finally:
        broker.stop()
    return out


def run_peer(cls: type[peers.Peer], work: Path, classpath: str, args: argparse.Namespace) -> dict:
    peer = cls(work, classpath).start()
    out: dict = {}
    try:
        time.sleep(2)  # start-up work settles before the first measurement
        disk0 = machine.settled_bytes(peer.data)
        for phase in ("producer", "consumer"):
            cpu0 = peer.cpu()
            res, client_cpu = peer.client("produce" if phase == "producer" else "consume", "bench", args.messages,
                                          SIZE)
            broker_cpu = peer.cpu() - cpu0
            count, elapsed = res["messages"], res["seconds"]
            out[phase] = {"messages": count, "seconds": elapsed, "msg_per_s": round(count / elapsed),
                          "MB_per_s": round(count * SIZE / elapsed / 1e6, 1),
                          "broker_cpu_s_per_GB": round(broker_cpu / (count * SIZE / 1e9), 2),
                          "broker_cpu_s": round(broker_cpu, 2), "client_cpu_s": round(client_cpu, 2),
                          "samples": res["samples"]}
            if phase == "producer":
                out[phase]["disk_bytes_per_msg"] = round((machine.settled_bytes(peer.data) - disk0) / count, 1)
            log(cls.name, phase, out[phase])
        res, _ = peer.client("latency", "bench-latency", args.latency_rate, args.latency_seconds, SIZE)
        out["latency"] = res
        log(cls.name, "latency", res)
    finally:
        peer.stop()
    return out


def log(system: str, phase: str, result: dict) -> None:
    shown = {k: v for k, v in result.items() if k != "samples"}
    print(f"  {system:9} {phase:18} {shown}", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=2_000_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--latency-rate", type=int, default=2000)
    parser.add_argument("--latency-seconds", type=int, default=10)
    parser.add_argument("--systems", default="logbus,rabbitmq,activemq")
    parser.add_argument("--work", default=str(REPO / "bench" / "work"))
    parser.add_argument("--out", default=str(REPO / "bench" / "results"))
    args = parser.parse_args()
    systems = args.systems.split(",")
    work = Path(args.work)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    peers.install()
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    classpath = peers.compile_client(work)
    runs = []
    for i in range(1, args.runs + 1):
        run_dir = work / f"run-{i}"
        run_dir.mkdir()
        print(f"run {i}/{args.runs}", flush=True)
        run: dict = {"ceilings": {"loopback_tcp_Gbit_s": round(machine.loopback_tcp(), 2),
                                  "disk_write_MB_s": round(machine.disk_write(run_dir), 1)}}
        print(f"  ceilings {run['ceilings']}", flush=True)
        if "logbus" in systems:
            run["logbus"] = run_logbus(run_dir, args)
        for cls in (peers.RabbitMQ, peers.ActiveMQ):
            if cls.name in systems:
                run[cls.name] = run_peer(cls, run_dir, classpath, args)
        shutil.rmtree(run_dir, ignore_errors=True)
        runs.append(run)
    results = {
        "command": "python bench/paper_benchmark.py " + " ".join(sys.argv[1:]),
        "messages": args.messages, "message_bytes": SIZE,
        "machine": {"cpus": os.cpu_count(), "memory_GiB": round(os.sysconf("SC_PHYS_PAGES")
                                                                * os.sysconf("SC_PAGE_SIZE") / 2**30, 1),
                    "python": platform.python_version(), "kernel": platform.release(),
                    "librdkafka": __import__("confluent_kafka").libversion()[0],
                    "peers": report.peer_versions()},
        "runs": runs,
    }
    (out / "paper_benchmark.json").write_text(json.dumps(results, indent=1) + "\n")
    report.write(results, out)
    print((out / "paper_benchmark.md").read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
