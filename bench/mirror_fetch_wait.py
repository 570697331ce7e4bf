"""What the default topology's mirror fetch wait saves the whole pipeline (issue 20), side by side.

The topologies give the mirror's fetches ``fetch.min.bytes=262144`` and ``fetch.wait.max.ms=100``
(``mirror_fetch_min_bytes`` / ``mirror_fetch_wait_max_ms``): a fetch is answered once 256 KB are there or 100 ms
have passed, so light traffic is copied in fewer, larger cycles, each a Produce per offline leader plus the
follower fetches it wakes. ``off`` is the mirror as it ran before: answered at the first byte (``fetch.min.bytes=1``,
librdkafka's default), at most 100 ms (the batch path's own default wait).

Each round runs ``bench/pipeline_benchmark.py`` once per variant (the variants' order alternating between rounds),
``--rates`` each for ``--step-seconds``, no warehouse load, and keeps its steps: the CPU of every service and of the
benchmark's producers, and the requests the brokers answered by API. Cells: median [min–max] over the rounds.

Usage: .venv/bin/python bench/mirror_fetch_wait.py [--rates 20000,40000] [--step-seconds 30] [--rounds 3]
       [--out bench/results/mirror_fetch_wait] [--md-only]
Results: <out>/mirror_fetch_wait.{json,md,png}
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
VARIANTS = {"on": [], "off": ["--dc-setting", "offline.mirror_fetch_min_bytes=1"]}
GROUPS = {"all services + producers": lambda n: True, "live brokers": lambda n: n.startswith("live-broker"),
          "offline brokers": lambda n: n.startswith("offline-broker"), "mirror": lambda n: "mirror" in n,
          "producers": lambda n: n == "bench producers"}


def one_run(variant: str, args, work: Path) -> dict:
    out = work / variant
    cmd = [sys.executable, str(REPO / "bench" / "pipeline_benchmark.py"), "--rates", args.rates, "--step-seconds",
           str(args.step_seconds), "--warmup", "10", "--no-warehouse", "--keep-going", "--out", str(out),
           *VARIANTS[variant]]
    subprocess.run(cmd, check=True, timeout=1800, stdout=subprocess.DEVNULL)
    result = json.loads((out / "pipeline_benchmark.json").read_text())
    steps = {}
    for s in result["steps"]:
        cpu = s.get("cpu_cores", {})
        steps[str(s["rate"])] = {
            "cores": {g: round(sum(v for n, v in cpu.items() if match(n)), 2) for g, match in GROUPS.items()},
            "machine_cores": s.get("machine_cores"), "requests_per_s": s.get("requests_per_s", {}),
            "sent": s["rates"].get("producers"), "carried": s["carried"], "mirror_lag_max": s.get("mirror_lag_max")}
    return {"variant": variant, "code": result["settings"]["code"], "steps": steps}


def cell(values: list[float], spec: str = "{:.2f}") -> str:
    if not values:
        return "–"
    return f"{spec.format(statistics.median(values))} [{spec.format(min(values))}–{spec.format(max(values))}]"


def write(results: dict, out: Path) -> None:
    runs = results["runs"]
    code = runs[0]["code"]
    lines = ["# The mirror's fetch wait, side by side in the whole pipeline (issue 20)", "",
             f"Command: `{results['command']}`; code: commit {code['head']}"
             f"{' with uncommitted changes' if code.get('uncommitted') else ''}. `on`: the topology's mirror fetches wait for "
             "256 KB or 100 ms; `off`: as before, answered at the first byte (1 byte; 100 ms at most). The extra wait "
             "of a copy is not measured here (see `bench/mirror_benchmark.py`'s exactly-once-wait mode). Each round runs "
             "`bench/pipeline_benchmark.py` once per variant (order alternating), no warehouse load; cores: process "
             "trees' CPU over a step (1.0 = one core; the machine has 2). Cells: median [min–max] over "
             f"{results['rounds']} rounds.", "",
             "| offered msg/s | mirror fetch wait | all services + producers, cores | live brokers | offline brokers "
             "| mirror | producers | offline Produce/s | offline Fetch/s | steps carried |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for rate in results["rates"]:
        for variant in VARIANTS:
            steps = [r["steps"][rate] for r in runs if r["variant"] == variant and rate in r["steps"]]
            req = [s["requests_per_s"].get("offline", {}) for s in steps]
            lines.append(f"| {int(rate):,} | {variant} | "
                         + " | ".join(cell([s["cores"][g] for s in steps]) for g in GROUPS)
                         + f" | {cell([r.get('Produce', 0) for r in req], '{:.0f}')}"
                         f" | {cell([r.get('Fetch', 0) for r in req], '{:.0f}')}"
                         f" | {sum(s['carried'] for s in steps)} / {len(steps)} |")
    lines.append("")
    for rate in results["rates"]:
        pairs = []
        for i in range(results["rounds"]):
            on = [r for r in runs if r["variant"] == "on" and r["round"] == i and rate in r["steps"]]
            off = [r for r in runs if r["variant"] == "off" and r["round"] == i and rate in r["steps"]]
            if on and off:
                pairs.append(on[0]["steps"][rate]["cores"]["all services + producers"]
                             / off[0]["steps"][rate]["cores"]["all services + producers"])
        if pairs:
            lines.append(f"At {int(rate):,} msg/s, all services and producers with the wait over without, round by "
                         f"round: {', '.join(f'{p:.2f}x' for p in pairs)} (median {statistics.median(pairs):.2f}x).")
    lines += ["", "Plot: `mirror_fetch_wait.png`.", ""]
    out.mkdir(parents=True, exist_ok=True)
    (out / "mirror_fetch_wait.md").write_text("\n".join(lines))
    (out / "mirror_fetch_wait.json").write_text(json.dumps(results, indent=1) + "\n")
    plot(results, out / "mirror_fetch_wait.png")


def plot(results: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups = ["live brokers", "offline brokers", "mirror", "producers"]
    labels, bottoms = [], []
    fig, ax = plt.subplots(figsize=(8, 4.5))
    x = 0
    for rate in results["rates"]:
        for variant in VARIANTS:
            steps = [r["steps"][rate] for r in results["runs"] if r["variant"] == variant and rate in r["steps"]]
            base = 0.0
            for i, g in enumerate(groups):
                v = statistics.median([s["cores"][g] for s in steps]) if steps else 0.0
                ax.bar(x, v, bottom=base, color=f"C{i}", label=g if x == 0 else None)
                base += v
            total = statistics.median([s["cores"]["all services + producers"] for s in steps]) if steps else 0.0
            ax.bar(x, total - base, bottom=base, color="lightgrey", label="other services" if x == 0 else None)
            labels.append(f"{int(rate) // 1000}k\n{variant}")
            bottoms.append(x)
            x += 1
        x += 0.5
    ax.set_xticks(bottoms, labels)
    ax.set_ylabel("cores (median over rounds)")
    ax.set_title("Whole pipeline CPU with and without the mirror's fetch wait")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rates", default="20000,40000")
    parser.add_argument("--step-seconds", type=float, default=30)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", default=str(REPO / "bench" / "results" / "mirror_fetch_wait"))
    parser.add_argument("--md-only", action="store_true", help="the .md and .png again from the .json")
    args = parser.parse_args()
    if args.md_only:
        out = Path(args.out)
        write(json.loads((out / "mirror_fetch_wait.json").read_text()), out)
        return 0
    command = " ".join([".venv/bin/python bench/mirror_fetch_wait.py", *sys.argv[1:]])
    results = {"command": command, "rates": args.rates.split(","), "rounds": args.rounds, "runs": []}
    for i in range(args.rounds):
        for variant in (list(VARIANTS) if i % 2 == 0 else list(VARIANTS)[::-1]):
            with tempfile.TemporaryDirectory(prefix="logbus-mirror-fetch-wait-") as tmp:
                run = one_run(variant, args, Path(tmp))
            run["round"] = i
            results["runs"].append(run)
            print(f"round {i} {variant}: " + "; ".join(
                f"{rate}: {s['cores']['all services + producers']} cores" for rate, s in run["steps"].items()),
                flush=True)
            write(results, Path(args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
