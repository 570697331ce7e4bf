"""The whole pipeline's throughput (issue 20): the highest sustained producer rate the default topology carries from
live through the mirror and offline to the warehouse, with the audit on and every closed window 100% at every tier
within the grace period; the stage that falls behind first; each stage's rate over time.

How it runs:

1. ``logbus up --topology <copy> --state-dir <tmp>`` of ``topology/default.json`` on loopback networks of its own
   (127.N.1 / 127.N.2) with free ports, as the e2e test prepares its copy (``tests/topology_checks.fresh_loopback``).
   Changed in the copy, nothing else: audit windows ``--window-ms`` (5 s) with grace ``--grace-ms`` (10 s) and the
   counters emitting every second (the default 60 s / 120 s windows would give one window per step), the demo
   frontends off (the offered rate is the ladder's alone), the load DAG's schedule off (the warehouse is measured
   after the ladder, see 5).
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
from benchkit.topology_run import down_and_sweep, http_session, logbus  # noqa: E402

NAME = "pipeline_benchmark"
TOPIC = "page-views"
PARTITIONS = 3
# pipeline order: the stages whose rates are compared to the offered rate
STAGES = [("producers", "producers (sent)"), ("live", "live brokers (page-views end offsets)"),
          ("live_counter", "live audit counter"), ("mirror", "mirror (records copied)"),
          ("offline", "offline brokers (page-views end offsets)"), ("offline_counter", "offline audit counter")]
TIERS = ("live", "offline")
RATE_TOLERANCE = 0.95      # a stage keeps up when its rate is at least this share of the offered rate
LAG_SLOPE_SHARE = 0.02     # the mirror's lag grows when its slope exceeds this share of the offered rate
SETTLE_S = 5.0             # seconds at the start of a step left out of its rates (the rates follow the step)


# ---------------------------------------------------------------------------------------------------- producers
def worker(spec: dict) -> int:
    """One producer process: ready (schema registered, connected) -> status file; waits for the schedule file;
    sends to it; SIGTERM or the schedule's end: flush (the last windows' monitoring events) and exit."""
    import random

    from audit import AuditedProducer
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext
    from logbus.traffic import PAGE_VIEW, PAGES

    stopping: list[int] = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(1))
    status_path = Path(spec["status"])

    def status(**fields) -> None:
        tmp = status_path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"t": time.time(), "cpu": sum(os.times()[:2]), **fields}))
        os.replace(tmp, status_path)

    registry = SchemaRegistryClient({"url": spec["registry"]})
    serializer = AvroSerializer(registry, json.dumps(PAGE_VIEW))
    rng = random.Random(spec["index"])
    values = []
    for _ in range(512):
        member = rng.randrange(1_000_000)
        event = {"member_id": member, "page": rng.choice(PAGES),
                 "referrer": rng.choice([None, "/feed", "https://example.com"]),
                 "user_agent": "Mozilla/5.0 (logbus pipeline benchmark)"}
        values.append((serializer(event, SerializationContext(TOPIC, MessageField.VALUE)), str(member).encode()))
    producer = AuditedProducer({"bootstrap.servers": spec["bootstrap"], "schema.registry.url": spec["registry"],
                                "audit.window.ms": spec["window_ms"], "audit.host": f"bench-producer{spec['index']}",
                                "linger.ms": 20, "acks": "all", "enable.idempotence": True,
                                "queue.buffering.max.messages": 500000})
    producer.register_schema()
    producer.list_topics(TOPIC, timeout=30)
    status(state="ready", sent=0, skipped=0, buffer_full=0, queued=0)
    schedule_path = Path(spec["schedule"])
    while not schedule_path.exists() and not stopping:
        time.sleep(0.05)
    steps = json.loads(schedule_path.read_text())["steps"] if not stopping else []
    share = spec["share"]

    def due(now: float) -> float:  # records this producer should have sent by ``now``
        return sum(share * s["rate"] * max(0.0, min(now, s["end"]) - s["start"]) for s in steps)

    end = steps[-1]["end"] if steps else 0
    sent = skipped = buffer_full = 0
    last_status = 0.0
    n_values = len(values)
    try:
        while not stopping:
            now = time.time()
            if now >= end:
                break
            target = due(now)
            behind = target - sent - skipped
            rate_now = share * next((s["rate"] for s in steps if s["start"] <= now < s["end"]), 0)
            if behind > rate_now + 1:  # more than 1 s behind the schedule: what cannot be caught up is not sent
                skipped += int(behind - rate_now)
                behind = target - sent - skipped
            burst = int(min(behind, 5000))
            for _ in range(burst):
                value, key = values[(sent + skipped) % n_values]
                try:
                    producer.produce(TOPIC, value, key=key)
                except BufferError:
                    buffer_full += 1
                    producer.poll(0.01)
                    break
                sent += 1
            producer.poll(0)
            if now - last_status >= 0.5:
                status(state="running", sent=sent, skipped=skipped, buffer_full=buffer_full, queued=len(producer))
                last_status = now
            if burst < 50:
                time.sleep(0.002)
    finally:
        status(state="flushing", sent=sent, skipped=skipped, buffer_full=buffer_full, queued=len(producer))
        left = producer.flush(120)
        status(state="done", sent=sent, skipped=skipped, buffer_full=buffer_full, queued=left)
    return 0


# ---------------------------------------------------------------------------------------------------- sampling
def prom_values(http, urls: list[str], name: str, **labels) -> float | None:
    """The sum of the samples of metric ``name`` (labels matching) on the /metrics pages ``urls``; None if one is
    unreachable or none has it."""
    from prometheus_client.parser import text_string_to_metric_families

    total, seen = 0.0, False
    for url in urls:
        try:
            text = http.get(url, timeout=3).text
        except Exception:
            return None
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                    total += sample.value
                    seen = True
    return total if seen else None


class Watermarks:
    """The sum of a topic's high watermarks on a cluster (ListOffsets through a consumer)."""

    def __init__(self, bootstrap: str):
        from confluent_kafka import Consumer

        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "pipeline-benchmark-watermarks",
                                  "enable.auto.commit": False})

    def total(self, topic: str) -> int | None:
        from confluent_kafka import TopicPartition

        try:
            return sum(self.consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=3, cached=False)[1]
                       for p in range(PARTITIONS))
        except Exception:
            return None

    def close(self) -> None:
        self.consumer.close()


