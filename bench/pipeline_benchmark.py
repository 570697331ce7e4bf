"""The whole pipeline's throughput (issue 20): the highest sustained producer rate the default topology carries from
live through the mirror and offline to the warehouse, with the audit on and every closed window 100% at every tier
within the grace period; the stage that falls behind first; each stage's rate over time.

How it runs:

1. ``logbus up --topology <copy> --state-dir <tmp>`` of ``topology/default.json`` on loopback networks of its own
   (127.N.1 / 127.N.2) with free ports, as the e2e test prepares its copy (``tests/topology_checks.fresh_loopback``).
   Changed in the copy, nothing else: audit windows ``--window-ms`` (5 s) with grace ``--grace-ms`` (10 s) and the
   counters emitting every second (the default 60 s / 120 s windows would give one window per step), the demo
   frontends off (the offered rate is the ladder's alone), the load DAG's schedule off (the warehouse is measured
   after the ladder, see 5). ``--dc-setting DC.KEY=JSON`` changes more (for side-by-side runs of a setting).
2. ``--producers`` producer processes (this file, ``--worker``) each run an ``AuditedProducer`` (the frontends'
   client: audit headers, per-window monitoring events to ``_audit``; ``acks=all``, idempotent, ``linger.ms=20``)
   sending Avro page views (the demo's schema, registered in the live registry; 512 distinct values serialized once
   so that producing costs no Avro encoding per record) to ``page-views`` (3 partitions, RF 3), paced together to
   the offered rate: a warm-up at the ladder's first rate, then each rate of ``--rates`` for ``--step-seconds`` (a
   step function of time). A producer that falls behind catches up at most 1 s of its schedule; the rest counts as
   not sent (its achieved rate is in the table).
3. Every ``--sample-seconds``: the producers' sent counts, the high watermarks of ``page-views`` on live and
   offline (ListOffsets; offline's include the exactly-once mirror's transaction markers, a few per second), the
   mirror's ``/metrics`` (records copied, lag), both audit counters' ``/metrics`` (records counted), the audit
   service's ``/api/report?topic=page-views`` (per window and tier: the first sample at which it was 100%), and the
   CPU time of every service's process tree.
4. A step is **carried** when (a) every audit window of the step (a window belongs to the step its end falls in)
   was seen 100% at the ``live`` and ``offline`` tiers no later than its end + grace (seen at a sample: up to
   ``--sample-seconds`` late), (b) the mirror's lag stayed bounded: it grew by at most one second of the offered
   traffic from the step's start (after its first 5 s) to its end, and was not still growing at the end (its
   least-squares slope over the step's second half below 2% of the offered rate, or the lag under 1 s of traffic),
   and (c) the producers sent at least 95% of the offered records. The ladder stops after the first step that is not carried (the producers stop, the
   pipeline drains). The result is the highest carried rate; the **bottleneck** is the first stage, in pipeline
   order, whose rate during the first failed step falls below 95% of the offered rate, whose lag grows, or whose
   tier's windows were late.
5. The warehouse: after the ladder and the drain, one ``logbus_load`` run triggered through Airflow's REST API (as
   the e2e test) loads everything produced. Its rows against the audit's expected counts, the load's own rate (rows
   / seconds of its load task: read, decode, write Parquet, publish) and the report's warehouse tier (every window
   closed before the load's cut 100%). A periodic batch load is never "within the grace period" of a 5 s window;
   it keeps up when its rate exceeds the rate it must load, which is what the table compares.
6. ``logbus down``; the run fails if any process carrying the state directory is left.

Writes ``<out>/pipeline_benchmark.{md,json,png}``.

Usage: .venv/bin/python bench/pipeline_benchmark.py [--rates 1000,2000,5000,10000,14000,20000,28000,40000,56000,80000]
                                                    [--step-seconds 30]
                                                    [--producers 2] [--window-ms 5000] [--grace-ms 10000]
                                                    [--no-warehouse] [--out bench/results]
       .venv/bin/python bench/pipeline_benchmark.py --md-only      (the .md and .png again from the .json)
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO / "platform"), str(REPO / "tests"), str(REPO / "bench")]
from benchkit.pipeline_judging import bottleneck, judge_step, rejudge  # noqa: E402
from benchkit.pipeline_producer import worker  # noqa: E402
from benchkit.pipeline_report import NAME, write  # noqa: E402
from benchkit.pipeline_sampling import Sampler  # noqa: E402
from benchkit.pipeline_stages import PARTITIONS, TOPIC  # noqa: E402
from benchkit.pipeline_warehouse import measure_warehouse  # noqa: E402
from benchkit.topology_run import down_and_sweep, logbus  # noqa: E402


# ---------------------------------------------------------------------------------------------------- the run
def code_state() -> dict:
    """The commit the run's code is at and the files under platform/ and spark_jobs/ that differ from it (others may
    be changing them in this checkout: the run measures the working tree)."""
    def git(*a):
        return subprocess.run(["git", *a], cwd=REPO, capture_output=True, text=True).stdout

    return {"head": git("rev-parse", "--short", "HEAD").strip(),
            "uncommitted": [line[3:] for line in git("status", "--short", "--", "platform", "spark_jobs").splitlines()
                            if line.strip()]}


def healthy_status(state: Path) -> dict | None:
    out = logbus("status", "--json", "--state-dir", str(state), timeout=120)
    try:
        status = json.loads(out.stdout)
    except ValueError:
        return None
    return status if status["healthy"] else None


def run(args, out: Path, command: str) -> int:
    from support import wait_until
    from topology_checks import fresh_loopback
    from logbus.topology import TopologyError, check_keys

    topo = json.loads((REPO / "topology" / "default.json").read_text())
    net = fresh_loopback(topo)
    topo.update({"audit_window_ms": args.window_ms, "audit_grace_ms": args.grace_ms, "audit_emit_interval_ms": 1000,
                 "load_schedule": "none"})
    topo["datacenters"]["live"]["frontends"] = 0
    for setting in args.dc_setting:  # e.g. offline.mirror_fetch_min_bytes=1 (a value in JSON)
        where, _, value = setting.partition("=")
        dc, _, key = where.partition(".")
        if dc not in topo["datacenters"] or not key or not value:
            raise SystemExit(f"pipeline_benchmark: --dc-setting wants DC.KEY=JSON with a datacenter of the topology, "
                             f"not {setting!r}")
        topo["datacenters"][dc][key] = json.loads(value)
    try:
        check_keys(topo)  # a misspelt --dc-setting key is refused here, not run as the default
    except TopologyError as exc:
        raise SystemExit(f"pipeline_benchmark: {exc}") from None
    rates = [int(r) for r in args.rates.split(",")]
    results: dict = {"command": command, "outcome": "failed", "started": datetime.datetime.now().isoformat("T", "seconds"),
                     "settings": {"rates": rates, "step_seconds": args.step_seconds, "warmup_seconds": args.warmup,
                                  "producers": args.producers, "window_ms": args.window_ms,
                                  "grace_ms": args.grace_ms, "sample_seconds": args.sample_seconds,
                                  "topic": TOPIC, "partitions": PARTITIONS, "net": net,
                                  "cpus": os.cpu_count(), "loadavg_at_start": os.getloadavg(),
                                  "code": code_state()}}
    tmp = Path(tempfile.mkdtemp(prefix="logbus-pipeline-bench-"))
    os.chmod(tmp, 0o711)  # as root, PostgreSQL runs as the postgres user: it must reach the state dir
    state, workers_dir = tmp / "state", tmp / "workers"
    workers_dir.mkdir()
    procs: list[subprocess.Popen] = []
    sampler = None
    code = 1
    samples: list[dict] = []
    try:
        (tmp / "topology.json").write_text(json.dumps(topo))
        t0 = time.monotonic()
        up = logbus("up", "--topology", str(tmp / "topology.json"), "--state-dir", str(state))
        if up.returncode != 0:
            print(up.stdout[-3000:], up.stderr[-3000:], file=sys.stderr)
            results["outcome"] = "logbus up failed"
            return 1
        status = wait_until(lambda: healthy_status(state), 300, interval=5, what="logbus status: all healthy")
        results["settings"]["services"] = len(status["services"])
        results["settings"]["up_seconds"] = round(time.monotonic() - t0, 1)
        print(f"all {len(status['services'])} services healthy after {results['settings']['up_seconds']} s",
              flush=True)
        live = ",".join(f"127.{net}.1.{i}:{topo['ports']['broker']}" for i in (1, 2, 3))
        from confluent_kafka.admin import AdminClient, NewTopic

        admin = AdminClient({"bootstrap.servers": live})
        admin.create_topics([NewTopic(TOPIC, PARTITIONS, 3)])[TOPIC].result(60)
        del admin  # no client of ours left to log the brokers' absence after `logbus down`
        registry = f"http://127.{net}.1.20:{topo['ports']['registry']}"
        for i in range(args.producers):
            spec = {"index": i, "bootstrap": live, "registry": registry, "window_ms": args.window_ms,
                    "share": 1 / args.producers, "status": str(workers_dir / f"producer{i}.json"),
                    "schedule": str(workers_dir / "schedule.json")}
            procs.append(subprocess.Popen([sys.executable, __file__, "--worker", json.dumps(spec)],
                                          stdout=open(workers_dir / f"producer{i}.log", "wb"),
                                          stderr=subprocess.STDOUT))

        def ready():
            for p in procs:
                if p.poll() is not None:
                    raise RuntimeError(f"a producer exited: {(workers_dir / 'producer0.log').read_text()[-2000:]}")
            return all((workers_dir / f"producer{i}.json").exists() for i in range(args.producers))

        wait_until(ready, 120, interval=0.5, what="the producers ready")
        start = time.time() + 1
        steps, t = [], start
        for name, rate, seconds in [("warm-up", rates[0], args.warmup)] + [(f"{r:,}/s", r, args.step_seconds)
                                                                          for r in rates]:
            steps.append({"name": name, "rate": rate, "start": t, "end": t + seconds})
            t += seconds
        (workers_dir / "schedule.tmp").write_text(json.dumps({"steps": steps}))
        os.replace(workers_dir / "schedule.tmp", workers_dir / "schedule.json")
        results["steps_planned"] = steps
        sampler = Sampler(topo, net, state, workers_dir, int(start * 1000))
        judged: list[dict] = []
        stop_at = None  # when the producers were stopped (a failed step, or the schedule's end)
        pending = list(steps[1:])
        next_sample = time.time()
        # judge a step once its last window's grace has passed (plus a sample or two)
        judge_delay = (args.window_ms + args.grace_ms) / 1000 + 2 * args.sample_seconds
        while True:
            samples.append(sampler.sample())
            now = time.time()
            while pending and now >= pending[0]["end"] + judge_delay:
                step = judge_step(pending.pop(0), samples, sampler.windows, args.grace_ms)
                judged.append(step)
                print(f"step {step['name']}: {'carried' if step['carried'] else 'NOT carried'} "
                      + "; ".join(step["why_not"]) + " | rates " + ", ".join(
                          f"{k} {v:,.0f}" for k, v in step["rates"].items() if v is not None), flush=True)
                if not step["carried"] and not args.keep_going:
                    pending = []
            if stop_at is None and (not pending and judged and not judged[-1]["carried"] or now >= steps[-1]["end"]):
                stop_at = time.time()
                for p in procs:
                    if p.poll() is None:
                        p.send_signal(signal.SIGTERM)
            if stop_at is not None and not pending:
                break
            next_sample += args.sample_seconds
            time.sleep(max(0.0, next_sample - time.time()))
        # drain: the producers flush; the pipeline catches up; every window complete at live and offline
        for p in procs:
            try:
                p.wait(150)
            except subprocess.TimeoutExpired:
                p.kill()
        drain_deadline = time.time() + args.drain_seconds
        drained_at = None
        while time.time() < drain_deadline:
            next_sample += args.sample_seconds
            time.sleep(max(0.0, next_sample - time.time()))
            samples.append(sampler.sample())
            s = samples[-1]
            windows = list(sampler.windows.values())
            complete = windows and all(w["first_complete"] is not None for w in windows)
            if (complete and s["live"] is not None and s["live"] == s["producers"]["sent"]
                    and (s["mirror_lag"] or 0) == 0 and (s["live_counter"] or 0) >= s["live"]
                    and (s["offline_counter"] or 0) >= s["live"]):
                drained_at = time.time()
                break
        produced = samples[-1]["producers"]["sent"]
        results.update(samples=samples, windows=sampler.windows, steps=judged, stopped_at=stop_at,
                       drained_at=drained_at,
                       drain={"seconds": round(drained_at - stop_at, 1) if drained_at else None,
                              "incomplete_windows": sum(1 for w in sampler.windows.values()
                                                        if w["first_complete"] is None)})
        carried = [s for s in judged if s["carried"]]
        results["highest_carried"] = max((s["rate"] for s in carried), default=None)
        failed = next((s for s in judged if not s["carried"]), None)
        results["first_failed"] = failed["name"] if failed else None
        results["bottleneck"] = bottleneck(failed) if failed else {
            "stage": None, "label": "not reached", "why": "every step of the ladder was carried: raise --rates"}
        print(f"highest carried: {results['highest_carried']}; bottleneck: {results['bottleneck']}", flush=True)
        if not args.no_warehouse:
            print("loading the warehouse (logbus_load through Airflow) ...", flush=True)
            try:
                results["warehouse"] = measure_warehouse(topo, net, state, sampler.http, produced,
                                                         args.load_timeout)
            except Exception as exc:  # reported, not hidden: the ladder's figures stand
                results["warehouse"] = {"error": f"{type(exc).__name__}: {exc}"}
            print(f"warehouse: {results['warehouse']}", flush=True)
        results["outcome"] = "completed"
        code = 0
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
        if sampler is not None:
            sampler.close()
        results["down"] = down_and_sweep(state)
        if results["down"]["left_behind"] or results["down"]["exit"] != 0:
            code = 1
        results["finished"] = datetime.datetime.now().isoformat("T", "seconds")
        import shutil

        shutil.rmtree(tmp, ignore_errors=True)
        if samples:
            write(results, out)
    return code


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rates", default="1000,2000,5000,10000,14000,20000,28000,40000,56000,64000,72000,80000",
                        help="offered rates (msg/s), one step each")
    parser.add_argument("--step-seconds", type=float, default=30)
    parser.add_argument("--warmup", type=float, default=15, help="seconds at the first rate, not judged")
    parser.add_argument("--producers", type=int, default=2)
    parser.add_argument("--window-ms", type=int, default=5000)
    parser.add_argument("--grace-ms", type=int, default=10000)
    parser.add_argument("--sample-seconds", type=float, default=2)
    parser.add_argument("--drain-seconds", type=float, default=150, help="at most, after the producers stop")
    parser.add_argument("--dc-setting", action="append", default=[], metavar="DC.KEY=JSON",
                        help="set a datacenter's key in the topology copy (repeatable), e.g. "
                             "offline.mirror_fetch_min_bytes=1")
    parser.add_argument("--keep-going", action="store_true", help="run every step, also after a failed one")
    parser.add_argument("--no-warehouse", action="store_true", help="skip the load at the end")
    parser.add_argument("--load-timeout", type=float, default=400)
    parser.add_argument("--out", default=str(REPO / "bench" / "results"))
    parser.add_argument("--md-only", action="store_true", help="the .md and .png again from the .json")
    parser.add_argument("--rejudge", action="store_true",
                        help="judge the steps of the .json's run again from its samples with this file's criteria")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        return worker(json.loads(args.worker))
    out = Path(args.out)
    if args.md_only or args.rejudge:
        results = json.loads((out / f"{NAME}.json").read_text())
        if args.rejudge:
            rejudge(results, " ".join([".venv/bin/python bench/pipeline_benchmark.py", *sys.argv[1:]]))
        write(results, out)
        return 0
    command = " ".join([".venv/bin/python bench/pipeline_benchmark.py", *sys.argv[1:]])
    return run(args, out, command)


if __name__ == "__main__":
    sys.exit(main())
