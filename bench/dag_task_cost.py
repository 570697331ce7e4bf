"""What the load DAG's ``plan`` and ``reconcile`` tasks cost with and without a Spark session (file:// warehouse).

Setup: one standalone broker, the schema registry, --messages audited Avro records (4 partitions, 1 s audit
windows), one load published through a Spark session (so the warehouse holds what the Hadoop path writes,
checksum side files included), then --messages records of a second topic (so ``plan`` has ranges to cut).

Each measured task runs in a fresh Python process, as an Airflow task does: imports, the step, exit. Variants,
alternated run by run:
  - ``spark``: a Spark session on ``local[1]`` (the DAG's ``load.driver.master`` default) around the step, the way
    the tasks ran before (``Warehouse`` on Hadoop's FileSystem, the report's Parquet by ``createDataFrame``);
  - ``files``: no session (``Warehouse`` on plain files, the report's Parquet by pyarrow), the way they run now.
Wall time of the process, and its CPU time with its children's (the JVM is waited for). The ``spark`` variant's
report Parquet goes through :func:`legacy_report_parquet` (the code that wrote it before), the rest is the same.

Usage: .venv/bin/python bench/dag_task_cost.py [--messages 20000] [--runs 5]
Writes bench/results/dag_task_cost.{json,md,png}.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO / "tests"), str(REPO / "platform"), str(REPO), str(REPO / "bench")]


def child(task: str, variant: str, config_path: str) -> None:
    """One task in this process; prints {"cpu_s": ...} (self and waited-for children) as its last line."""
    from spark_jobs import load as cycle
    from spark_jobs.config import LoadConfig

    config = LoadConfig.load(config_path)
    spark = None
    if variant == "spark":
        spark = cycle.session(config, config.driver_master)
        cycle.write_report_parquet = legacy_report_parquet(spark)
    try:
        if task == "plan":
            out = cycle.plan_step(spark, config, say=lambda line: None)
            assert out["ranges"], out
        else:
            out = cycle.reconcile_step(spark, config, say=lambda line: None)
            assert out["rows"], "an empty report"
    finally:
        if spark is not None:
            from pyspark import SparkContext

            spark.stop()
            gateway = SparkContext._gateway
            proc = getattr(gateway, "proc", None)
            gateway.shutdown()
            if proc is not None:
                proc.terminate()
                proc.wait(60)
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    print(json.dumps({"cpu_s": me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime}))


def legacy_report_parquet(spark):
    """The report's Parquet as the reconcile task wrote it before (a Spark job on the session)."""
    def write(wh, rows):
        flat = [{**{k: v for k, v in r.items() if k != "missing_sequences"},
                 "missing_sequences": json.dumps(r["missing_sequences"])} for r in rows]
        spark.createDataFrame(flat).coalesce(1).write.mode("overwrite").parquet(wh.path("_audit", "report.parquet"))
    return write