class ServiceCpu:
    """CPU seconds of each service's process tree (the supervisor's child and its descendants)."""

    def __init__(self, state: Path):
        self.state = state

    def sample(self) -> dict[str, float]:
        import psutil

        out = {}
        for f in (self.state / "pids").glob("*.status"):
            try:
                pid = json.loads(f.read_text()).get("service_pid")
                if not pid:
                    continue
                root = psutil.Process(pid)
                total = 0.0
                for proc in [root, *root.children(recursive=True)]:
                    try:
                        t = proc.cpu_times()
                        total += t.user + t.system + t.children_user + t.children_system
                    except psutil.Error:
                        pass
                out[f.name[:-len(".status")]] = round(total, 2)
            except (OSError, ValueError, psutil.Error):
                continue
        return out


class Sampler:
    def __init__(self, topo: dict, net: int, state: Path, workers_dir: Path, start_ms: int):
        from logbus.status_numbers import metrics_address
        from logbus.topology import services

        self.http = http_session()
        # each stage's /metrics, from the topology's own services (every mirror service, each datacenter's counter)
        svcs = services(topo, "local", state)
        self.urls = {"mirror": [f"http://{metrics_address(s)}/metrics" for s in svcs
                                if s.kind == "mirror" and metrics_address(s)]}
        for dc in TIERS:
            self.urls[f"{dc}_counter"] = [f"http://{metrics_address(s)}/metrics" for s in svcs
                                          if s.kind == "counter" and s.datacenter == dc and metrics_address(s)]
        port = topo["ports"]["broker"]
        self.watermarks = {dc: Watermarks(",".join(f"127.{net}.{o}.{i}:{port}" for i in (1, 2, 3)))
                           for dc, o in (("live", 1), ("offline", 2))}
        self.audit = f"http://127.{net}.2.40:{topo['ports']['audit']}"
        self.workers_dir, self.start_ms = workers_dir, start_ms
        self.cpu = ServiceCpu(state)
        self.windows: dict[str, dict] = {}  # "start|tier" -> {"start", "end", "tier", "first_complete", ...}

    def producers(self) -> dict:
        out = {"sent": 0, "skipped": 0, "buffer_full": 0, "queued": 0, "cpu": 0.0, "states": []}
        for f in sorted(self.workers_dir.glob("producer*.json")):
            try:
                s = json.loads(f.read_text())
            except (OSError, ValueError):
                continue
            for k in ("sent", "skipped", "buffer_full", "queued"):
                out[k] += s.get(k, 0)
            out["cpu"] += s.get("cpu", 0.0)
            out["states"].append(s.get("state"))
        return out

    def audit_rows(self, now: float) -> int | None:
        try:
            rows = self.http.get(f"{self.audit}/api/report", params={"topic": TOPIC, "from": self.start_ms},
                                 timeout=10).json()
        except Exception:
            return None
        for r in rows:
            if r["tier"] not in TIERS:
                continue
            key = f"{r['window_start']}|{r['tier']}"
            w = self.windows.setdefault(key, {"start": r["window_start"], "end": r["window_end"], "tier": r["tier"],
                                              "first_complete": None, "first_seen": now})
            w.update(expected=r["expected"], received=r["received"], missing=r["missing"],
                     duplicates=r["duplicates"], completeness=r["completeness"], status=r["status"])
            if r["missing"] == 0 and w["first_complete"] is None:
                w["first_complete"] = now
            elif r["missing"]:
                w["first_complete"] = None  # not complete any more (a later producer event raised the expected)
        return len(rows)

    def sample(self) -> dict:
        now = time.time()
        row = {"t": now, "producers": self.producers()}
        for dc, wm in self.watermarks.items():
            row[dc] = wm.total(TOPIC)
        row["mirror"] = prom_values(self.http, self.urls["mirror"], "logbus_mirror_records_total")
        row["mirror_lag"] = prom_values(self.http, self.urls["mirror"], "logbus_mirror_lag_records_total")
        for dc in TIERS:
            row[f"{dc}_counter"] = prom_values(self.http, self.urls[f"{dc}_counter"],
                                               "logbus_audit_counter_records_total", topic=TOPIC)
        row["audit_rows"] = self.audit_rows(now)
        row["cpu"] = self.cpu.sample()
        import psutil

        t = psutil.cpu_times()  # the whole machine's, other users' work included
        row["machine_busy_s"] = round(t.user + t.nice + t.system + t.irq + t.softirq + t.steal, 2)
        return row

    def close(self) -> None:
        for wm in self.watermarks.values():
            wm.close()


