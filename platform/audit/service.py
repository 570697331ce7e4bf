"""``logbus audit-service CONFIG``: follows ``_audit`` of every configured cluster and serves the reconciled report.

Routes: ``GET /api/report?topic=&from=&to=&tier=`` (JSON list of rows), ``GET /api/status`` (readers, malformed
records by reason), ``GET /plot.png`` and ``GET /`` (the HTML report, same query parameters). ``from``/``to`` take
milliseconds since the epoch or an ISO-8601 time (UTC when no zone is given) and select windows that overlap
[from, to). Bad parameters get HTTP 400 with ``{"error_code": 400, "message": ...}``.

Config (Java properties):

    listeners=http://127.0.0.1:8090
    schema.registry.url=http://127.0.0.1:8081
    audit.cluster.live.bootstrap.servers=127.0.1.1:9092
    audit.cluster.offline.bootstrap.servers=127.0.2.1:9092
    audit.tiers=live,offline        # column order (tiers seen in events but not listed follow)
    audit.grace.ms=60000            # a window is pending until its end + grace
    audit.topic=_audit
"""

from __future__ import annotations

import logging
import re
import time
from datetime import datetime, timezone
from pathlib import Path
from urllib.parse import urlparse

from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, JSONResponse, Response

from audit.collector import AuditDecoder, AuditStore, ClusterReader, split_clusters
from audit.reconcile import reconcile
from audit.render import completeness_plot_png, render_page, tier_order

log = logging.getLogger(__name__)
DEFAULTS = {"listeners": "http://127.0.0.1:8090", "schema.registry.url": None, "audit.tiers": "",
            "audit.grace.ms": "60000", "audit.topic": "_audit"}


class ServiceConfigError(ValueError):
    pass


class ServiceConfig:
    def __init__(self, values: dict[str, str]):
        clusters, rest = split_clusters(values)
        unknown = [key for key in rest if key not in DEFAULTS]
        if unknown:
            raise ServiceConfigError(f"unknown config key {unknown[0]!r}")
        if not clusters:
            raise ServiceConfigError("at least one audit.cluster.<name>.bootstrap.servers is required")
        merged = {k: values.get(k, v) for k, v in DEFAULTS.items()}
        if not merged["schema.registry.url"]:
            raise ServiceConfigError("schema.registry.url is required")
        try:
            self.grace_ms = int(merged["audit.grace.ms"])
        except ValueError:
            raise ServiceConfigError("audit.grace.ms must be an integer") from None
        url = urlparse(merged["listeners"].split(",")[0].strip())
        if url.scheme != "http" or not url.hostname or not url.port:
            raise ServiceConfigError(f"listeners must look like http://host:port, got {merged['listeners']!r}")
        self.host, self.port = url.hostname, url.port
        self.clusters = clusters
        self.registry_url = merged["schema.registry.url"]
        self.tiers = [t.strip() for t in merged["audit.tiers"].split(",") if t.strip()]
        self.topic = merged["audit.topic"]

    @classmethod
    def load(cls, path: str) -> "ServiceConfig":
        from settings.properties import ConfigError, parse_properties

        try:
            return cls(parse_properties(Path(path).read_text()))
        except OSError as exc:
            raise ServiceConfigError(f"cannot read {path}: {exc.strerror}") from None
        except ConfigError as exc:
            raise ServiceConfigError(str(exc)) from None


def parse_time(value: str | None, name: str) -> int | None:
    if value is None or value == "":
        return None
    if re.fullmatch(r"-?\d+", value):
        return int(value)
    try:
        dt = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"{name} must be milliseconds since the epoch or an ISO-8601 time, got {value!r}") from None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=timezone.utc)
    return int(dt.timestamp() * 1000)


def select(rows: list[dict], topic: str | None, start: int | None, end: int | None, tier: str | None) -> list[dict]:
    return [r for r in rows
            if (not topic or r["topic"] == topic) and (not tier or r["tier"] == tier)
            and (start is None or r["window_end"] > start) and (end is None or r["window_start"] < end)]


class AuditService:
    def __init__(self, config: ServiceConfig):
        self.config = config
        self.store = AuditStore()
        decoder = AuditDecoder(config.registry_url)
        self.readers = [ClusterReader(name, bootstrap, self.store, decoder, config.topic)
                        for name, bootstrap in config.clusters.items()]

    def start(self) -> None:
        for r in self.readers:
            r.start()

    def stop(self) -> None:
        for r in self.readers:
            r.stop()
        for r in self.readers:
            r.join(15)

    def rows(self) -> list[dict]:
        rows = reconcile(self.store.events(), int(time.time() * 1000), self.config.grace_ms, self.config.tiers)
        return [r.as_dict() for r in rows]

    def status(self) -> dict:
        return {**self.store.stats(), "grace_ms": self.config.grace_ms,
                "clusters": {r.cluster: r.status() for r in self.readers}}


def create_app(service: AuditService):
    app = FastAPI(title="logbus audit", docs_url=None, redoc_url=None, openapi_url=None)

    def query(request: Request) -> list[dict] | JSONResponse:
        q = request.query_params
        try:
            start, end = parse_time(q.get("from"), "from"), parse_time(q.get("to"), "to")
        except ValueError as exc:
            return JSONResponse({"error_code": 400, "message": str(exc)}, status_code=400)
        return select(service.rows(), q.get("topic"), start, end, q.get("tier"))

    @app.get("/api/report")
    def report(request: Request):
        rows = query(request)
        return rows if isinstance(rows, JSONResponse) else JSONResponse(rows)

    @app.get("/api/status")
    def status():
        return service.status()

    @app.get("/plot.png")
    def plot(request: Request):
        rows = query(request)
        if isinstance(rows, JSONResponse):
            return rows
        return Response(completeness_plot_png(rows, tier_order(rows, service.config.tiers)), media_type="image/png")

    @app.get("/", response_class=HTMLResponse)
    def page(request: Request):
        rows = query(request)
        if isinstance(rows, JSONResponse):
            return rows
        s = service.status()
        clusters = ", ".join(f"{n} ({c['bootstrap']})" for n, c in s["clusters"].items())
        notes = [f"Clusters: {clusters}. "
                 f"Audit records read: {s['records_read']}, malformed: {s['malformed']}"
                 + (f" {s['malformed_by_reason']}" if s["malformed"] else "")
                 + f". Windows are pending until their end + {s['grace_ms']} ms."]
        return HTMLResponse(render_page(rows, service.config.tiers, notes=notes))

    return app


def run(path: str) -> int:
    import uvicorn

    config = ServiceConfig.load(path)
    service = AuditService(config)
    service.start()
    server = uvicorn.Server(uvicorn.Config(create_app(service), host=config.host, port=config.port,
                                           log_level="warning", lifespan="off", access_log=False))
    log.info("audit service on http://%s:%d reading %s from %s", config.host, config.port, config.topic,
             ", ".join(f"{n}={b}" for n, b in config.clusters.items()))
    try:
        server.run()
    finally:
        service.stop()
    return 0