def run_child(task: str, variant: str, config: Path) -> dict:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO / "platform"), str(REPO)]))
    t = time.perf_counter()
    out = subprocess.run([sys.executable, __file__, "--child", task, variant, str(config)], capture_output=True,
                         text=True, env=env, timeout=600)
    wall = time.perf_counter() - t
    if out.returncode != 0:
        raise RuntimeError(f"{task}/{variant} failed: {out.stderr[-3000:]}")
    return {"wall_s": round(wall, 2), **json.loads(out.stdout.strip().splitlines()[-1])}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--messages", type=int, default=20000)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--out", default=str(REPO / "bench" / "results"))
    ap.add_argument("--child", nargs=3, metavar=("TASK", "VARIANT", "CONFIG"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(*args.child)
        return 0

    from load_benchmark import produce
    from support import BrokerProcess, RegistryProcess

    root = Path(tempfile.mkdtemp(prefix="logbus-dag-task-cost-"))
    broker = registry = None
    try:
        broker = BrokerProcess(root / "broker").start()
        registry = RegistryProcess(root / "registry", broker.bootstrap).start()
        produce(broker.bootstrap, registry.url, "pageviews", args.messages)
        config = root / "load.properties"
        config.write_text(f"bootstrap.servers={broker.bootstrap}\nschema.registry.url={registry.url}\n"
                          f"warehouse.path={(root / 'wh').as_uri()}\ntopics=pageviews,clicks\nspark.master=local[2]\n"
                          f"audit.window.ms=1000\naudit.grace.ms=0\naudit.tiers=offline,warehouse\n"
                          f"audit.cluster.offline.bootstrap.servers={broker.bootstrap}\n")
        loaded = subprocess.run([sys.executable, "-m", "logbus.cli", "load", "--config", str(config)],
                                capture_output=True, text=True, timeout=900,
                                env=dict(os.environ, PYTHONPATH=str(REPO / "platform")))
        assert loaded.returncode == 0, loaded.stderr[-3000:]
        produce(broker.bootstrap, registry.url, "clicks", args.messages)
        results: dict[str, dict[str, list[dict]]] = {}
        stat0 = cpu_ticks()
        for run in range(args.runs):
            order = ("spark", "files") if run % 2 == 0 else ("files", "spark")
            for task in ("plan", "reconcile"):
                for variant in order:
                    got = run_child(task, variant, config)
                    results.setdefault(task, {}).setdefault(variant, []).append(got)
                    print(f"run {run}: {task} {variant} {got}", flush=True)
    finally:
        for proc in (registry, broker):
            if proc is not None:
                proc.stop()
        shutil.rmtree(root, ignore_errors=True)
    stat1 = cpu_ticks()
    total = sum(stat1) - sum(stat0)
    busy = sum(stat1[:3]) + sum(stat1[5:7]) - sum(stat0[:3]) - sum(stat0[5:7])  # user nice system irq softirq
    machine = (f"{os.cpu_count()} cores; during the runs {100 * busy / total:.0f}% busy, "
               f"{100 * (stat1[7] - stat0[7]) / total:.0f}% steal (/proc/stat)")
    summary = {task: {variant: {"wall_s": statistics.median(r["wall_s"] for r in runs),
                                "cpu_s": round(statistics.median(r["cpu_s"] for r in runs), 2)}
                      for variant, runs in by.items()} for task, by in results.items()}
    out = Path(args.out)
    command = f".venv/bin/python bench/dag_task_cost.py --messages {args.messages} --runs {args.runs}"
    (out / "dag_task_cost.json").write_text(json.dumps({"command": command, "machine": machine,
                                                        "summary": summary, "runs": results}, indent=1) + "\n")
    lines = ["# The load DAG's plan and reconcile tasks with and without a Spark session", "",
             f"`{command}`, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; {machine}", "",
             "Each task in a fresh Python process (as an Airflow task), file:// warehouse; medians of "
             f"{args.runs} runs, variants alternated.", "",
             "| task | Spark session on local[1] (before) | no session, plain files (now) | wall ratio |",
             "|---|---|---|---|"]
    for task, by in summary.items():
        s, f = by["spark"], by["files"]
        lines.append(f"| {task} | {s['wall_s']:.2f} s wall, {s['cpu_s']:.2f} CPU-s | {f['wall_s']:.2f} s wall, "
                     f"{f['cpu_s']:.2f} CPU-s | {s['wall_s'] / f['wall_s']:.1f}x |")
    (out / "dag_task_cost.md").write_text("\n".join(lines) + "\n")
    plot(summary, out / "dag_task_cost.png")
    print("\n".join(lines))
    return 0


def cpu_ticks() -> list[int]:
    with open("/proc/stat") as f:
        return [int(x) for x in f.readline().split()[1:9]]


def plot(summary: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(9, 3.5))
    for ax, metric, label in ((axes[0], "wall_s", "wall time (s)"), (axes[1], "cpu_s", "CPU time (s)")):
        tasks = list(summary)
        xs = range(len(tasks))
        ax.bar([x - 0.2 for x in xs], [summary[t]["spark"][metric] for t in tasks], 0.4, label="Spark session")
        ax.bar([x + 0.2 for x in xs], [summary[t]["files"][metric] for t in tasks], 0.4, label="plain files")
        ax.set_xticks(list(xs), tasks)
        ax.set_ylabel(label)
    axes[0].legend()
    fig.suptitle("load DAG tasks, file:// warehouse (median per task process)")
    fig.tight_layout()
    fig.savefig(path, dpi=100)


if __name__ == "__main__":
    sys.exit(main())
