"""``logbus schema-registry CONFIG``: replay the store, then serve the HTTP API with uvicorn until SIGTERM."""

from __future__ import annotations

import asyncio
import logging
import signal

from schema_registry.app import CONTENT_TYPE, create_app
from schema_registry.config import RegistryConfig
from schema_registry.core import Registry
from schema_registry.election import LeaderElection
from schema_registry.contexts import ContextFilter
from schema_registry.forwarding import Forwarding
from schema_registry.metrics import RequestMetrics, collect
from schema_registry.negotiation import Negotiation
from schema_registry.store import KafkaStore
from settings import http_server
from settings.http_auth import HttpAuth
from telemetry.exposition import MetricsServer

log = logging.getLogger(__name__)


def build_app(config: RegistryConfig, registry: Registry, election: LeaderElection | None = None) -> RequestMetrics:
    """The HTTP app, behind BASIC authentication when ``authentication.method=BASIC``; with an election, writes
    reaching an instance that is not the leader are forwarded to it; every request counted (outermost)."""
    api = create_app(registry, int(config["max.request.bytes"]))
    app = Negotiation(api)
    forwarding = None
    if election is not None:
        app = forwarding = Forwarding(app, election, registry.store, int(config["max.request.bytes"]),
                                      verify=config.forwarding_verify())
    authenticator = config.authenticator()
    if authenticator is not None:
        app = HttpAuth(app, authenticator, config.role_policy(), content_type=CONTENT_TYPE)
    return RequestMetrics(ContextFilter(app), api.routes, forwarding)  # contexts' paths rewritten before the rest


async def serve(config: RegistryConfig) -> None:
    import uvicorn

    readonly = config["mode"].upper() == "READONLY"
    store = KafkaStore(config["kafkastore.bootstrap.servers"], config["kafkastore.topic"],
                       int(config["kafkastore.timeout.ms"]), int(config["kafkastore.topic.replication.factor"]),
                       create=not readonly, security=config.kafkastore_security.librdkafka(),
                       transactional_id=config["kafkastore.transactional.id"] or None)
    registry = Registry(store, config["schema.compatibility.level"], config["mode"])
    registry.deks.max_keys = int(config["dek.registry.max.keys"])
    store.apply = registry.apply
    await store.start()
    election = None
    if not readonly:  # writable instances elect the one that writes; the others forward to it
        async def elected(is_leader: bool) -> None:
            if is_leader:
                registry.become_leader()

        election = LeaderElection(config["kafkastore.bootstrap.servers"], config.kafkastore_security,
                                  config["schema.registry.group.id"], config.identity, on_elected=elected)
        election.start()  # reads are served at once; the first write waits for the first assignment
    registry.election = election
    app = build_app(config, registry, election)
    metrics = MetricsServer(config["metrics.listener"], collect(app, registry, store, election))
    metrics.start()
    servers = [uvicorn.Server(http_server.uvicorn_config(app, config.values, listener, log_level="warning",
                                                         lifespan="off", access_log=False))
               for listener in config.listeners]
    log.info("schema registry on %s (topic %s, %s, default compatibility %s, authentication %s)",
             ", ".join(lst.url for lst in config.listeners), config["kafkastore.topic"], config["mode"].upper(),
             registry.default_level, config["authentication.method"].upper())

    # uvicorn re-raises the SIGTERM it caught once its server is done, to the handler it found: make that one a
    # no-op, so the cleanup below (leaving the election group at once, closing the store) runs before we exit
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: None)
    try:  # one server per listener; when one stops (a signal), the others follow
        tasks = [asyncio.ensure_future(s.serve()) for s in servers]
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        for s in servers:
            s.should_exit = True
        await asyncio.gather(*tasks, return_exceptions=True)
    finally:
        metrics.stop()
        if app.forwarding is not None:
            await app.forwarding.close()
        if election is not None:
            await election.stop()
        await store.stop()


def run(path: str, overrides: list[str]) -> int:
    config = RegistryConfig.load(path, overrides)
    asyncio.run(serve(config))
    return 0
