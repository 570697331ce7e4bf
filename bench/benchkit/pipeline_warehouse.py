"""The whole-pipeline benchmark's warehouse tier: one ``logbus_load`` run through Airflow's REST API after the
ladder, its rows against the audit's expected counts and its own rate."""

from __future__ import annotations

import json
import time
from pathlib import Path

from benchkit.pipeline_stages import TOPIC


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