# ---------------------------------------------------------------------------------------------------- analysis
def counter_of(sample: dict, stage: str) -> float | None:
    return sample["producers"]["sent"] if stage == "producers" else sample.get(stage)


def rate_between(samples: list[dict], stage: str, t0: float, t1: float) -> float | None:
    """(last - first) / time of the stage's counter over the samples in [t0, t1]."""
    pts = [(s["t"], counter_of(s, stage)) for s in samples if t0 <= s["t"] <= t1 and counter_of(s, stage) is not None]
    if len(pts) < 2 or pts[-1][0] - pts[0][0] <= 0:
        return None
    return (pts[-1][1] - pts[0][1]) / (pts[-1][0] - pts[0][0])


def series(samples: list[dict], stage: str, span: int = 3) -> list[tuple[float, float]]:
    """A stage's rate over time: (midpoint, records/s) over ``span`` sample intervals (the counters publish their
    counts in rounds, so one interval is noisy)."""
    pts = [(s["t"], counter_of(s, stage)) for s in samples if counter_of(s, stage) is not None]
    return [((pts[i][0] + pts[i - span][0]) / 2, (pts[i][1] - pts[i - span][1]) / (pts[i][0] - pts[i - span][0]))
            for i in range(span, len(pts)) if pts[i][0] > pts[i - span][0]]


def slope(points: list[tuple[float, float]]) -> float | None:
    if len(points) < 3:
        return None
    n = len(points)
    mt = sum(t for t, _ in points) / n
    mv = sum(v for _, v in points) / n
    den = sum((t - mt) ** 2 for t, _ in points)
    return sum((t - mt) * (v - mv) for t, v in points) / den if den else None


def cpu_cores(samples: list[dict], t0: float, t1: float) -> dict[str, float]:
    """Cores each service's process tree (and the benchmark's producers together) used between t0 and t1."""
    inside = [s for s in samples if t0 <= s["t"] <= t1]
    if len(inside) < 2:
        return {}
    a, b = inside[0], inside[-1]
    span = b["t"] - a["t"]
    busy = {n: round((b["cpu"][n] - a["cpu"][n]) / span, 2) for n in b["cpu"] if n in a["cpu"]}
    busy["bench producers"] = round((b["producers"]["cpu"] - a["producers"]["cpu"]) / span, 2)
    return dict(sorted(busy.items(), key=lambda kv: -kv[1]))


def machine_cores(samples: list[dict], t0: float, t1: float) -> float | None:
    """Cores busy on the whole machine between t0 and t1 (every process, not only this run's)."""
    inside = [s for s in samples if t0 <= s["t"] <= t1 and s.get("machine_busy_s") is not None]
    if len(inside) < 2:
        return None
    return round((inside[-1]["machine_busy_s"] - inside[0]["machine_busy_s"]) / (inside[-1]["t"] - inside[0]["t"]), 2)


