"""The broker's cost per small request under two Python interpreters, side by side (issue 20).

The same code (this tree's ``platform/``) and the same producers as ``bench/request_cost.py`` (confluent-kafka,
200-byte messages, acks=1, one partition; batch 1 = one Produce request per message, and batch 50), with the broker
run by this checkout's ``.venv`` interpreter and by another one (``--other``), alternating in the same run. It
tells what ``scripts/setup``'s choice of interpreter is worth: on this machine kind the first ``python3`` on PATH is
a pyenv build (``./configure --enable-shared`` without ``--enable-optimizations``), and Debian's own
``/usr/bin/python3`` is the other candidate.

The other interpreter gets its own venv with the broker's dependencies (``pyproject.toml``'s ``dependencies``,
pinned), made under ``bench/work/`` on first use and reused afterwards.

Usage: .venv/bin/python bench/interpreter_cost.py --other /root/.pyenv/versions/3.11.7/bin/python3
       [--messages 200000] [--rounds 3] [--out bench/results]   (--report-only: the report from the json)
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO / "bench"), str(REPO / "tests")]

from benchkit import side_by_side  # noqa: E402
from paper_benchmark import SIZE  # noqa: E402
from request_cost import PRODUCERS, measure  # noqa: E402

_DESCRIBE = ("import json, sys, sysconfig; print(json.dumps({'version': sys.version.split()[0], "
             "'base_prefix': sys.base_prefix, 'configure': sysconfig.get_config_var('CONFIG_ARGS')}))")


def describe(python: str) -> dict:
    info = json.loads(subprocess.run([python, "-c", _DESCRIBE], check=True, capture_output=True, text=True).stdout)
    info["executable"] = python
    info["optimizations"] = "--enable-optimizations" in (info["configure"] or "")
    real = os.path.realpath(python)
    linked = subprocess.run(["ldd", real], capture_output=True, text=True).stdout
    info["shared_libpython"] = "libpython" in linked  # the interpreter calls into libpython3.x.so (-fPIC code)
    return info


def venv_for(interpreter: str) -> str:
    """A venv of ``interpreter`` with the broker's pinned dependencies (made once, under bench/work/)."""
    base = describe(interpreter)["base_prefix"]
    deps = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    key = hashlib.sha256((base + "\n" + "\n".join(deps)).encode()).hexdigest()[:12]
    venv = REPO / "bench" / "work" / f"venv-{key}"
    python = venv / "bin" / "python"
    if not (venv / ".ready").exists():
        subprocess.run([interpreter, "-m", "venv", "--clear", str(venv)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", *deps], check=True)
        (venv / ".ready").touch()
    return str(python)


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--other", help="the interpreter to compare .venv's with (required unless --report-only)")
    p.add_argument("--messages", type=int, default=200_000)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--out", default=str(REPO / "bench" / "results"))
    p.add_argument("--report-only", action="store_true")
    args = p.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.report_only:
        write_report(json.loads((out / "interpreter_cost.json").read_text()), out)
        return 0
    if not args.other:
        sys.exit("interpreter_cost.py: --other is required")
    pythons = {"other": venv_for(args.other), "venv": sys.executable}
    platform_dir = REPO / "platform"
    side_by_side.warm(platform_dir)
    runs: dict[str, list[dict]] = {name: [] for name in pythons}
    with tempfile.TemporaryDirectory(prefix="logbus-interpreter-cost-") as work:
        for i in range(1, args.rounds + 1):
            for name, python in pythons.items():
                result = measure(Path(work) / f"{name}-{i}", platform_dir, args.messages, python)
                runs[name].append(result)
                print(f"round {i} {name:6} {result}", flush=True)
    results = {"command": "python bench/interpreter_cost.py " + " ".join(sys.argv[1:]),
               "commit": side_by_side.short_rev("HEAD") + " + working tree", "messages": args.messages,
               "message_bytes": SIZE, "cpus": os.cpu_count(),
               "interpreters": {"other": describe(args.other), "venv": describe(sys.executable)},
               # the table's columns: "before" = the other interpreter, "after" = .venv's
               "runs": {"before": runs["other"], "after": runs["venv"]}}
    (out / "interpreter_cost.json").write_text(json.dumps(results, indent=1) + "\n")
    write_report(results, out)
    print((out / "interpreter_cost.md").read_text())
    return 0


def write_report(results: dict, out: Path) -> None:
    runs = results["runs"]
    other, venv = results["interpreters"]["other"], results["interpreters"]["venv"]

    def name(info: dict) -> str:
        linked = "its executable linked to libpython3.11.so" if info["shared_libpython"] else \
            "its executable statically linked (libpython built in)"
        build = "; configured with --enable-optimizations" if info["optimizations"] else ""
        return f"Python {info['version']} of `{info['base_prefix']}` ({linked}{build})"

    keys = [("msg_per_s", "msg/s", "{:,.0f}"), ("msgs_per_request", "messages per Produce request", "{:.2f}"),
            ("broker_cpu_us_per_request", "broker CPU µs per request", "{:.1f}")]
    lines = [
        "# Broker CPU per small request under two Python interpreters (issue 20)",
        "",
        f"Command: `{results['command']}`  ",
        f"Code: `{results['commit']}` for both. Other: {name(other)}; .venv: {name(venv)}. "
        f"{results['messages']:,} messages of {results['message_bytes']} bytes per run from confluent-kafka, acks=1, "
        f"one partition (batch 1: one Produce request per message; batch 50), as `bench/request_cost.py`. "
        f"{len(runs['after'])} rounds, the two alternating in the same run on this {results['cpus']}-core machine. "
        "Cells: median [min–max].",
        "",
        "| producer | measure | other interpreter | .venv's interpreter | .venv / other |",
        "|---|---|---|---|---|",
    ]
    lines += side_by_side.table_rows(runs, PRODUCERS, keys)
    lines += ["", "Plot: `interpreter_cost.png` (broker CPU µs per request and msg/s of every run).", ""]
    (out / "interpreter_cost.md").write_text("\n".join(lines))

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    labels = [f"other\n{other['version']} ({other['base_prefix']})", f".venv\n{venv['version']} ({venv['base_prefix']})"]
    for ax, (key, label) in zip(axes, (("broker_cpu_us_per_request", "broker CPU µs per Produce request, batch 1"),
                                       ("msg_per_s", "unbatched produce (batch 1), msg/s"))):
        for x, side in enumerate(("before", "after")):
            vals = [r["batch1"][key] for r in runs[side]]
            ax.scatter([x] * len(vals), vals)
            ax.hlines(statistics.median(vals), x - 0.2, x + 0.2)
        ax.set_xticks([0, 1], labels)
        ax.set_title(label)
        ax.set_ylim(bottom=0)
    fig.tight_layout()
    fig.savefig(out / "interpreter_cost.png", dpi=100)


if __name__ == "__main__":
    sys.exit(main())
