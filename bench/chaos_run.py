"""The chaos run (tests/e2e/test_whole_topology.py, ``-m chaos``) with more rounds than CI runs, and its report:
a Markdown table and a plot of completeness at the heal and time to recover, per round.

CI runs 3 rounds with faults of at most 60 s. This runs ``--rounds`` (default 12) with WAN cuts of 30-120 s, then
writes ``--report`` (JSON), its ``.md`` table and ``.png`` plot next to it. The exit status is pytest's; the
table is written even when the run failed (it says so).

Usage: .venv/bin/python bench/chaos_run.py [--rounds 12] [--seed N] [--kinds kill-broker,wan-cut,...]
                                           [--max-fault-s 120] [--report bench/results/chaos.json]
       .venv/bin/python bench/chaos_run.py --plot-only   (the table and plot of an existing report)

Equivalent to: LOGBUS_CHAOS_ROUNDS=12 LOGBUS_CHAOS_MAX_FAULT_S=120 LOGBUS_CHAOS_REPORT=bench/results/chaos.json \\
               .venv/bin/python -m pytest -m chaos -s
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def table(report: dict, command: str, outcome: str) -> str:
    lines = [f"# Chaos run — {report.get('finished', '')}", "",
             f"Command: `{command}` — {outcome}", "",
             f"Seed {report['seed']}, {report['rounds']} rounds in {report['duration_s']} s; faults by kind: "
             + ", ".join(f"{k} {v}" for k, v in sorted(report["faults_by_kind"].items())) + ".", "",
             f"Ledger (`acks=all`, idempotent, on live): **{report['acknowledged']:,} records acknowledged, "
             f"{report['lost']} lost, {report['duplicated']} duplicated, {report['out_of_order']} out of order**; "
             f"delivery failures reported to the producer: {report['delivery_failures'] or 'none'}.", "",
             f"Longest time to recover: **{report['longest_recovery_s']} s**. After the last round every window of "
             "the run was 100% at live, offline and (after one load DAG run) the warehouse.", "",
             "| round | fault | target | fault (s) | recovered in (s) | lowest completeness seen: live / "
             "offline (%) | details |", "|---:|---|---|---:|---:|---|---|"]
    for r in report["round_details"]:
        dip = r["lowest_completeness"]
        dips = " / ".join("–" if dip[t] is None else f"{dip[t]:g}" for t in ("live", "offline"))
        details = ", ".join(f"{k} {v}" for k, v in r.items() if k not in (
            "round", "kind", "target", "fault_s", "recovery_s", "lowest_completeness", "completeness_after",
            "acknowledged", "run_id"))
        lines.append(f"| {r['round']} | {r['kind']} | {r['target']} | {r['fault_s']} | {r['recovery_s']} | {dips} "
                     f"| {details} |")
    lines += ["", "Lowest completeness seen: of the windows closed since the fault, sampled every 2 s until the "
              "round recovered (the dip; \"–\": none closed and reported in time); recovered: every service healthy, "
              "the ledger acknowledged again and every window since the fault 100% at live and offline; the time to "
              "recover counts from the heal (a kill heals at once: the supervisor restarts the process).", ""]
    return "\n".join(lines)


def plot(report: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rounds = report["round_details"]
    xs = [r["round"] for r in rounds]
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(9, 6), sharex=True)
    for tier, marker in (("live", "o"), ("offline", "s")):
        ys = [r["lowest_completeness"][tier] for r in rounds]
        top.plot([x for x, y in zip(xs, ys) if y is not None], [y for y in ys if y is not None], marker,
                 label=f"{tier}: lowest seen in the round")
    after = [min((v for v in r["completeness_after"].values() if v is not None), default=None) for r in rounds]
    top.plot([x for x, y in zip(xs, after) if y is not None], [y for y in after if y is not None], "g^-",
             label="lowest after recovery (both tiers)")
    top.set_ylabel("window completeness (%)")
    top.set_ylim(-5, 105)
    top.legend(loc="lower left", fontsize=8)
    bottom.bar(xs, [r["recovery_s"] for r in rounds], color="tab:orange")
    for r in rounds:
        bottom.annotate(r["kind"], (r["round"], r["recovery_s"]), ha="center", va="bottom", fontsize=7,
                        rotation=60)
    bottom.set_ylabel("time to recover (s)")
    bottom.set_xlabel("round")
    bottom.set_xticks(xs)
    fig.suptitle(f"logbus chaos run: {report['rounds']} rounds, {report['acknowledged']:,} acknowledged, "
                 f"{report['lost']} lost")
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--seed", type=int)
    parser.add_argument("--kinds", help="comma-separated fault kinds (default: all, see tests/chaos.py)")
    parser.add_argument("--max-fault-s", type=float, default=120, help="longest WAN cut (s)")
    parser.add_argument("--report", default=str(REPO / "bench/results/chaos.json"))
    parser.add_argument("--plot-only", action="store_true")
    args = parser.parse_args()
    report_path = Path(args.report).resolve()
    command = " ".join([".venv/bin/python bench/chaos_run.py", *sys.argv[1:]])
    code = 0
    if not args.plot_only:
        env = dict(os.environ, LOGBUS_CHAOS_ROUNDS=str(args.rounds), LOGBUS_CHAOS_MAX_FAULT_S=str(args.max_fault_s),
                   LOGBUS_CHAOS_REPORT=str(report_path))
        if args.seed is not None:
            env["LOGBUS_CHAOS_SEED"] = str(args.seed)
        if args.kinds:
            env["LOGBUS_CHAOS_KINDS"] = args.kinds
        started = time.time()
        code = subprocess.call([sys.executable, "-m", "pytest", "-m", "chaos", "-s", "-p", "no:cacheprovider"],
                               cwd=REPO, env=env)
        if not report_path.exists() or report_path.stat().st_mtime < started:
            print(f"the run wrote no report (pytest exit {code})", file=sys.stderr)
            return code or 1
        report = json.loads(report_path.read_text())
        report.update(finished=datetime.datetime.now().strftime("%Y-%m-%d %H:%M"), command=command,
                      outcome="passed" if code == 0 else f"FAILED (pytest exit {code})")
        report_path.write_text(json.dumps(report, indent=1) + "\n")
    report = json.loads(report_path.read_text())
    report_path.with_suffix(".md").write_text(table(report, report.get("command", "(not recorded)"),
                                                    report.get("outcome", "outcome not recorded")))
    plot(report, report_path.with_suffix(".png"))
    print(report_path.with_suffix(".md").read_text())
    return code


if __name__ == "__main__":
    sys.exit(main())
