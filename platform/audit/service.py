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

Security (README "Audit service"): ``listeners=https://...`` with the server's ``ssl.keystore.*``,
``ssl.key.password``, ``ssl.client.authentication`` (settings.http_server); a login on every route but
``/health`` and ``/metrics`` (Prometheus' text format, counts only): ``authentication.method=BASIC`` (``authentication.users.file`` or ``authentication.jaas.file``, a Jetty
password file as the registry's), ``BEARER`` (``authentication.bearer.tokens``) or ``BASIC,BEARER``;
``authentication.realm``, ``authentication.roles``. The readers' Kafka client security: ``security.protocol``,
``sasl.*``, ``ssl.truststore.location`` / ``ssl.ca.location``, ``ssl.certificate.location`` /
``ssl.key.location`` (``ssl.keystore.*`` is the HTTPS server's); the registry client's:
``schema.registry.basic.auth.user.info``, ``schema.registry.ssl.ca.location`` (Confluent's serializer names).
"""

from __future__ import annotations

import logging
import re
import time
from datetime import datetime, timezone
from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, JSONResponse, Response

from audit.collector import AuditDecoder, AuditStore, ClusterReader, split_clusters
from audit.reconcile import reconcile
from audit.render import completeness_plot_png, render_page, tier_order
from settings import http_auth, http_server, registry_client
from settings.properties import ConfigError
from settings.security import KEYS as CLIENT_SECURITY_KEYS
from settings.security import ClientSecurity

log = logging.getLogger(__name__)
DEFAULTS = {"listeners": "http://127.0.0.1:8090", "schema.registry.url": None, "audit.tiers": "",
            "audit.grace.ms": "60000", "audit.topic": "_audit"}
AUTH_KEYS = ("authentication.method", "authentication.realm", "authentication.roles", "authentication.users.file",
             "authentication.jaas.file", "authentication.bearer.tokens")
SERVER_ONLY = ("ssl.keystore.location", "ssl.keystore.password", "ssl.key.password", "ssl.keystore.type",
               "ssl.client.authentication")  # the HTTPS server's, not the Kafka client's
REALM = "logbus-audit"


class ServiceConfigError(ValueError):
    pass


class ServiceConfig:
    def __init__(self, values: dict[str, str]):
        clusters, rest = split_clusters(values)
        registry_keys, rest = registry_client.split(rest)
        known = set(DEFAULTS) | set(AUTH_KEYS) | set(http_server.SERVER_SSL_KEYS) | CLIENT_SECURITY_KEYS
        unknown = [key for key in rest if key not in known]
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
        try:
            self.listeners = http_server.parse_listeners(merged["listeners"])
            http_server.check_ssl(values, self.listeners)
            self.authenticator = http_auth.from_properties(values, ("NONE", "BASIC", "BEARER"),
                                                           default_realm=REALM)
            client = {k: v for k, v in rest.items() if k in CLIENT_SECURITY_KEYS and k not in SERVER_ONLY}
            self.client_conf = ClientSecurity.from_properties(client).librdkafka() if client else {}
        except ConfigError as exc:
            raise ServiceConfigError(str(exc)) from None
        self.host, self.port = self.listeners[0].host, self.listeners[0].port
        self.server_props = {k: v for k, v in values.items() if k in http_server.SERVER_SSL_KEYS}
        self.clusters = clusters
        self.registry_url = merged["schema.registry.url"]
        self.registry_conf = registry_client.registry_conf(registry_keys, self.registry_url)
        self.registry_conf.pop("basic.auth.credentials.source", None)  # the Python client refuses the Java key
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
        decoder = AuditDecoder(config.registry_conf)
        self.readers = [ClusterReader(name, bootstrap, self.store, decoder, config.topic, config.client_conf)
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
    """The routes, behind the configured login (``/health`` open)."""
    app = FastAPI(title="logbus audit", docs_url=None, redoc_url=None, openapi_url=None)

    @app.get("/health")
    def health():
        return {"status": "ok"}

    @app.get("/metrics")
    def metrics():  # Prometheus' text format; open like /health (counts only, no record content)
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

        from audit.metrics import service_families
        from telemetry.exposition import registry_for

        return Response(generate_latest(registry_for(lambda: service_families(service.rows()))),
                        media_type=CONTENT_TYPE_LATEST)

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

    if service.config.authenticator is None:
        return app
    return http_auth.HttpAuth(app, service.config.authenticator, open_paths=("/health", "/metrics"))


def run(path: str) -> int:
    import uvicorn

    config = ServiceConfig.load(path)
    service = AuditService(config)
    service.start()
    listener = config.listeners[0]
    server = uvicorn.Server(http_server.uvicorn_config(create_app(service), config.server_props, listener,
                                                       log_level="warning", lifespan="off", access_log=False))
    log.info("audit service on %s reading %s from %s (authentication %s)", listener.url, config.topic,
             ", ".join(f"{n}={b}" for n, b in config.clusters.items()),
             "none" if config.authenticator is None else "required")
    try:
        server.run()
    finally:
        service.stop()
    return 0
