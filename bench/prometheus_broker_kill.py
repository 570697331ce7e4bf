"""Prometheus' view of a broker kill: the default topology's live-broker throughput and the mirror's lag before,
during and after a ``kill -9`` of one live broker, the alerts it raised, and a screenshot of Prometheus' own graph
page of both (the picture in README.md's "Operating" section).

Runs ``logbus up --topology <copy> --state-dir <tmp>`` on the default topology (``topology/default.json``) on random
loopback networks (127.N.1 / 127.N.2) and free ports, as tests/e2e/test_whole_topology.py prepares its copy; the
load DAG's schedule is off (no Spark job competes for the cores during the run); audit windows, demo rate and
everything else as in the default topology. Waits until ``logbus status --json`` says healthy and the topology's
Prometheus scrapes every target and sees traffic, lets the demo traffic run --before seconds, then ``kill -9``s the
service process (``service_pid`` of ``logbus status --json``) of the live broker leading the most partitions (or
--broker); its supervisor restarts it. After --after more seconds it queries Prometheus' HTTP API over the whole
window (5 s steps):

    throughput  sum by (instance) (rate(kafka_server_brokertopicmetrics_messagesin_total{datacenter="live"}[30s]))
    mirror lag  sum by (source) (logbus_mirror_lag_records)      (records behind live's log end, all partitions)
    alerts      ALERTS                                            (pending and firing, every rule)

and takes a headless-Chromium screenshot of Prometheus' graph page (Debian's Prometheus serves the classic UI) of the
first two. Writes ``<out>/prometheus_broker_kill.{md,json,png}``: the figures (computed from the queried series), the
raw series, the picture. Always ends with ``logbus down`` and checks that no process of the run is left.

Usage: .venv/bin/python bench/prometheus_broker_kill.py [--before 60] [--after 90] [--broker live-broker2]
                                                        [--out bench/results] [--keep-data DIR]
       .venv/bin/python bench/prometheus_broker_kill.py --from-data DIR
           (the figures and the picture again from a run's Prometheus data kept with --keep-data, and that run's
           JSON in --out: for working on the picture without running the topology again)
       .venv/bin/python bench/prometheus_broker_kill.py --md-only   (the .md again from the .json)
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO / "platform"), str(REPO / "tests"), str(REPO / "bench")]
from benchkit.topology_run import down_and_sweep, http_session, logbus  # noqa: E402

import requests  # noqa: E402
from support import free_port, wait_until  # noqa: E402

STEP = 5  # s: the topology's scrape and evaluation interval
EXPRS = {
    "throughput": 'sum by (instance) (rate(kafka_server_brokertopicmetrics_messagesin_total{datacenter="live"}[30s]))',
    "mirror_lag": "sum by (source) (logbus_mirror_lag_records)",
}
# for the figures only (not drawn)
EXTRA = {
    "throughput_total": 'sum(rate(kafka_server_brokertopicmetrics_messagesin_total{datacenter="live"}[30s]))',
    "mirrored_per_s": "sum(rate(logbus_mirror_records_total[30s]))",
    "mirror_lag_total_gauge": "sum(logbus_mirror_lag_records_total)",
    "broker_up": 'up{job="broker",datacenter="live"}',
    "under_replicated": 'sum(kafka_server_replicamanager_underreplicatedpartitions{datacenter="live"})',
    "leaders": 'kafka_server_replicamanager_leadercount{datacenter="live"}',
    "alerts": "ALERTS",
}
NAME = "prometheus_broker_kill"


def utc(t: float) -> str:
    return datetime.datetime.fromtimestamp(t, datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def query(http, prom: str, expr: str) -> list:
    body = http.get(f"{prom}/api/v1/query", params={"query": expr}, timeout=10).json()
    return body["data"]["result"]


def query_range(http, prom: str, expr: str, start: float, end: float) -> list:
    body = http.get(f"{prom}/api/v1/query_range", params={"query": expr, "start": f"{start:.3f}",
                                                           "end": f"{end:.3f}", "step": STEP}, timeout=60).json()
    if body.get("status") != "success":
        raise RuntimeError(f"query_range {expr}: {body}")
    return body["data"]["result"]


def points(result: list, **labels) -> list[tuple[float, float]]:
    """The (time, value) points of the one series of ``result`` whose labels include ``labels``."""
    rows = [r for r in result if all(r["metric"].get(k) == v for k, v in labels.items())]
    if not rows:
        return []
    if len(rows) > 1:
        raise ValueError(f"{len(rows)} series match {labels}")
    return [(float(t), float(v)) for t, v in rows[0]["values"] if math.isfinite(float(v))]


def mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def first(pts: list[tuple[float, float]], after: float, test) -> float | None:
    return next((t for t, v in pts if t > after and test(v)), None)


def figures(series: dict, run: dict) -> dict:
    """The run's numbers, from the queried series only."""
    kill, end = run["kill_at"], run["end_at"]
    total = points(series["throughput_total"])
    lag = points(series["mirror_lag"])
    up = points(series["broker_up"], instance=run["killed_instance"])
    urp = points(series["under_replicated"])
    mirrored = points(series["mirrored_per_s"])
    before = [v for t, v in total if kill - 45 <= t < kill]
    after = [v for t, v in total if t >= end - 30]
    during = [(t, v) for t, v in total if t > kill]
    low_t, low = min(during, key=lambda p: p[1]) if during else (None, None)
    tp_before = mean(before)
    recovered = first(total, low_t, lambda v: v >= 0.9 * tp_before) if low_t and tp_before else None
    lag_before = [v for t, v in lag if kill - 45 <= t < kill]
    lag_after_kill = [(t, v) for t, v in lag if t > kill]
    peak_t, peak = max(lag_after_kill, key=lambda p: p[1]) if lag_after_kill else (None, None)
    lag_base = max(lag_before) if lag_before else None
    lag_back = (first(lag, peak_t, lambda v: v <= lag_base) if peak is not None and lag_base is not None
                and peak > lag_base else None)
    down_at = first(up, kill, lambda v: v == 0)
    up_again = first(up, down_at, lambda v: v == 1) if down_at else None
    urp_max = max((v for t, v in urp if t > kill), default=None)
    urp_clear = first(urp, first(urp, kill, lambda v: v > 0) or end, lambda v: v == 0) if urp_max else None

    def since(t):
        return None if t is None else round(t - kill, 1)

    def r(v, nd=1):
        return None if v is None else round(v, nd)

    out = {
        "throughput_before_per_s": r(tp_before), "throughput_before_window_s": [-45, 0],
        "throughput_lowest_per_s": r(low), "throughput_lowest_at_s": since(low_t),
        "throughput_lowest_percent_of_before": r(100 * low / tp_before) if low is not None and tp_before else None,
        "throughput_back_to_90_percent_at_s": since(recovered),
        "throughput_after_per_s": r(mean(after)), "throughput_after_window_s": [r(end - 30 - kill), r(end - kill)],
        "throughput_highest_after_kill_per_s": r(max((v for _, v in during), default=None)),
        "mirror_lag_before_max": r(lag_base, 0), "mirror_lag_before_mean": r(mean(lag_before), 0),
        "mirror_lag_peak": r(peak, 0), "mirror_lag_peak_at_s": since(peak_t),
        "mirror_lag_back_to_before_max_at_s": since(lag_back), "mirror_lag_last": r(lag[-1][1], 0) if lag else None,
        "mirrored_before_per_s": r(mean([v for t, v in mirrored if kill - 45 <= t < kill])),
        "mirrored_after_per_s": r(mean([v for t, v in mirrored if t >= end - 30])),
        "killed_broker_first_failed_scrape_at_s": since(down_at),
        "killed_broker_scraped_again_at_s": since(up_again),
        "killed_broker_failed_scrapes": sum(1 for t, v in up if t > kill and v == 0),
        "under_replicated_max_after_kill": r(urp_max, 0), "under_replicated_cleared_at_s": since(urp_clear),
    }
    leaders = {row["metric"]["instance"]: [(float(t), float(v)) for t, v in row["values"]] for row in series["leaders"]}
    out["leaders_before"] = {i: next((v for t, v in reversed(p) if t < kill), None) for i, p in sorted(leaders.items())}
    out["leaders_at_end"] = {i: p[-1][1] if p and p[-1][0] > end - 2 * STEP else None
                             for i, p in sorted(leaders.items())}
    alerts = []
    for row in series["alerts"]:
        ts = [float(t) for t, _ in row["values"]]
        labels = {k: v for k, v in row["metric"].items() if k not in ("__name__", "alertname", "alertstate")}
        alerts.append({"alert": row["metric"]["alertname"], "state": row["metric"]["alertstate"], "labels": labels,
                       "from_s": since(min(ts)), "to_s": since(max(ts)), "samples": len(ts)})
    alerts.sort(key=lambda a: (a["from_s"], a["alert"], a["state"]))
    out["alerts"] = alerts
    down = [a for a in alerts if a["alert"] == "LogbusServiceDown"
            and a["labels"].get("instance") == run["killed_instance"]]
    out["service_down_alert"] = ("firing" if any(a["state"] == "firing" for a in down)
                                 else "pending only" if down else "not raised")
    return out


