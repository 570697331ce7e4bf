"""The command line of a benchmark that measures in rounds and writes <out>/<name>.{json,md,png}:
``--messages``, ``--rounds``, ``--out`` and ``--report-only`` (rewrite the report from the committed JSON)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Callable

RESULTS = Path(__file__).resolve().parent.parent / "results"


def run(name: str, measure: Callable[[argparse.Namespace], dict], write_report: Callable[[dict, Path], None],
        rounds: int = 5, messages: int = 1_000_000) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--messages", type=int, default=messages)
    p.add_argument("--rounds", type=int, default=rounds)
    p.add_argument("--out", type=Path, default=RESULTS / name)
    p.add_argument("--report-only", action="store_true", help="rewrite the .md and .png from the .json")
    args = p.parse_args()
    args.out = args.out.resolve()
    args.out.mkdir(parents=True, exist_ok=True)
    if args.report_only:
        results = json.loads((args.out / f"{name}.json").read_text())
    else:
        results = measure(args)
        (args.out / f"{name}.json").write_text(json.dumps(results, indent=1) + "\n")
    write_report(results, args.out)
    return 0
