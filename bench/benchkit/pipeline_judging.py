"""The whole-pipeline benchmark's analysis: each stage's rate from the samples, whether a step was carried, the
bottleneck of the first step that was not, and the judging of a recorded run again (``--rejudge``)."""

from __future__ import annotations

import datetime

from benchkit.pipeline_stages import STAGES, TIERS

RATE_TOLERANCE = 0.95      # a stage keeps up when its rate is at least this share of the offered rate
LAG_SLOPE_SHARE = 0.02     # the mirror's lag grows when its slope exceeds this share of the offered rate
SETTLE_S = 5.0             # seconds at the start of a step left out of its rates (the rates follow the step)


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


def request_rates(samples: list[dict], t0: float, t1: float) -> dict[str, dict[str, float]]:
    """Requests a second each datacenter's brokers answered between t0 and t1, by API (busiest first); runs
    recorded before the samples had them give {}."""
    out = {}
    for dc in ("live", "offline"):
        inside = [s for s in samples if t0 <= s["t"] <= t1 and s.get(f"{dc}_requests")]
        if len(inside) < 2:
            continue
        a, b = inside[0][f"{dc}_requests"], inside[-1][f"{dc}_requests"]
        span = inside[-1]["t"] - inside[0]["t"]
        rates = {api: round((b[api] - a.get(api, 0.0)) / span, 1) for api in b}
        out[dc] = dict(sorted(((k, v) for k, v in rates.items() if v > 0), key=lambda kv: -kv[1]))
    return out


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
    out["requests_per_s"] = request_rates(samples, s0 + SETTLE_S, s1)
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
        reasons.append(f"the producers sent {100 * (out['producer_sent_share'] or 0):.1f}% of the offered rate")
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