def collect(http, prom: str, run: dict) -> dict:
    start, end = run["start_at"], run["end_at"]
    series = {name: query_range(http, prom, expr, start, end) for name, expr in {**EXPRS, **EXTRA}.items()}
    return series


def screenshot(prom: str, run: dict, path: Path, live: bool) -> dict:
    """Prometheus' graph page of EXPRS over the run's window, in headless Chromium. ``live``: the window ends now
    (the page's default end); otherwise (kept data) the page's end is the next full minute (its minute-resolution
    end field)."""
    from browser import Browser

    seconds = int(math.ceil(time.time() - run["start_at"])) if live else None
    params = {}
    for i, expr in enumerate(EXPRS.values()):
        params[f"g{i}.expr"] = expr
        params[f"g{i}.tab"] = "0"
        params[f"g{i}.step_input"] = str(STEP)
        if live:
            params[f"g{i}.range_input"] = f"{seconds}s"
        else:
            end_minute = math.ceil(run["end_at"] / 60) * 60
            params[f"g{i}.end_input"] = time.strftime("%Y-%m-%d %H:%M", time.gmtime(end_minute))
            params[f"g{i}.range_input"] = f"{int(math.ceil((end_minute - run['start_at']) / 60))}m"
    url = f"{prom}/graph?" + urllib.parse.urlencode(params, quote_via=urllib.parse.quote)
    with Browser(1400, 1000) as b:
        b.open(url)
        drawn = b.wait_for("document.querySelectorAll('#graph_container .graph svg path').length >= 2 && "
                           "document.querySelectorAll('#graph_container .graph').length >= 2 && "
                           "Array.from(document.querySelectorAll('.spinner')).every(s => s.offsetParent === null)",
                           timeout=90)
        time.sleep(1)
        b.evaluate("document.activeElement && document.activeElement.blur(); window.scrollTo(0, 0); "
                   "document.documentElement.style.overflow = 'hidden'; true")
        height = min(int(b.evaluate("document.documentElement.scrollHeight")), 2400)
        b.call("Emulation.setDeviceMetricsOverride", width=1400, height=height, deviceScaleFactor=1, mobile=False)
        time.sleep(2)
        paths = b.evaluate("Array.from(document.querySelectorAll('#graph_container .graph')).map("
                           "g => g.querySelectorAll('svg path').length)")
        errors = b.evaluate("Array.from(document.querySelectorAll('.alert-danger, .error')).filter("
                            "e => e.offsetParent !== null).map(e => e.innerText.trim()).filter(t => t)")
        b.screenshot(path)
    size = path.stat().st_size
    if size > 380_000:  # a palette PNG of the same picture
        from PIL import Image

        Image.open(path).convert("RGB").quantize(colors=256).save(path, optimize=True)
    return {"url": url, "drawn": bool(drawn), "paths_per_graph": paths, "errors": errors,
            "height": height, "bytes": path.stat().st_size}


