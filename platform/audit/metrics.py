"""The audit's metrics: a tier counter's (``logbus audit-counter --metrics-listener``) and the audit service's
(``GET /metrics``). The service's are the on-call signal: per tier, how many windows are complete, pending,
lost or duplicated, and the completeness of the newest window whose grace period has passed — below 100 there
means a closed window is incomplete (the ``LogbusAuditWindowIncomplete`` alert)."""

from __future__ import annotations

from telemetry.exposition import counter, gauge


def counter_families(c) -> list:
    tier = [((c.tier, ), None)]
    counted = dict(c.counted)  # one C-level copy under the GIL: safe against the counting thread
    return [
        counter("logbus_audit_counter_records", "Audited records counted, per topic.", labels=["tier", "topic"],
                values=[((c.tier, t), n) for t, n in sorted(counted.items())]),
        counter("logbus_audit_counter_rounds", "Rounds of counts published to _audit.", labels=["tier"],
                values=[(k, c.rounds) for k, _ in tier]),
        counter("logbus_audit_counter_malformed", "Monitoring records that could not be read.", labels=["tier"],
                values=[(k, c.malformed) for k, _ in tier]),
        counter("logbus_audit_counter_restarts", "Restarts after an error (from the last complete round).",
                labels=["tier"], values=[(k, c.restarts) for k, _ in tier]),
        gauge("logbus_audit_counter_windows", "Windows (topic, window) the counter holds counts of.",
              labels=["tier"], values=[((c.tier, ), len({(t, s) for t, s, _ in list(c.counts)}))]),
    ]


def service_families(rows: list[dict]) -> list:
    """From the reconciled rows (``reconcile.Row.as_dict``): windows per tier and status, and per tier and topic
    the completeness of the newest closed window (status other than pending)."""
    by_status: dict[tuple[str, str], int] = {}
    newest: dict[tuple[str, str], tuple[int, float]] = {}
    for r in rows:
        by_status[(r["tier"], r["status"])] = by_status.get((r["tier"], r["status"]), 0) + 1
        if r["status"] != "pending":
            key = (r["tier"], r["topic"])
            if key not in newest or r["window_end"] > newest[key][0]:
                newest[key] = (r["window_end"], r["completeness"])
    return [
        gauge("logbus_audit_windows", "Audit windows per tier and status (complete, pending, lost, duplicated).",
              labels=["tier", "status"], values=sorted(by_status.items())),
        gauge("logbus_audit_closed_window_completeness_percent",
              "Completeness of the newest window past its grace period, per tier and topic.",
              labels=["tier", "topic"], values=[(k, v[1]) for k, v in sorted(newest.items())]),
        gauge("logbus_audit_closed_window_end_seconds", "End of that window (Unix time).",
              labels=["tier", "topic"], values=[(k, v[0] / 1000) for k, v in sorted(newest.items())]),
    ]
