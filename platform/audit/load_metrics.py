"""The warehouse loads' metrics, from the manifests the loads publish (``<warehouse>/_manifests/load-<id>.json``:
the commit point of each load), served by the ``logbus_audit`` Airflow plugin at ``/logbus-metrics/metrics``
(no login: counts only) for the topology's Prometheus. A load is a batch job, so its numbers live in what it
committed, not in a process: loads published, rows and Parquet bytes per topic (all loads, and the newest), the
newest load's duration and when it finished."""

from __future__ import annotations

import json
from pathlib import Path

from telemetry.exposition import counter, gauge


def read_manifests(warehouse_dir: Path) -> list[dict]:
    out = []
    for path in sorted((warehouse_dir / "_manifests").glob("load-*.json")):
        try:
            out.append(json.loads(path.read_text()))
        except (OSError, ValueError):
            continue  # being written (temp + rename: rare), or unreadable: left out of this scrape
    return sorted(out, key=lambda m: m.get("load_id", 0))


def families(manifests: list[dict]) -> list:
    rows: dict[str, int] = {}
    nbytes: dict[str, int] = {}
    for m in manifests:
        for topic, n in (m.get("rows") or {}).items():
            rows[topic] = rows.get(topic, 0) + n
        for topic, n in (m.get("bytes") or {}).items():
            nbytes[topic] = nbytes.get(topic, 0) + n
    newest = manifests[-1] if manifests else {}
    duration = (newest.get("finished_at", 0) - newest.get("started_at", 0)) if newest else 0
    return [
        counter("logbus_load_runs", "Loads published to the warehouse.", len(manifests)),
        counter("logbus_load_rows", "Rows published, per topic (all loads).", labels=["topic"],
                values=[((t, ), n) for t, n in sorted(rows.items())]),
        counter("logbus_load_bytes", "Parquet bytes published, per topic (all loads).", labels=["topic"],
                values=[((t, ), n) for t, n in sorted(nbytes.items())]),
        gauge("logbus_load_last_rows", "Rows of the newest load, per topic.", labels=["topic"],
              values=[((t, ), n) for t, n in sorted((newest.get("rows") or {}).items())]),
        gauge("logbus_load_last_duration_seconds", "Duration of the newest load (read, decode, write, counts).",
              duration),
        gauge("logbus_load_last_success_timestamp_seconds", "When the newest load finished (Unix time).",
              newest.get("finished_at", 0)),
    ]