def table(results: dict) -> str:
    run, f = results["run"], results["figures"]

    def s(v, unit=" s"):
        return "—" if v is None else f"{v:g}{unit}"

    lines = [f"# Prometheus during a broker kill — {results['finished']}", "",
             f"Command: `{results['command']}` ({results['outcome']})", "",
             f"The default topology (`topology/default.json`, {run['services']} services, demo traffic "
             f"{run['demo_rate']} events/s per frontend × {run['frontends']}) on loopback networks "
             f"127.{run['net']}.1 / 127.{run['net']}.2 with free ports, the load DAG's schedule off; `logbus up` "
             f"to all healthy: {run['up_seconds']} s. Prometheus at {run['prometheus']} (Debian's "
             f"{run['prometheus_version']}), scrape and rule evaluation every {STEP} s.", "",
             f"**Kill**: `kill -9` of {run['killed']}'s service process (pid {run['killed_pid']}, "
             f"leading {run['killed_leaders']:g} partitions"
             f"{', the active controller' if run['killed_was_controller'] else ''}) "
             f"at {utc(run['kill_at'])}, {run['kill_at'] - run['start_at']:.0f} s into the "
             f"{run['end_at'] - run['start_at']:.0f} s window ({utc(run['start_at'])} – {utc(run['end_at'])}). "
             f"Its supervisor started a new process after {s(run.get('supervisor_restarted_at_s'))}; the broker's "
             f"port accepted connections again after {s(run.get('port_open_again_at_s'))}; `logbus status` after the "
             f"run: restarts {run['killed_status_after'].get('restarts')}, last exit "
             f"{run['killed_status_after'].get('last_exit')}.", "",
             "All times below are seconds after the kill, read from the series Prometheus returned "
             f"(`/api/v1/query_range`, step {STEP} s; rates over 30 s, so a rate trails the event by up to 30 s).", "",
             "| figure | value |", "|---|---|",
             f"| live brokers' records in, before (mean of −45..0 s) | {s(f['throughput_before_per_s'], '/s')} |",
             f"| lowest after the kill | {s(f['throughput_lowest_per_s'], '/s')} at {s(f['throughput_lowest_at_s'])} "
             f"({s(f['throughput_lowest_percent_of_before'], '%')} of before) |",
             "| highest after the kill (retried records catching up) | "
             f"{s(f['throughput_highest_after_kill_per_s'], '/s')} |",
             f"| back to ≥ 90% of before | {s(f['throughput_back_to_90_percent_at_s'])} |",
             f"| after (mean of the last 30 s: {f['throughput_after_window_s'][0]:g}.."
             f"{f['throughput_after_window_s'][1]:g} s) "
             f"| {s(f['throughput_after_per_s'], '/s')} |",
             f"| mirror lag before (max / mean of −45..0 s) | {s(f['mirror_lag_before_max'], ' records')} / "
             f"{s(f['mirror_lag_before_mean'], ' records')} |",
             f"| mirror lag peak | {s(f['mirror_lag_peak'], ' records')} at {s(f['mirror_lag_peak_at_s'])} |",
             f"| mirror lag back to the pre-kill max | {s(f['mirror_lag_back_to_before_max_at_s'])} "
             f"(at the end: {s(f['mirror_lag_last'], ' records')}) |",
             f"| mirror copy rate before / after | {s(f['mirrored_before_per_s'], '/s')} / "
             f"{s(f['mirrored_after_per_s'], '/s')} |",
             f"| killed broker: first failed scrape (`up == 0`) / scraped again | "
             f"{s(f['killed_broker_first_failed_scrape_at_s'])} / {s(f['killed_broker_scraped_again_at_s'])} "
             f"(failed scrapes: {f['killed_broker_failed_scrapes']}) |",
             f"| live under-replicated partitions: most / back to 0 | {s(f['under_replicated_max_after_kill'], '')} / "
             f"{s(f['under_replicated_cleared_at_s'])} |",
             "| partitions led per live broker, before the kill → at the end | "
             + ", ".join(f"{run.get('broker_instances', {}).get(i, i)}: {s(f['leaders_before'].get(i), '')} → "
                         f"{s(f['leaders_at_end'].get(i), '')}" for i in f.get("leaders_before", {})) + " |",
             f"| `LogbusServiceDown` for {run['killed']} | **{f['service_down_alert']}** |", "",
             "Alerts seen in the window (`ALERTS`, every state; times relative to the kill):", ""]
    if f["alerts"]:
        lines += ["| alert | state | labels | from | to |", "|---|---|---|---|---|"]
        for a in f["alerts"]:
            labels = ", ".join(f"{k}={v}" for k, v in sorted(a["labels"].items()) if k != "severity")
            lines.append(f"| `{a['alert']}` | {a['state']} | {labels} | {s(a['from_s'])} | {s(a['to_s'])} |")
    else:
        lines.append("none.")
    shot = results["screenshot"]
    lines += ["", f"Screenshot: [`{NAME}.png`]({NAME}.png) — Prometheus' graph page "
              f"({shot['bytes']:,} bytes; SVG paths per graph: {shot['paths_per_graph']}), expressions:", "",
              *[f"- `{e}`" for e in EXPRS.values()], "",
              "Raw series: [`prometheus_broker_kill.json`](prometheus_broker_kill.json).", ""]
    if results.get("status_before"):
        lines += ["`logbus status` just before the kill:", "", "```", results["status_before"].rstrip(), "```", ""]
    for dc, got in (results.get("consumer_groups") or {}).items():
        lines += [f"At the end, on {dc}: `{got['command']}` (exit {got['exit']}):", "", "```",
                  (got["stdout"].strip() + "\n" + got["stderr"].strip()).strip(), "```", ""]
    if run.get("killed_log"):
        lines += [f"{run['killed']}'s log, its error lines (supervisor at the end: "
                  + ", ".join(f"{k} {round(v, 1) if isinstance(v, float) else v}"
                              for k, v in run.get("killed_supervisor_after", {}).items())
                  + "; `_at`: seconds after the kill):", "", "```", *run["killed_log"], "```", ""]
    return "\n".join(lines)