def judge_step(step: dict, samples: list[dict], windows: dict, grace_ms: int) -> dict:
    s0, s1, rate = step["start"], step["end"], step["rate"]
    out = {"name": step["name"], "rate": rate, "start": s0, "end": s1}
    out["cpu_cores"] = cpu_cores(samples, s0 + SETTLE_S, s1)
    out["machine_cores"] = machine_cores(samples, s0 + SETTLE_S, s1)
    out["rates"] = {stage: rate_between(samples, stage, s0 + SETTLE_S, s1) for stage, _ in STAGES}
    sent = [s["producers"] for s in samples if s0 <= s["t"] <= s1]
    out["producer_sent_share"] = (round(out["rates"]["producers"] / rate, 3)
                                  if out["rates"]["producers"] is not None and rate else None)
    out["producer_buffer_full"] = (sent[-1]["buffer_full"] - sent[0]["buffer_full"]) if len(sent) > 1 else None
    lag = [(s["t"], s["mirror_lag"]) for s in samples if s0 + SETTLE_S <= s["t"] <= s1 and s["mirror_lag"] is not None]
    if not lag:  # the mirror's metrics unreachable: the offset difference (offline counts transaction markers)
        lag = [(s["t"], s["live"] - s["offline"]) for s in samples if s0 + SETTLE_S <= s["t"] <= s1
               and s["live"] is not None and s["offline"] is not None]
        out["lag_source"] = "live - offline end offsets"
    else:
        out["lag_source"] = "mirror /metrics"
    out["mirror_lag_max"] = max((v for _, v in lag), default=None)
    out["mirror_lag_end"] = lag[-1][1] if lag else None
    out["mirror_lag_slope_per_s"] = slope(lag)
    # still growing at the end: a higher rate's steady lag is higher, so the step's start is a transient
    out["mirror_lag_slope_second_half_per_s"] = slope([(t, v) for t, v in lag if t >= (s0 + s1) / 2])
    out["mirror_lag_start"] = lag[0][1] if lag else None
    # grew by more than one second of traffic over the step, or still growing at its end
    out["lag_grew_over_step"] = bool(lag and rate and lag[-1][1] - lag[0][1] > rate)
    out["lag_still_growing"] = bool(out["mirror_lag_slope_second_half_per_s"] is not None and rate
                                    and out["mirror_lag_slope_second_half_per_s"] > LAG_SLOPE_SHARE * rate
                                    and (out["mirror_lag_end"] or 0) > rate)
    out["lag_grows"] = out["lag_grew_over_step"] or out["lag_still_growing"]
    mine = [w for w in windows.values() if s0 * 1000 < w["end"] <= s1 * 1000]
    per_tier = {}
    for tier in TIERS:
        ws = [w for w in mine if w["tier"] == tier]
        delays = [(w["first_complete"] - w["end"] / 1000) for w in ws if w["first_complete"] is not None]
        late = [w for w in ws if w["first_complete"] is None or w["first_complete"] * 1000 > w["end"] + grace_ms]
        per_tier[tier] = {"windows": len(ws), "late": len(late), "max_delay_s": round(max(delays), 1) if delays
                          else None, "never_complete": sum(1 for w in ws if w["first_complete"] is None),
                          "records": sum(w.get("expected", 0) for w in ws)}
    out["tiers"] = per_tier
    enough_windows = all(per_tier[t]["windows"] > 0 for t in TIERS)
    out["carried"] = bool(enough_windows and all(per_tier[t]["late"] == 0 for t in TIERS) and not out["lag_grows"]
                          and (out["producer_sent_share"] or 0) >= RATE_TOLERANCE)
    reasons = []
    if not enough_windows:
        reasons.append("no audit window of the step was seen")
    for t in TIERS:
        if per_tier[t]["late"]:
            reasons.append(f"{per_tier[t]['late']} of {per_tier[t]['windows']} windows not 100% at {t} within the "
                           f"grace period")
    if out["lag_grows"]:
        reasons.append(f"the mirror's lag grew from {out['mirror_lag_start']:,.0f} to {out['mirror_lag_end']:,.0f} "
                       f"records ({out['mirror_lag_slope_second_half_per_s'] or 0:,.0f} records/s over the step's "
                       "second half)")
    if (out["producer_sent_share"] or 0) < RATE_TOLERANCE:
        reasons.append(f"the producers sent {100 * (out['producer_sent_share'] or 0):.0f}% of the offered rate")
    out["why_not"] = reasons
    return out


SERVICES = {"producers": ("bench producers",), "live": ("live-broker",), "live_counter": ("live-audit-counter",),
            "mirror": ("offline-mirror",), "offline": ("offline-broker",), "offline_counter": ("offline-audit-counter",)}


