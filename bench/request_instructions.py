"""Instructions per unbatched Produce request, two versions side by side (issue 20): a count that does not
depend on how busy the machine is. On this shared 2-core machine the same code's CPU per request varies about
2x from hour to hour; the number of instructions it executes does not (within about 1%).

Each version's broker runs in one process under ``valgrind --tool=cachegrind`` (instruction counts only, no
cache simulation), its listener's ``dispatch`` fed ``N`` one-message Produce v9 requests as librdkafka's
unbatched producer sends them (``bench/benchkit/inproc_produce.py``): no sockets, so this is the request
path's own work (decode, checks, log append with its ``writev``, response, metrics), not the event loop's or
the kernel's. Per request = (instructions with ``N + base`` requests - instructions with ``base``) / ``N``,
minus the harness loop's own per-request instructions (measured the same way with no request handled).
With ``--stages``, each step of the after-version's path is replaced by a constant in turn; the drop in
instructions is that step's cost.

Usage: .venv/bin/python bench/request_instructions.py --before <commit> [--messages 5000] [--rounds 2] [--stages]
(needs valgrind: ``apt-get install -y valgrind``)
"""

from __future__ import annotations

import json
import os
import re
import shutil
import statistics
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO / "bench")]

from benchkit import side_by_side  # noqa: E402
from benchkit.inproc_produce import STAGES  # noqa: E402

BASE = 1000  # requests of the shorter run: start-up and shutdown cancel out in the difference
HARNESS = REPO / "bench" / "benchkit" / "inproc_produce.py"


def instructions(platform_dir: Path, count: int, stage: str = "") -> int:
    env = dict(os.environ, PYTHONHASHSEED="0", LOGBUS_JIT="0")  # same dict layouts every run; numba not loaded
    proc = subprocess.run(["valgrind", "--tool=cachegrind", "--cache-sim=no", "--cachegrind-out-file=/dev/null",
                           sys.executable, str(HARNESS), str(platform_dir), str(count), stage],
                          capture_output=True, text=True, env=env, timeout=1800)
    found = re.search(r"I\s+refs:\s+([\d,]+)", proc.stderr)
    if proc.returncode != 0 or not found:
        raise SystemExit(f"request_instructions: the run under valgrind failed:\n{proc.stderr[-2000:]}")
    return int(found.group(1).replace(",", ""))


def per_request(platform_dir: Path, messages: int, stage: str = "") -> float:
    with ThreadPoolExecutor(2) as pool:  # valgrind runs one thread: the two runs use the two cores
        short, long = pool.map(lambda n: instructions(platform_dir, n, stage), (BASE, BASE + messages))
    return (long - short) / messages


def measure(_work: Path, platform_dir: Path, messages: int) -> dict:
    harness = per_request(platform_dir, messages, "harness")
    return {"instructions_per_request": round(per_request(platform_dir, messages) - harness),
            "harness_per_request": round(harness)}


def write_report(results: dict, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = results["runs"]
    value = {side: [r["instructions_per_request"] for r in runs[side]] for side in ("before", "after")}
    median = {side: statistics.median(v) for side, v in value.items()}
    lines = [
        "# Instructions per unbatched Produce request, before and after (issue 20)", "",
        f"Command: `{results['command']}`  ",
        f"Before: `{results['before']}`; after: `{results['after']}`. Each version's broker in one process under "
        f"`valgrind --tool=cachegrind`, its listener's dispatch fed one-message Produce v9 requests (200-byte value, "
        f"acks=1, one partition) as librdkafka's unbatched producer sends them; per request = the difference between "
        f"runs of {BASE + results['messages']:,} and {BASE:,} requests over {results['messages']:,}, minus the harness "
        f"loop's own. No sockets: the request path's work (decode, checks, log append and its `writev` call, "
        f"response, metrics), not the event loop's or the kernel's. {len(runs['after'])} round(s), alternating.", "",
        "| version | instructions per request (each round) | median |", "|---|---|---|",
        *(f"| {side} | {', '.join(f'{v:,}' for v in value[side])} | {median[side]:,.0f} |" for side in value),
        f"| after / before | | {median['after'] / median['before']:.2f}x |", "",
    ]
    stages = results.get("stages")
    if stages:
        full = stages["full"]
        lines += ["Where the after-version's instructions go (`--stages`: each step replaced by a constant in turn; "
                  "the drop is its cost):", "", "| step | instructions per request | share |", "|---|---|---|"]
        for stage in STAGES:
            cost = full - stages[stage]
            lines.append(f"| {stage} | {cost:,.0f} | {cost / full:.0%} |")
        rest = full - sum(full - stages[s] for s in STAGES)
        lines += [f"| the rest: dispatch, admission, the handler's own lines | {rest:,.0f} | {rest / full:.0%} |",
                  f"| whole path | {full:,.0f} | 100% |", ""]
    lines.append("Plot: `request_instructions.png`.")
    (out / "request_instructions.md").write_text("\n".join(lines) + "\n")
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.bar(["before", "after"], [median["before"], median["after"]], color=["#999999", "#1f77b4"])
    for i, side in enumerate(("before", "after")):
        ax.scatter([i] * len(value[side]), value[side], color="black", s=12, zorder=3)
    ax.set_ylabel("instructions per request")
    ax.set_title(f"Unbatched Produce: {results['before']} vs {results['after'].split()[0]}")
    fig.tight_layout()
    fig.savefig(out / "request_instructions.png", dpi=120)


def main() -> int:
    if shutil.which("valgrind") is None:
        sys.exit("request_instructions: valgrind not found (apt-get install -y valgrind)")
    stages = "--stages" in sys.argv
    if stages:
        sys.argv.remove("--stages")
    code = side_by_side.main("request_instructions", 5000, 200, measure, write_report)
    if stages and code == 0 and "--report-only" not in sys.argv:
        out = Path(side_by_side.parser(5000).parse_args().out)
        results = json.loads((out / "request_instructions.json").read_text())
        messages = results["messages"]
        platform_dir = REPO / "platform"
        harness = per_request(platform_dir, messages, "harness")
        results["stages"] = {"full": per_request(platform_dir, messages) - harness,
                             **{s: per_request(platform_dir, messages, s) - harness for s in STAGES}}
        results["command"] += " --stages"
        (out / "request_instructions.json").write_text(json.dumps(results, indent=1) + "\n")
        write_report(results, out)
        print((out / "request_instructions.md").read_text())
    return code


if __name__ == "__main__":
    sys.exit(main())