def write(results: dict, out: Path) -> None:
    (out / f"{NAME}.json").write_text(json.dumps(results, indent=1) + "\n")
    (out / f"{NAME}.md").write_text(table(results))
    print((out / f"{NAME}.md").read_text())


def healthy_status(state: Path) -> dict | None:
    out = logbus("status", "--json", "--state-dir", str(state), timeout=120)
    try:
        status = json.loads(out.stdout)
    except ValueError:
        return None
    return status if status["healthy"] else None


def run_topology(args, out: Path, command: str) -> int:
    from topology_checks import check_prometheus, fresh_loopback

    for binary in ("prometheus", "chromium"):
        if shutil.which(binary) is None:
            print(f"{binary} is not installed (bash scripts/setup)", file=sys.stderr)
            return 2
    version = subprocess.run(["prometheus", "--version"], capture_output=True, text=True)
    topo = json.loads((REPO / "topology" / "default.json").read_text())
    net = fresh_loopback(topo)
    topo["load_schedule"] = "none"  # no Spark load competing for the cores during the window
    prom = f"http://127.{net}.2.60:{topo['ports']['prometheus']}"
    http = http_session()
    results: dict = {"command": command, "outcome": "failed"}
    code = 1
    tmp = Path(tempfile.mkdtemp(prefix="logbus-prom-kill-"))
    os.chmod(tmp, 0o711)  # as root, PostgreSQL runs as the postgres user: it must reach the state dir
    state = tmp / "state"
    try:
        (tmp / "topology.json").write_text(json.dumps(topo))
        t0 = time.monotonic()
        up = logbus("up", "--topology", str(tmp / "topology.json"), "--state-dir", str(state))
        if up.returncode != 0:
            print(up.stdout[-3000:], up.stderr[-3000:], file=sys.stderr)
            return 1
        status = wait_until(lambda: healthy_status(state), 300, interval=5, what="logbus status: all healthy")
        up_seconds = round(time.monotonic() - t0, 1)
        print(f"all {len(status['services'])} services healthy after {up_seconds} s", flush=True)
        sums = check_prometheus(prom, {"broker", "mirror", "counter", "lag", "audit", "registry", "loads",
                                       "prometheus"}, timeout=120)
        wait_until(lambda: all(float(r["value"][1]) > 0 for r in query(http, prom, EXPRS["throughput"]))
                   and len(query(http, prom, EXPRS["throughput"])) == 3, 120, interval=2,
                   what="a rate of records in on every live broker")
        start_at = time.time()
        print(f"Prometheus sees traffic: {sums}; {args.before:g} s of traffic before the kill", flush=True)
        time.sleep(max(args.before - 10, 0))
        # the victim: the live broker leading the most partitions (ties: the lowest number)
        leaders = {r["metric"]["instance"]: float(r["value"][1]) for r in
                   query(http, prom, 'kafka_server_replicamanager_leadercount{datacenter="live"}')}
        controllers = {r["metric"]["instance"]: float(r["value"][1]) for r in
                       query(http, prom, 'kafka_controller_kafkacontroller_activecontrollercount{datacenter="live"}')}
        services = {s["name"]: s for s in json.loads(logbus("status", "--json", "--state-dir", str(state)).stdout)
                    ["services"]}
        brokers = {n: s for n, s in services.items() if s["kind"] == "broker" and s["datacenter"] == "live"}
        metrics_port = topo["ports"]["metrics"]

        def instance(name):
            return f"{brokers[name]['address'].split(':')[0]}:{metrics_port}"

        victim = args.broker or min(brokers, key=lambda n: (-leaders.get(instance(n), 0), n))
        status_before = logbus("status", "--state-dir", str(state), timeout=120).stdout
        wait = start_at + args.before - time.time()
        if wait > 0:
            time.sleep(wait)
        pid = json.loads(logbus("status", "--json", "--state-dir", str(state)).stdout)
        pid = next(s for s in pid["services"] if s["name"] == victim)["service_pid"]
        kill_at = time.time()
        os.kill(pid, signal.SIGKILL)
        print(f"kill -9 {victim} (pid {pid}) at {utc(kill_at)}", flush=True)
        # the supervisor's restart and the port, from its status file (cheap: no `logbus status` every second)
        host, port = brokers[victim]["address"].rsplit(":", 1)
        restarted_at = port_at = None
        status_file = state / "pids" / f"{victim}.status"
        while time.time() < kill_at + args.after:
            if restarted_at is None:
                try:
                    new = json.loads(status_file.read_text()).get("service_pid")
                except (OSError, ValueError):
                    new = None
                if new not in (None, pid):
                    restarted_at = time.time()
            if restarted_at is not None and port_at is None:
                try:
                    with socket.create_connection((host, int(port)), timeout=1):
                        port_at = time.time()
                except OSError:
                    pass
            time.sleep(0.5)
        end_at = time.time()
        after = {s["name"]: s for s in json.loads(logbus("status", "--json", "--state-dir", str(state)).stdout)
                 ["services"]}
        supervisor = json.loads(status_file.read_text())
        log_lines = Path(after[victim]["log"]).read_text(errors="replace").splitlines()
        # the victim's log since the kill: errors and the lines that explain an exit
        killed_log = [line for line in log_lines if any(w in line for w in (
            "ERROR", "CRITICAL", "Error", "Traceback", "exit", "refus", "already"))][-25:]
        run = {"net": net, "prometheus": prom, "prometheus_version": version.stdout.splitlines()[0],
               "services": len(services), "demo_rate": topo["demo"]["rate"],
               "frontends": topo["datacenters"]["live"]["frontends"], "up_seconds": up_seconds,
               "start_at": start_at, "kill_at": kill_at, "end_at": end_at, "killed": victim, "killed_pid": pid,
               "killed_instance": instance(victim), "killed_leaders": leaders.get(instance(victim), 0),
               "broker_instances": {instance(n): n for n in sorted(brokers)},
               "leaders_before": leaders, "killed_was_controller": controllers.get(instance(victim), 0) == 1,
               "supervisor_restarted_at_s": None if restarted_at is None else round(restarted_at - kill_at, 1),
               "port_open_again_at_s": None if port_at is None else round(port_at - kill_at, 1),
               "killed_status_after": {k: after[victim].get(k) for k in ("healthy", "restarts", "last_exit",
                                                                        "numbers")},
               "killed_supervisor_after": {k: supervisor.get(k) - kill_at if k.endswith("_at") and supervisor.get(k)
                                           else supervisor.get(k) for k in ("state", "restarts", "last_exit_code",
                                                                            "last_exit_at", "last_restart_at")},
               "killed_log": killed_log,
               "all_healthy_after": all(s["healthy"] for s in after.values())}
        time.sleep(STEP + 1)  # the last scrape and rule evaluation of the window
        series = collect(http, prom, run)
        shot = screenshot(prom, run, out / f"{NAME}.png", live=True)
        groups = {}
        for dc in ("live", "offline"):
            bootstrap = f"127.{net}.{1 if dc == 'live' else 2}.1:{topo['ports']['broker']}"
            got = logbus("consumer-groups", "--bootstrap-server", bootstrap, "--describe", "--all-groups",
                         timeout=120)
            groups[dc] = {"command": f"logbus consumer-groups --bootstrap-server {bootstrap} --describe --all-groups",
                          "exit": got.returncode, "stdout": got.stdout, "stderr": got.stderr}
        results.update(run=run, series=series, figures=figures(series, run), screenshot=shot,
                       status_before=status_before, consumer_groups=groups,
                       finished=datetime.datetime.now().strftime("%Y-%m-%d %H:%M"))
        code = 0 if shot["drawn"] and not shot["errors"] else 1
        results["outcome"] = "completed" if code == 0 else f"the graph page showed errors: {shot['errors']}"
    finally:
        results["down"] = down_and_sweep(state)
        if results["down"]["left_behind"] or results["down"]["exit"] != 0:
            code = 1
        if args.keep_data and (state / "offline-prometheus" / "data").is_dir():
            shutil.copytree(state / "offline-prometheus" / "data", args.keep_data, dirs_exist_ok=True)
        shutil.rmtree(tmp, ignore_errors=True)
        if "run" in results:
            write(results, out)
    return code


