"""The broker fuzz test (tests/integration/test_fuzz.py), run longer than CI runs it.

It is the same test with other settings: more generated cases and no time budget, another hypothesis seed, or
the diagnostic mode that restarts the broker after a crash or hang and lists every distinct failure with its
shortest frame. The summary JSON goes to --report; the exit status is pytest's.

Usage: .venv/bin/python bench/fuzz_run.py [--examples 20000] [--seconds 0] [--seed N] [--collect] [--no-seeds]
                                          [--report bench/results/fuzz.json]

Equivalent to: LOGBUS_FUZZ_EXAMPLES=20000 LOGBUS_FUZZ_REPORT=bench/results/fuzz.json \\
               .venv/bin/python -m pytest tests/integration/test_fuzz.py -s
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=20000, help="generated cases (default 20000)")
    parser.add_argument("--seconds", type=float, default=0, help="time budget of the generated cases, 0: none")
    parser.add_argument("--seed", type=int, help="hypothesis seed (default: derandomized, the CI cases)")
    parser.add_argument("--collect", action="store_true",
                        help="restart the broker after a crash or hang and go on: list every distinct failure")
    parser.add_argument("--no-seeds", action="store_true", help="skip the hand-written seed cases")
    parser.add_argument("--report", default=str(REPO / "bench/results/fuzz.json"), help="summary JSON path")
    args = parser.parse_args()

    env = dict(os.environ, LOGBUS_FUZZ_EXAMPLES=str(args.examples), LOGBUS_FUZZ_SECONDS=str(args.seconds),
               LOGBUS_FUZZ_REPORT=str(Path(args.report).resolve()))
    if args.seed is not None:
        env["LOGBUS_FUZZ_SEED"] = str(args.seed)
    if args.collect:
        env["LOGBUS_FUZZ_COLLECT"] = "1"
    if args.no_seeds:
        env["LOGBUS_FUZZ_SEEDS"] = "0"
    code = subprocess.call([sys.executable, "-m", "pytest", "tests/integration/test_fuzz.py", "-q", "-s",
                            "-p", "no:cacheprovider"], cwd=REPO, env=env)
    report = Path(args.report)
    if report.exists():
        summary = json.loads(report.read_text())
        print(f"\n{summary['cases']} cases in {summary['duration_s']} s: {summary['crashes']} crash(es), "
              f"{summary['fatal_findings']} distinct finding(s), longest stall {summary['longest_stall_ms']} ms, "
              f"peak RSS {summary['peak_rss_mb']} MB; summary in {report}")
        for finding in summary["findings"]:
            print(f"  [{finding['kind']}] x{finding['count']}: {finding['detail'][:160]}\n"
                  f"      {finding['case'][:160]}\n      frame: {finding['frame_hex'][:240]}")
    return code


if __name__ == "__main__":
    sys.exit(main())
