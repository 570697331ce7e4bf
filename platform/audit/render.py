"""The audit report as HTML: a table per topic with one line per window and every tier side by side, and a
matplotlib plot of completeness per tier over time. Input is report rows as plain dicts (the JSON of
``GET /api/report`` or the loads' report file), so the audit service and the Airflow page render the same way."""

from __future__ import annotations

import base64
import html
import io
from collections import defaultdict
from datetime import datetime, timedelta, timezone

STATUS_COLOURS = {"complete": "#d9f2d9", "pending": "#eeeeee", "lost": "#f7c6c6", "duplicated": "#fde9b8"}


def utc_time(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, timezone.utc).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


def tier_order(rows: list[dict], preferred: list[str] | None = None) -> list[str]:
    """The preferred tiers first, each followed by its per-source rows (``<tier>/<source>``), then the rest."""
    seen = {r["tier"] for r in rows}
    first = []
    for t in preferred or []:
        if t in seen:
            first.append(t)
        first.extend(sorted(s for s in seen if s.startswith(f"{t}/") and s not in first))
    return first + sorted(seen - set(first))


def completeness_series(rows: list[dict], tiers: list[str]) -> dict[str, list[tuple[int, float, bool]]]:
    """Per tier, (window start, completeness %, pending) over all topics, weighted by the expected counts;
    ``pending``: some topic's window is still within its grace period (not closed: no loss yet)."""
    totals: dict[tuple[str, int], list[int]] = defaultdict(lambda: [0, 0, 0])
    for r in rows:
        t = totals[(r["tier"], r["window_start"])]
        t[0] += r["expected"]
        t[1] += r["expected"] - r["missing"]
        t[2] |= r["status"] == "pending"
    out: dict[str, list[tuple[int, float, bool]]] = {tier: [] for tier in tiers}
    for (tier, start), (expected, present, pending) in sorted(totals.items(), key=lambda kv: kv[0][1]):
        if tier in out:
            out[tier].append((start, 100.0 if expected == 0 else 100.0 * present / expected, bool(pending)))
    return out


PENDING_LABEL = "hollow: pending (window not closed yet, not a loss)"


def completeness_plot_png(rows: list[dict], tiers: list[str]) -> bytes:
    fig = completeness_figure(rows, tiers)
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return buf.getvalue()


