"""The whole-pipeline benchmark's outputs: ``<out>/pipeline_benchmark.{md,json,png}``, the Markdown table of the
steps, the warehouse and the limits, and the plot of each stage's rate over time."""

from __future__ import annotations

import json
from pathlib import Path

from benchkit.pipeline_judging import SETTLE_S, series
from benchkit.pipeline_stages import STAGES, TIERS, TOPIC

NAME = "pipeline_benchmark"


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
    if any(s.get("requests_per_s") for s in steps):
        lines += ["Requests a second the brokers answered per step (each datacenter's three brokers together, by "
                  "API, busiest first; the brokers' CPU follows these more than the message rate):", "",
                  "| offered msg/s | live brokers | offline brokers |", "|---|---|---|"]
        for s in steps:
            r = s.get("requests_per_s") or {}
            cells = [", ".join(f"{api} {v:,.0f}" if v >= 1 else f"{api} {v:.1f}" for api, v in r.get(dc, {}).items()
                               if v >= 0.1) or "–"
                     for dc in ("live", "offline")]
            lines.append(f"| {s['rate']:,} | " + " | ".join(cells) + " |")
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