def replay(args, out: Path) -> int:
    """The figures and the picture from kept Prometheus data (--keep-data) and that run's JSON."""
    results = json.loads((out / f"{NAME}.json").read_text())
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="logbus-prom-replay-") as tmp:
        (Path(tmp) / "prometheus.yml").write_text('{"global": {"scrape_interval": "1h"}, "scrape_configs": []}\n')
        proc = subprocess.Popen(["prometheus", f"--config.file={tmp}/prometheus.yml",
                                 f"--storage.tsdb.path={args.from_data}", f"--web.listen-address=127.0.0.1:{port}",
                                 "--storage.tsdb.retention.time=10y", "--log.level=warn"])
        prom = f"http://127.0.0.1:{port}"
        http = http_session()
        try:
            def ready():
                try:
                    return http.get(f"{prom}/-/ready", timeout=2).status_code == 200
                except requests.RequestException:
                    return False

            wait_until(ready, 120, interval=0.5, what="Prometheus on the kept data")
            series = collect(http, prom, results["run"])
            shot = screenshot(prom, results["run"], out / f"{NAME}.png", live=False)
        finally:
            proc.terminate()
            proc.wait(30)
    results.update(series=series, figures=figures(series, results["run"]), screenshot=shot)
    write(results, out)
    return 0 if shot["drawn"] and not shot["errors"] else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", type=float, default=60, help="seconds of traffic before the kill")
    parser.add_argument("--after", type=float, default=90, help="seconds after the kill")
    parser.add_argument("--broker", help="the live broker to kill (default: the one leading the most partitions)")
    parser.add_argument("--out", default=str(REPO / "bench" / "results"))
    parser.add_argument("--keep-data", help="copy Prometheus' data directory here after the run")
    parser.add_argument("--from-data", help="figures and picture from kept data (see --keep-data)")
    parser.add_argument("--md-only", action="store_true", help="only write the .md again from the .json")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.md_only:
        (out / f"{NAME}.md").write_text(table(json.loads((out / f"{NAME}.json").read_text())))
        return 0
    if args.from_data:
        return replay(args, out)
    command = " ".join([".venv/bin/python bench/prometheus_broker_kill.py", *sys.argv[1:]])
    return run_topology(args, out, command)


if __name__ == "__main__":
    sys.exit(main())
