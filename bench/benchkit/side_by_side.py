"""Two versions of the broker side by side in one run: the working tree's ``platform/`` and an earlier commit's
(``git archive``), measured in alternating rounds so that drift on a shared machine hits both alike."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Callable

REPO = Path(__file__).resolve().parents[2]


def parser(messages: int) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser()
    p.add_argument("--report-only", action="store_true", help="rewrite the .md and .png from the .json")
    p.add_argument("--before", help="the commit to compare the working tree with (required unless --report-only)")
    p.add_argument("--messages", type=int, default=messages)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--out", default=str(REPO / "bench" / "results"))
    return p


def short_rev(name: str) -> str:
    return subprocess.run(["git", "rev-parse", "--short", name], cwd=REPO, check=True, capture_output=True,
                          text=True).stdout.strip()


def warm(platform_dir: Path) -> None:
    """Compile an extracted tree's modules and its numba kernels now, as ``scripts/setup`` does for the working
    tree: otherwise the first broker of that tree compiles them in a background thread while it is measured
    (about 2 CPU-seconds here), which made the first "before" round of every side-by-side run slower."""
    env = dict(os.environ, PYTHONPATH=str(platform_dir))
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(platform_dir)], env=env, check=False,
                   capture_output=True)
    subprocess.run([sys.executable, "-m", "broker.protocol.kernels"], env=env, check=False, capture_output=True,
                   cwd=platform_dir)  # an older tree without the kernels: nothing to do


def alternate(before_rev: str, rounds: int, measure: Callable[[Path, Path], dict], prefix: str,
              on_result: Callable[[int, str, dict], None] = lambda *_: None) -> dict[str, list[dict]]:
    """``measure(workdir, platform_dir)`` for "before" (``before_rev``'s platform/) and "after" (this tree's),
    ``rounds`` times each, alternating; {"before": [...], "after": [...]}."""
    work = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        old = work / "before"
        old.mkdir()
        archive = subprocess.run(["git", "archive", before_rev, "platform"], cwd=REPO, check=True,
                                 capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", str(old)], input=archive, check=True)
        warm(old / "platform")
        variants = {"before": old / "platform", "after": REPO / "platform"}
        runs: dict[str, list[dict]] = {name: [] for name in variants}
        for i in range(1, rounds + 1):
            for name, platform_dir in variants.items():
                result = measure(work / f"{name}-{i}", platform_dir)
                runs[name].append(result)
                on_result(i, name, result)
        return runs
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main(name: str, messages: int, message_bytes: int, measure: Callable[[Path, Path, int], dict],
         write_report: Callable[[dict, Path], None]) -> int:
    """The command line of a side-by-side benchmark ``bench/<name>.py``: parse the arguments, run
    ``measure(workdir, platform_dir, messages)`` alternating before and after, write ``<name>.json`` and the
    report (``--report-only``: the report from the committed json)."""
    args = parser(messages=messages).parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.report_only:
        write_report(json.loads((out / f"{name}.json").read_text()), out)
        return 0
    if not args.before:
        sys.exit(f"{name}.py: --before is required")
    before_rev, after_rev = short_rev(args.before), short_rev("HEAD")
    runs = alternate(before_rev, args.rounds, lambda work, tree: measure(work, tree, args.messages),
                     f"logbus-{name}-", lambda i, side, result: print(f"round {i} {side:6} {result}", flush=True))
    results = {"command": f"python bench/{name}.py " + " ".join(sys.argv[1:]), "before": before_rev,
               "after": f"{after_rev} + working tree", "messages": args.messages, "message_bytes": message_bytes,
               "cpus": os.cpu_count(), "runs": runs}
    (out / f"{name}.json").write_text(json.dumps(results, indent=1) + "\n")
    write_report(results, out)
    print((out / f"{name}.md").read_text())
    return 0


def cell(values: list[float], fmt: str) -> str:
    """A report's cell: median [min–max] of repeated runs."""
    return f"{fmt.format(statistics.median(values))} [{fmt.format(min(values))}–{fmt.format(max(values))}]"


def table_rows(runs: dict[str, list[dict]], groups, keys) -> list[str]:
    """Markdown rows ``| group | label | before | after | after / before |`` for every group (a key of each run's
    result) and every ``(key, label, fmt)`` of ``keys``."""
    rows = []
    for group in groups:
        for key, label, fmt in keys:
            before, after = ([r[group][key] for r in runs[side]] for side in ("before", "after"))
            b = statistics.median(before)
            ratio = f"{statistics.median(after) / b:.2f}x" if b else ""
            rows.append(f"| {group} | {label} | {cell(before, fmt)} | {cell(after, fmt)} | {ratio} |")
    return rows
