"""The "Audit" page inside Airflow: a FastAPI app the ``logbus_audit`` Airflow plugin mounts at ``/logbus-audit``
(and an entry in Airflow's navigation that shows it in the UI). It renders the report the ``logbus_load`` DAG's
reconcile task wrote (``<warehouse>/_audit/report.json``) with :func:`audit.render.render_page`, the audit
service's renderer. Every route requires an Airflow login (the JWT cookie the Airflow UI sets, or a bearer
token): FastAPI apps of plugins are not protected by Airflow on their own.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from urllib.parse import urlparse


def report_file() -> Path | None:
    """``<warehouse>/_audit/report.json`` of the load config named by ``LOGBUS_LOAD_CONFIG`` or the Variable."""
    explicit = os.environ.get("LOGBUS_AUDIT_REPORT")
    if explicit:
        return Path(explicit)
    from spark_jobs.config import LoadConfig
    from spark_jobs.dag import config_path

    url = urlparse(LoadConfig.load(config_path()).warehouse)
    if url.scheme != "file":
        return None  # the page reads local warehouses only; hdfs:// / s3a:// reports are read with Spark
    return Path(url.path) / "_audit" / "report.json"


def create_app(require_login: bool = True):
    from fastapi import Depends, FastAPI
    from fastapi.responses import HTMLResponse, JSONResponse

    from audit.render import render_page, utc_time

    dependencies = []
    if require_login:
        from airflow.api_fastapi.core_api.security import requires_authenticated

        dependencies = [Depends(requires_authenticated())]
    app = FastAPI(title="logbus audit (Airflow)", dependencies=dependencies, docs_url=None, redoc_url=None,
                  openapi_url=None)

    def load() -> dict | None:
        path = report_file()
        if path is None or not path.exists():
            return None
        return json.loads(path.read_text())

    @app.get("/", response_class=HTMLResponse)
    def page():
        report = load()
        if report is None:
            return HTMLResponse("<h1>logbus audit</h1><p>No report yet: the logbus_load DAG's reconcile task "
                                "writes it.</p>")
        notes = [f"Report of the logbus_load DAG, written {utc_time(report['generated_at'])} UTC; windows are "
                 f"pending until their end + {report['grace_ms']} ms. Malformed audit records: "
                 f"{report.get('malformed') or 'none'}."]
        return HTMLResponse(render_page(report["rows"], report.get("tiers"), title="logbus audit (warehouse)",
                                        notes=notes))

    @app.get("/api/report")
    def rows():
        report = load()
        return JSONResponse(report["rows"] if report else [])

    return app


def create_metrics_app():
    """``/logbus-metrics/metrics``: the loads' metrics (audit.load_metrics) in Prometheus' text format, without a
    login (counts only), for the topology's Prometheus."""
    from fastapi import FastAPI
    from fastapi.responses import Response

    app = FastAPI(title="logbus load metrics", docs_url=None, redoc_url=None, openapi_url=None)

    @app.get("/metrics")
    def metrics():
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

        from audit.load_metrics import families, read_manifests
        from telemetry.exposition import registry_for

        report = report_file()
        manifests = read_manifests(report.parent.parent) if report is not None else []
        return Response(generate_latest(registry_for(lambda: families(manifests))), media_type=CONTENT_TYPE_LATEST)

    return app