def completeness_figure(rows: list[dict], tiers: list[str]):
    """Completeness per tier over time: closed windows as a line with filled markers, windows still in their
    grace period as hollow markers off the line (a warehouse window not loaded yet reads 0% until it is: not a
    loss), with a legend entry saying so."""
    from matplotlib.figure import Figure  # no pyplot: nothing global, nothing to close, no GUI backend

    fig = Figure(figsize=(9, 3.2), dpi=100)
    ax = fig.add_subplot()
    lowest = 100.0
    starts = sorted({r["window_start"] for r in rows})
    if starts:
        window = max(r["window_end"] - r["window_start"] for r in rows)
        pad = timedelta(milliseconds=max(window, (starts[-1] - starts[0]) // 10))
        ax.set_xlim(datetime.fromtimestamp(starts[0] / 1000, timezone.utc) - pad,
                    datetime.fromtimestamp(starts[-1] / 1000, timezone.utc) + pad)
    any_pending = False
    for tier, points in completeness_series(rows, tiers).items():
        if points:
            closed = [(datetime.fromtimestamp(s / 1000, timezone.utc), c) for s, c, p in points if not p]
            pending = [(datetime.fromtimestamp(s / 1000, timezone.utc), c) for s, c, p in points if p]
            lowest = min(lowest, *(c for _, c in closed or pending))
            line = ax.plot([x for x, _ in closed], [c for _, c in closed], marker="o", markersize=3, label=tier)[0]
            if pending:
                any_pending = True
                ax.plot([x for x, _ in pending], [c for _, c in pending], linestyle="none", marker="o",
                        markersize=5, markerfacecolor="none", markeredgecolor=line.get_color(), gid="pending")
    ax.set_ylabel("completeness %")
    ax.set_xlabel("window start (UTC)")
    ax.set_ylim(max(0.0, lowest - 5), 100.5 + (100 - lowest) * 0.05)
    ax.grid(True, alpha=0.3)
    if any_pending:  # a legend entry for the hollow markers (grey: whatever the tier)
        ax.plot([], [], linestyle="none", marker="o", markersize=5, markerfacecolor="none", markeredgecolor="grey",
                label=PENDING_LABEL)
    if tiers:
        ax.legend(loc="lower left", fontsize=8)
    fig.autofmt_xdate()
    fig.tight_layout()
    return fig


def _missing_text(r: dict) -> str:
    parts = []
    for pid, ranges in sorted((r.get("missing_sequences") or {}).items()):
        seqs = ", ".join(f"{a}" if a == b else f"{a}-{b}" for a, b in ranges[:20])
        more = " ..." if len(ranges) > 20 else ""
        parts.append(f"{pid}: {seqs}{more}")
    return "; ".join(parts)


def render_table(rows: list[dict], tiers: list[str]) -> str:
    by_topic: dict[str, dict[tuple[int, int], dict[str, dict]]] = defaultdict(lambda: defaultdict(dict))
    for r in rows:
        by_topic[r["topic"]][(r["window_start"], r["window_end"])][r["tier"]] = r
    out = []
    cols = ("received", "distinct", "missing", "duplicates", "completeness", "status")
    for topic in sorted(by_topic):
        out.append(f"<h2>{html.escape(topic)}</h2><div class='scroll'>"
                   f"<table class='report' data-topic='{html.escape(topic)}'>")
        out.append("<tr><th rowspan=2>window start (UTC)</th><th rowspan=2>window end</th>"
                   "<th rowspan=2>expected</th>")
        out.extend(f"<th colspan={len(cols)}>{html.escape(t)}</th>" for t in tiers)
        out.append("</tr><tr>" + "".join(f"<th>{c}</th>" for _ in tiers for c in cols) + "</tr>")
        for (start, end), per_tier in sorted(by_topic[topic].items()):
            expected = next(iter(per_tier.values()))["expected"]
            out.append(f"<tr><td>{utc_time(start)}</td><td>{utc_time(end)}</td><td class=num>{expected}</td>")
            for tier in tiers:
                r = per_tier.get(tier)
                if r is None:
                    out.append(f"<td colspan={len(cols)}>no data</td>")
                    continue
                colour = STATUS_COLOURS.get(r["status"], "#ffffff")
                title = html.escape(_missing_text(r), quote=True)
                out.append("".join(f"<td class=num style='background:{colour}'>{r[c]}</td>"
                                   for c in ("received", "distinct", "missing", "duplicates")))
                out.append(f"<td class=num style='background:{colour}'>{r['completeness']:.2f}%</td>"
                           f"<td style='background:{colour}' title='{title}' class='status'>"
                           f"{html.escape(r['status'])}</td>")
            out.append("</tr>")
        out.append("</table></div>")
        # missing sequences of closed windows only: a pending window's gaps may still arrive
        lost = [r for per_tier in by_topic[topic].values() for r in per_tier.values()
                if r.get("missing") and r["status"] != "pending"]
        if lost:
            out.append("<p>Missing sequences:</p><ul>")
            out.extend(f"<li>{html.escape(r['tier'])} {utc_time(r['window_start'])}: {html.escape(_missing_text(r))}"
                       "</li>" for r in lost)
            out.append("</ul>")
    return "".join(out)


STYLE = """
body { font-family: sans-serif; margin: 1.5em; }
div.scroll { max-width: 100%; overflow-x: auto; }  /* a wide table scrolls inside its section, not the page */
table.report { border-collapse: collapse; margin-bottom: 1em; font-size: 13px; }
table.report th, table.report td { border: 1px solid #bbb; padding: 2px 6px; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
.summary { color: #444; }
"""


def render_page(rows: list[dict], tiers: list[str] | None = None, title: str = "logbus audit",
                notes: list[str] = (), standalone: bool = True) -> str:
    """The whole report; ``standalone=False`` gives a fragment to embed in another page (the Airflow view)."""
    tiers = tier_order(rows, tiers)
    png = base64.b64encode(completeness_plot_png(rows, tiers)).decode() if rows else ""
    counts = defaultdict(int)
    for r in rows:
        counts[r["status"]] += 1
    summary = ", ".join(f"{n} {s}" for s, n in sorted(counts.items())) or "no windows yet"
    body = [f"<h1>{html.escape(title)}</h1>",
            f"<p class=summary>{len(rows)} rows (topic, window, tier): {html.escape(summary)}. Tiers: "
            f"{html.escape(', '.join(tiers) or 'none')}.</p>"]
    body.extend(f"<p class=summary>{html.escape(n)}</p>" for n in notes)
    if png:
        body.append(f"<img alt='completeness per tier' src='data:image/png;base64,{png}'>")
    body.append(render_table(rows, tiers))
    fragment = "<style>" + STYLE + "</style>" + "".join(body)
    if not standalone:
        return fragment
    return ("<!doctype html><html><head><meta charset='utf-8'><title>" + html.escape(title) + "</title></head>"
            "<body>" + fragment + "</body></html>")