def bottleneck(step: dict) -> dict:
    """The first stage, in pipeline order, that fell behind in a step that was not carried, with the CPU its
    processes used then (a stage well below a core per process waits on something, it is not CPU-bound)."""
    found = _bottleneck(step)
    if found["stage"]:
        cpu = {n: v for n, v in step.get("cpu_cores", {}).items() if n.startswith(SERVICES[found["stage"]])}
        found["cpu_cores"] = cpu
    found["machine_cores_busy"] = round(sum(step.get("cpu_cores", {}).values()), 2)
    return found


def _bottleneck(step: dict) -> dict:
    rate = step["rate"]
    prev = rate
    for stage, label in STAGES:
        r = step["rates"].get(stage)
        if stage == "producers" and (step["producer_sent_share"] or 0) < RATE_TOLERANCE:
            return {"stage": stage, "label": label, "why": f"sent {r or 0:,.0f}/s of {rate:,}/s offered "
                    f"(local queue full {step['producer_buffer_full']} times: the live brokers did not take it)"
                    if step["producer_buffer_full"] else f"sent {r or 0:,.0f}/s of {rate:,}/s offered"}
        if stage == "live_counter" and step["tiers"]["live"]["late"]:
            return {"stage": stage, "label": label, "why": f"{step['tiers']['live']['late']} windows late at the "
                    f"live tier; counted {r or 0:,.0f}/s of {rate:,}/s"}
        if stage == "mirror" and step["lag_grows"]:
            return {"stage": stage, "label": label, "why": f"its lag grew from {step['mirror_lag_start']:,.0f} to "
                    f"{step['mirror_lag_end']:,.0f} records over the step "
                    f"({step['mirror_lag_slope_second_half_per_s'] or 0:,.0f} records/s in its second half); copied "
                    f"{r or 0:,.0f}/s of {rate:,}/s"}
        if r is not None and r < RATE_TOLERANCE * rate:
            return {"stage": stage, "label": label, "why": f"{r:,.0f}/s of {rate:,}/s offered "
                    f"(the stage before: {prev:,.0f}/s)"}
        if stage == "offline_counter" and step["tiers"]["offline"]["late"]:
            return {"stage": stage, "label": label, "why": f"{step['tiers']['offline']['late']} windows late at "
                    f"the offline tier; counted {r or 0:,.0f}/s of {rate:,}/s"}
        prev = r if r is not None else prev
    return {"stage": None, "label": "none identified",
            "why": "every stage's rate kept within 95% of the offered rate; see the step's reasons"}


# ---------------------------------------------------------------------------------------------------- warehouse
def rejudge(results: dict, command: str) -> None:
    """The steps the run judged, judged again from its samples and windows (the criteria of this file)."""
    grace = results["settings"]["grace_ms"]
    planned = results["steps_planned"][1:]
    ran = [s for s in planned if s["end"] <= (results.get("stopped_at") or s["end"])]
    steps = []
    for s in ran:
        steps.append(judge_step(s, results["samples"], results["windows"], grace))
        if not steps[-1]["carried"]:
            break
    before = [(s["name"], s["carried"]) for s in results.get("steps", [])]
    results["steps"] = steps
    results["highest_carried"] = max((s["rate"] for s in steps if s["carried"]), default=None)
    failed = next((s for s in steps if not s["carried"]), None)
    results["first_failed"] = failed["name"] if failed else None
    results["bottleneck"] = bottleneck(failed) if failed else {
        "stage": None, "label": "not reached", "why": "every step of the ladder was carried: raise --rates"}
    results.setdefault("rejudged", []).append({"command": command, "at": datetime.datetime.now().isoformat(
        "T", "seconds"), "judged_during_the_run": before})


