"""Airflow plugin: an "Audit" entry in the navigation showing the logbus audit report (audit/airflow_page.py)."""

import sys
from pathlib import Path

from airflow.plugins_manager import AirflowPlugin

_REPO = Path(__file__).resolve().parent.parent
for _p in (str(_REPO), str(_REPO / "platform")):
    if _p not in sys.path:
        sys.path.insert(0, _p)

from audit.airflow_page import create_app, create_metrics_app  # noqa: E402


class LogbusAuditPlugin(AirflowPlugin):
    name = "logbus_audit"
    fastapi_apps = [{"app": create_app(), "url_prefix": "/logbus-audit", "name": "logbus audit"},
                    {"app": create_metrics_app(), "url_prefix": "/logbus-metrics", "name": "logbus load metrics"}]
    external_views = [{"name": "Audit", "href": "logbus-audit/", "url_route": "logbus-audit", "destination": "nav",
                       "nav_top_level": True}]
