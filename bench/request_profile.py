"""Where a small request's broker CPU goes (issue 20): one broker, the paper benchmark's unbatched producer
(confluent-kafka, ``batch.num.messages=1``, ``linger.ms=0``, acks=1: one Produce request per 200-byte message).

Three runs on one broker: a plain one for the broker's user and system CPU per request (``/proc/<pid>/stat``: how
much is Python and how much the kernel; the kernel counts them in clock ticks), one under py-spy's raw stacks (the
share of the event loop's samples under each main step of the produce path), one under py-spy's flamegraph
(one sampler at a time: py-spy pauses the process for each sample).

Usage: .venv/bin/python bench/request_profile.py [--messages 300000] [--out bench/results]
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO / "bench"), str(REPO / "tests")]

from benchkit import logbus_side  # noqa: E402
from paper_benchmark import SIZE  # noqa: E402
from support import BrokerProcess  # noqa: E402

PY_SPY = str(Path(sys.executable).with_name("py-spy"))
# (step, a frame every sample of the step has): the produce path's steps, in the order a request meets them
STEPS = [("read the request header", ";read_header (broker/protocol/codec.py"),
         ("decode the Produce body", ";decode (broker/protocol/produce_request.py"),
         ("admit (topic, leadership, configs)", ";admit (broker/handlers/produce.py"),
         ("batch framing and CRC", ";validate (broker/protocol/records.py"),
         ("record checks", ";check_records (broker/protocol/validation.py"),
         ("log append", ";append (broker/log/log.py"),
         ("encode the response", ";_answer (broker/handlers/produce.py"),
         ("request metrics", ";request (broker/metrics.py")]


def cpu_times(pid: int) -> tuple[float, float]:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / tick, int(fields[12]) / tick


def shares(raw: Path) -> tuple[int, dict[str, float]]:
    """Samples of the event loop's thread (those under ``_run_once``) and each step's share of them."""
    loop = 0
    per_step: Counter = Counter()
    for line in raw.read_text().splitlines():
        stack, count = line.rsplit(" ", 1)
        if "_run_once (asyncio/base_events.py" not in stack:
            continue  # another thread (the stop watchdog waits in select; py-spy may count it)
        loop += int(count)
        for step, frame in STEPS:
            if frame in stack:
                per_step[step] += int(count)
    return loop, {step: per_step[step] / max(loop, 1) for step, _ in STEPS}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--messages", type=int, default=300_000)
    p.add_argument("--out", default=str(REPO / "bench" / "results"))
    args = p.parse_args()
    out = Path(args.out)
    work = Path(tempfile.mkdtemp(prefix="request-profile-"))
    try:
        broker = BrokerProcess(work / "broker", num_partitions=1).start()
        try:
            time.sleep(1)
            logbus_side.produce(broker, "warm", 20_000, SIZE, logbus_side.RUNS["batch1"])
            user0, sys0 = cpu_times(broker.proc.pid)
            plain = logbus_side.produce(broker, "plain", args.messages, SIZE, logbus_side.RUNS["batch1"])
            user1, sys1 = cpu_times(broker.proc.pid)
            raw = work / "stacks.txt"
            profiled = {fmt: profile(broker, fmt, path, args.messages)
                        for fmt, path in (("raw", raw), ("flamegraph", out / "flamegraph_broker_batch1.svg"))}
            loop, step_shares = shares(raw)
        finally:
            broker.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    n = args.messages
    lines = ["# Where a small request's broker CPU goes (issue 20)", "",
             f"Command: `python bench/request_profile.py --messages {n}`  ",
             f"One broker of this tree; {n:,} messages of {SIZE} bytes, one Produce request each (confluent-kafka, "
             "batch.num.messages=1, linger.ms=0, acks=1), three times: plain, then under py-spy (200 Hz) twice, once for "
             "the raw stacks and once for the flamegraph.", "",
             "| run | msg/s | broker user CPU µs per request | broker system CPU µs per request |", "|---|---|---|---|",
             f"| plain | {plain['msg_per_s']:,} | {(user1 - user0) / n * 1e6:.1f} | {(sys1 - sys0) / n * 1e6:.1f} |",
             f"| under py-spy, raw stacks | {profiled['raw']['msg_per_s']:,} | – | – |",
             f"| under py-spy, flamegraph | {profiled['flamegraph']['msg_per_s']:,} | – | – |", "",
             f"Share of the event loop's {loop:,} py-spy samples under each step of the produce path (a step's "
             "samples include what it calls):", "",
             "| step | share |", "|---|---|"]
    lines += [f"| {step} | {share:.1%} |" for step, share in step_shares.items()]
    lines += [f"| the rest: the listener's loop (reading frames, writing answers), the dispatch, the handler's own "
              f"lines | {1 - sum(step_shares.values()):.1%} |", "", "Flamegraph: `flamegraph_broker_batch1.svg`."]
    (out / "request_profile.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


def profile(broker: BrokerProcess, fmt: str, path: Path, messages: int) -> dict:
    """One run of the unbatched producer with py-spy recording the broker in ``fmt`` to ``path``."""
    spy = subprocess.Popen([PY_SPY, "record", "-p", str(broker.proc.pid), "-r", "200", "-f", fmt, "-o", str(path)],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(1)
        return logbus_side.produce(broker, f"profiled-{fmt}", messages, SIZE, logbus_side.RUNS["batch1"])
    finally:
        spy.send_signal(signal.SIGINT)  # py-spy writes its output and exits
        spy.wait(60)


if __name__ == "__main__":
    main()