def measure_warehouse(topo: dict, net: int, state: Path, http, produced: int, timeout: float) -> dict:
    from topology_checks import airflow_token, run_dag

    airflow = f"http://127.{net}.2.50:{topo['ports']['airflow']}"
    password = json.loads((state / "offline-airflow" / "passwords.json").read_text())["admin"]
    token = airflow_token(airflow, password)
    t0 = time.time()
    run_dag(airflow, token, timeout=timeout)
    wall = time.time() - t0
    wh = state / "offline-airflow" / "data" / "warehouse"
    manifests = [json.loads(p.read_text()) for p in sorted((wh / "_manifests").glob("load-*.json"))]
    report = json.loads((wh / "_audit" / "report.json").read_text())
    rows = sum(m.get("rows", {}).get(TOPIC, 0) for m in manifests)
    quarantined = sum(m.get("quarantined", {}).get(TOPIC, 0) for m in manifests)
    last = manifests[-1] if manifests else {}
    load_s = (last["finished_at"] - last["started_at"]) if last else None
    cut_ms = int((last.get("planned_at") or last.get("started_at") or 0) * 1000)
    grace = report.get("grace_ms", 0)
    mine = [r for r in report["rows"] if r["topic"] == TOPIC]
    closed = [r for r in mine if r["window_end"] + grace < cut_ms]
    by_tier = {}
    for tier in ("live", "offline", "warehouse"):
        rs = [r for r in closed if r["tier"] == tier]
        by_tier[tier] = {"windows": len(rs), "complete": sum(1 for r in rs if r["missing"] == 0),
                         "missing": sum(r["missing"] for r in rs), "duplicates": sum(r["duplicates"] for r in rs)}
    expected = sum(r["expected"] for r in mine if r["tier"] == "warehouse")
    return {"dag_wall_s": round(wall, 1), "loads": len(manifests), "rows": rows, "quarantined": quarantined,
            "load_task_s": round(load_s, 2) if load_s else None,
            "rows_per_s": round(rows / load_s, 1) if load_s else None,
            "topic_seconds": last.get("seconds", {}).get(TOPIC), "audit_expected": expected,
            "producers_sent": produced, "closed_windows_by_tier": by_tier,
            "all_closed_complete": bool(closed) and all(r["missing"] == 0 for r in closed),
            "report_rows": len(mine)}


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

    topo = json.loads((REPO / "topology" / "default.json").read_text())
    net = fresh_loopback(topo)
    topo.update({"audit_window_ms": args.window_ms, "audit_grace_ms": args.grace_ms, "audit_emit_interval_ms": 1000,
                 "load_schedule": "none"})
    topo["datacenters"]["live"]["frontends"] = 0
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


# ---------------------------------------------------------------------------------------------------- output
def fmt(v, spec="{:,.0f}") -> str:
    return "—" if v is None else spec.format(v)


