"""The paper's §5 experiment, side by side in one run: logbus vs RabbitMQ vs ActiveMQ on this machine.

For each of --runs runs: the machine's ceilings (iperf3 over loopback, dd with fdatasync), then a fresh logbus
broker, a fresh RabbitMQ and a fresh ActiveMQ (Debian packages, installed if missing, each started here as our own
process with its data under the work directory and stopped afterwards), each given the same workload:
--messages 200-byte messages from one producer (logbus: batch 1, batch 50, default batching; peers: batch 1,
they have no producer batching API, as the paper notes), one consumer over that backlog (~1,000 messages /
200 KB per pull), bytes on disk per message, broker CPU, and end-to-end latency at a fixed moderate rate.
Clients: confluent-kafka (librdkafka) and kcat for logbus; each peer's own Java client from Debian
(bench/peers/PeerBench.java). Client and broker CPU are measured separately.

Per request (issue 20): the logbus broker serves Prometheus metrics, and every producer run reads its Produce
request counter before and after, so the table shows how many messages each request carried (batch 1 must be
one: one request per message, as the paper's unbatched producer) and the broker's CPU per request. kcat also
produces the same messages with librdkafka's batching on one partition (its C producer costs no Python per
message, so the broker is what is measured). kcat consumes both topics twice: as installed, then with jemalloc
preloaded as its allocator (the same binary; glibc's malloc locks an arena when kcat's main thread frees a message
that librdkafka's fetch thread allocated, and that, not the broker, bounded kcat's consume here).

Usage: .venv/bin/python bench/paper_benchmark.py [--messages 2000000] [--runs 3] [--latency-rate 2000]
       [--latency-seconds 10] [--systems logbus,rabbitmq,activemq] [--out bench/results]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO / "bench"), str(REPO / "tests")]

from benchkit import logbus_side, machine, peers, report  # noqa: E402
from support import BrokerProcess, free_port  # noqa: E402

SIZE = 200


def produce_requests(metrics_url: str) -> int:
    """The broker's count of Produce requests answered (its Prometheus counter)."""
    return requests_answered(metrics_url, "Produce")


def requests_answered(metrics_url: str, api: str) -> int:
    """The broker's count of ``api`` requests answered (its Prometheus counter; 0 before the first)."""
    import urllib.request

    with urllib.request.urlopen(metrics_url, timeout=10) as response:
        for line in response.read().decode().splitlines():
            if line.startswith(f'kafka_network_requestmetrics_requests_total{{request="{api}"}}'):
                return int(float(line.rsplit(" ", 1)[1]))
    return 0


def per_request(result: dict, requests: int) -> dict:
    """Add the Produce requests a run took, messages per request and broker CPU per request."""
    result["produce_requests"] = requests
    result["msgs_per_request"] = round(result["messages"] / requests, 2) if requests else None
    result["broker_cpu_us_per_request"] = round(result["broker_cpu_s"] / requests * 1e6, 1) if requests else None
    return result


def run_logbus(work: Path, args: argparse.Namespace) -> dict:
    metrics_port = free_port()
    broker = BrokerProcess(work / "logbus", num_partitions=1,
                           metrics_listener=f"http://127.0.0.1:{metrics_port}").start()
    metrics_url = f"http://127.0.0.1:{metrics_port}/metrics"
    out: dict = {}
    try:
        for name, conf in logbus_side.RUNS.items():
            before = produce_requests(metrics_url)
            result = logbus_side.produce(broker, f"bench-{name}", args.messages, SIZE, conf)
            # the topic-creating message and its request come before the clock; the sampler sends no Produce
            out[f"producer_{name}"] = per_request(result, produce_requests(metrics_url) - before - 1)
            log("logbus", f"producer_{name}", out[f"producer_{name}"])
        before = produce_requests(metrics_url)
        result = produce_kcat(broker, "bench-kcat", args.messages, work)
        out["producer_kcat"] = per_request(result, produce_requests(metrics_url) - before - 1)
        log("logbus", "producer_kcat", out["producer_kcat"])
        out["consumer"] = logbus_side.consume(broker, "bench-batch50", args.messages, SIZE)
        log("logbus", "consumer", out["consumer"])
        out["consumer_kcat"] = logbus_side.consume_kcat(broker, "bench-batch50", args.messages, SIZE)
        log("logbus", "consumer_kcat", out["consumer_kcat"])
        # the same consumer on the topic kcat produced: batches of thousands of records (librdkafka's batching),
        # where the batch-50 topic above has 20,000 batches of 50 per million messages
        out["consumer_kcat_batched"] = logbus_side.consume_kcat(broker, "bench-kcat", args.messages, SIZE)
        log("logbus", "consumer_kcat_batched", out["consumer_kcat_batched"])
        # the same two kcat consumers with jemalloc as kcat's allocator (the client's malloc, not the broker)
        for topic, phase in (("bench-batch50", "consumer_kcat_jemalloc"),
                             ("bench-kcat", "consumer_kcat_batched_jemalloc")):
            out[phase] = logbus_side.consume_kcat(broker, topic, args.messages, SIZE, env=logbus_side.JEMALLOC_ENV)
            log("logbus", phase, out[phase])
        out["latency"] = logbus_side.latency(broker, "bench-latency", args.latency_rate, args.latency_seconds, SIZE)
        log("logbus", "latency", out["latency"])
    finally:
        broker.stop()
    return out


def produce_kcat(broker: BrokerProcess, topic: str, count: int, work: Path) -> dict:
    """``count`` 200-byte messages from a file with kcat (C, librdkafka's batching) to one partition, acks=1;
    timed from kcat's start to its exit (it exits once every message is acknowledged). The topic exists first."""
    subprocess.run(["kcat", "-b", broker.bootstrap, "-P", "-t", topic, "-p", "0"], input=b"x" * SIZE + b"\n",
                   check=True, timeout=60)
    path = work / "kcat-messages.txt"
    line = os.urandom(SIZE // 2).hex().encode() + b"\n"  # 200 bytes of text, then the delimiter
    with open(path, "wb") as f:
        for _ in range(count // 10_000):
            f.write(line * 10_000)
        f.write(line * (count % 10_000))
    cmd = ["kcat", "-b", broker.bootstrap, "-P", "-t", topic, "-p", "0", "-l", str(path), "-X", "acks=1",
           "-X", "linger.ms=5", "-X", "batch.num.messages=10000", "-X", "queue.buffering.max.messages=1000000",
           "-X", "queue.buffering.max.kbytes=1048576"]
    broker_cpu0 = machine.tree_cpu(broker.proc.pid)
    before = os.times()
    start = time.perf_counter()
    subprocess.run(cmd, check=True, timeout=600)
    elapsed = time.perf_counter() - start
    after = os.times()
    path.unlink()
    hw = logbus_side.high_watermark(broker.bootstrap, topic)
    if hw != count + 1:
        raise RuntimeError(f"kcat: high watermark {hw}, expected {count + 1}")
    client = after.children_user + after.children_system - before.children_user - before.children_system
    return logbus_side._result(count, SIZE, elapsed, machine.tree_cpu(broker.proc.pid) - broker_cpu0, client, [])


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