def table(results: dict) -> str:
    st = results["settings"]
    steps = results.get("steps", [])
    lines = [f"# The whole pipeline's throughput — {results.get('finished', '')}", "",
             f"Command: `{results['command']}` ({results['outcome']})", ""]
    for r in results.get("rejudged", []):
        lines += [f"Judged again after the run from its samples, with the criteria below: `{r['command']}` ({r['at']}). "
                  "During the run: " + ", ".join(f"{n} {'carried' if c else 'not carried'}"
                                                for n, c in r["judged_during_the_run"]) + ".", ""]
    lines += [
             f"The default topology (`topology/default.json`, {st.get('services', '?')} services, `logbus up` to all "
             f"healthy in {st.get('up_seconds', '?')} s) on loopback networks 127.{st['net']}.1 / 127.{st['net']}.2, "
             f"with audit windows of {st['window_ms'] / 1000:g} s, grace {st['grace_ms'] / 1000:g} s, counters "
             "emitting every second, the demo frontends off and the load DAG's schedule off. "
             f"{st['producers']} producer processes (`AuditedProducer`, acks=all, idempotent) send Avro page views "
             f"to `{TOPIC}` ({st['partitions']} partitions, RF 3): a {st['warmup_seconds']:g} s warm-up at "
             f"{st['rates'][0]:,}/s, then each offered rate for {st['step_seconds']:g} s; samples every "
             f"{st['sample_seconds']:g} s. Machine: {st['cpus']} cores, shared (load average at the start "
             f"{', '.join(f'{x:.2f}' for x in st['loadavg_at_start'])}).", ""]
    code = st.get("code")
    if code:
        lines += [f"Code: the working tree at commit {code['head']}"
                  + (", with uncommitted changes to " + ", ".join(f"`{f}`" for f in code["uncommitted"])
                     if code["uncommitted"] else ", no uncommitted change under platform/ or spark_jobs/") + ".", ""]
    lines += [
             "A step is carried when every audit window ending in it was seen 100% at the live and offline tiers "
             "within its end + grace, the mirror's lag stayed bounded (it grew by at most one second of the offered traffic over the step, and was not still growing in the step's second half), and the producers sent ≥ 95% of the offered "
             f"records. Rates are each stage's mean over the step without its first {SETTLE_S:g} s.", ""]
    hc = results.get("highest_carried")
    b = results.get("bottleneck") or {}
    lines += [f"**Highest carried rate: {fmt(hc)} msg/s**"
              + (" (no step was carried)" if hc is None else "")
              + (f"; first step not carried: {results['first_failed']}." if results.get("first_failed")
                 else "; the ladder's top was carried, so the pipeline's limit is above it (not established)."), "",
              f"**Bottleneck**: {b.get('label')} — {b.get('why')}."
              + (f" Its processes used {', '.join(f'{n} {v:g}' for n, v in b['cpu_cores'].items())} cores then; "
                 f"the topology and the producers together {b['machine_cores_busy']:g} of the machine's "
                 f"{st['cpus']}." if b.get("cpu_cores") else ""), ""]
    head = ["offered msg/s"] + [label.split(" (")[0] for _, label in STAGES] + [
        "mirror lag max / end", "live windows late / all (max delay s)", "offline windows late / all (max delay s)",
        "carried"]
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for s in steps:
        cells = [f"{s['rate']:,}"] + [fmt(s["rates"].get(stage)) for stage, _ in STAGES]
        cells.append(f"{fmt(s['mirror_lag_max'])} / {fmt(s['mirror_lag_end'])}")
        for t in TIERS:
            x = s["tiers"][t]
            cells.append(f"{x['late']} / {x['windows']} ({fmt(x['max_delay_s'], '{:g}')})")
        cells.append("yes" if s["carried"] else "**no**: " + "; ".join(s["why_not"]))
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "Stage rates in msg/s. Offline's end offsets include the exactly-once mirror's transaction markers "
              "(one per partition per transaction). Max delay: the latest a window of the step was first seen 100% "
              "after its end (sampled, so up to one sample interval late).", ""]
    if steps:
        lines += [f"Where the CPU went per step (cores: 1.0 = one core busy; the machine has {st['cpus']}; each "
                  "service's process tree, the busiest eight, and everything together):", "",
                  "| offered msg/s | busiest | all services + producers | whole machine (everyone's processes) |",
                  "|---|---|---|---|"]
        for s in steps:
            top = list(s.get("cpu_cores", {}).items())
            lines.append(f"| {s['rate']:,} | " + ", ".join(f"{n} {v:g}" for n, v in top[:8])
                         + f" | {sum(v for _, v in top):.2f} | {fmt(s.get('machine_cores'), '{:.2f}')} |")
        lines.append("")
    d = results.get("drain") or {}
    lines += [f"After the producers stopped: the pipeline drained (every window 100% at live and offline, counters "
              f"equal to live's records, mirror lag 0) in {fmt(d.get('seconds'), '{:g}')} s; windows never seen "
              f"complete: {d.get('incomplete_windows')}.", ""]
    w = results.get("warehouse")
    lines += ["## Warehouse", ""]
    if not w:
        lines += ["Not measured (`--no-warehouse`).", ""]
    elif "error" in w:
        lines += [f"The load failed or could not be measured: `{w['error']}`.", ""]
    else:
        tiers = w["closed_windows_by_tier"]
        lines += ["Measured after the ladder, not during it: one `logbus_load` run through Airflow's REST API "
                  "loaded everything produced while the producers were stopped (loading during the ladder would put "
                  "Spark on the same two cores as the stages being measured, and a load every few minutes is never "
                  "inside a 10 s grace period anyway).", "",
                  "| figure | value |", "|---|---|",
                  f"| records sent by the producers | {w['producers_sent']:,} |",
                  f"| expected by the audit (producers' monitoring events) | {w['audit_expected']:,} |",
                  f"| rows loaded into Parquet ({w['loads']} load) | {w['rows']:,} (quarantined {w['quarantined']}) |",
                  f"| load task (read, decode, write, publish) | {fmt(w['load_task_s'], '{:g}')} s → "
                  f"**{fmt(w['rows_per_s'])} rows/s** |",
                  f"| DAG run, trigger to success (Airflow, Spark start-up, plan, load, reconcile) | "
                  f"{w['dag_wall_s']:g} s |",
                  "| windows closed before the load's cut, 100% / all | "
                  + ", ".join(f"{t} {x['complete']} / {x['windows']}" for t, x in tiers.items()) + " |",
                  f"| every closed window 100% at every tier | **{'yes' if w['all_closed_complete'] else 'no'}** |",
                  ""]
        if hc and w.get("rows_per_s"):
            ratio = w["rows_per_s"] / hc
            lines += [f"The load's rate is {ratio:.1f}× the highest carried producer rate: a load "
                      + ("keeps up with it (each load takes less time than the traffic it loads took to arrive)."
                         if ratio >= 1 else "does **not** keep up with it: the warehouse is the bottleneck at that "
                         "rate."), ""]
    lines += ["## What this benchmark cannot establish", "",
              "- The warehouse tier is judged after the ladder from one load, not per step within the grace period.",
              "- Windows are sampled every few seconds: a window complete just before its grace ran out may be seen "
              "after it and count as late (conservative).",
              "- Everything — " + str(st.get("services", "the")) + " services, the producers, this sampler — shares the machine's cores; the limit found is "
              "the topology's on this machine, with other work on it possibly.",
              "- Above the first failed step nothing is measured: the ladder stops there.", "",
              f"Raw samples, windows and steps: [`{NAME}.json`]({NAME}.json); plot: [`{NAME}.png`]({NAME}.png).", ""]
    return "\n".join(lines)


def plot(results: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    samples = results["samples"]
    t0 = results["steps_planned"][0]["start"]
    fig, axes = plt.subplots(3, 1, figsize=(12, 11), sharex=True, gridspec_kw={"height_ratios": [3, 1.3, 1.6]})
    ax = axes[0]
    xs, ys = [], []
    for s in results["steps_planned"]:
        if results.get("stopped_at") and s["start"] >= results["stopped_at"]:
            break
        end = min(s["end"], results.get("stopped_at") or s["end"])
        xs += [s["start"] - t0, end - t0]
        ys += [s["rate"], s["rate"]]
    ax.plot(xs, ys, color="black", linewidth=2.2, label="offered (step ladder)")
    colors = ["tab:gray", "tab:blue", "tab:cyan", "tab:orange", "tab:green", "tab:olive"]
    for (stage, label), color in zip(STAGES, colors):
        pts = series(samples, stage)
        ax.plot([t - t0 for t, _ in pts], [v for _, v in pts], color=color, linewidth=1, label=label)
    ax.set_ylabel("records/s")
    ax.set_yscale("symlog", linthresh=1000)
    for s in results.get("steps", []):
        ax.axvspan(s["start"] - t0, s["end"] - t0, color="tab:green" if s["carried"] else "tab:red", alpha=0.07)
        ax.text((s["start"] + s["end"]) / 2 - t0, s["rate"] * 1.25,
                "carried" if s["carried"] else "not carried", ha="center", fontsize=8,
                color="tab:green" if s["carried"] else "tab:red")
    if results.get("stopped_at"):
        ax.axvline(results["stopped_at"] - t0, color="tab:red", linestyle=":", label="producers stopped")
    ax.legend(loc="upper left", fontsize=8)
    hc = results.get("highest_carried")
    ax.set_title(f"The whole pipeline: highest carried {hc:,} msg/s; bottleneck: "
                 f"{(results.get('bottleneck') or {}).get('label')}" if hc else
                 f"The whole pipeline: no step carried; bottleneck: {(results.get('bottleneck') or {}).get('label')}",
                 fontsize=11)
    ax = axes[1]
    lag = [(s["t"] - t0, s["mirror_lag"]) for s in samples if s["mirror_lag"] is not None]
    ax.plot([t for t, _ in lag], [v for _, v in lag], color="tab:orange", label="mirror lag (records)")
    ax.set_ylabel("records behind")
    ax.legend(loc="upper left", fontsize=8)
    ax = axes[2]
    grace = results["settings"]["grace_ms"] / 1000
    for tier, color, marker in (("live", "tab:blue", "o"), ("offline", "tab:green", "s")):
        ws = [w for w in results["windows"].values() if w["tier"] == tier]
        ok = [(w["end"] / 1000 - t0, w["first_complete"] - w["end"] / 1000) for w in ws if w["first_complete"]]
        never = [w["end"] / 1000 - t0 for w in ws if not w["first_complete"]]
        ax.scatter([t for t, _ in ok], [d for _, d in ok], s=28 if tier == "live" else 10, color=color,
                   marker=marker, facecolors="none" if tier == "live" else color,
                   label=f"{tier}: first seen 100%, s after the window's end")
        if never:
            ax.scatter(never, [grace * 1.5] * len(never), s=25, color=color, marker="x",
                       label=f"{tier}: never seen 100%")
    ax.axhline(grace, color="tab:red", linestyle="--", label=f"grace ({grace:g} s)")
    ax.set_ylabel("window completion delay (s)")
    ax.set_xlabel("seconds since the ladder started")
    ax.legend(loc="upper left", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def write(results: dict, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{NAME}.json").write_text(json.dumps(results, indent=1) + "\n")
    (out / f"{NAME}.md").write_text(table(results))
    if results.get("steps_planned"):
        plot(results, out / f"{NAME}.png")
    print((out / f"{NAME}.md").read_text())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rates", default="1000,2000,5000,10000,14000,20000,28000,40000,56000,80000",
                        help="offered rates (msg/s), one step each")
    parser.add_argument("--step-seconds", type=float, default=30)
    parser.add_argument("--warmup", type=float, default=15, help="seconds at the first rate, not judged")
    parser.add_argument("--producers", type=int, default=2)
    parser.add_argument("--window-ms", type=int, default=5000)
    parser.add_argument("--grace-ms", type=int, default=10000)
    parser.add_argument("--sample-seconds", type=float, default=2)
    parser.add_argument("--drain-seconds", type=float, default=150, help="at most, after the producers stop")
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
