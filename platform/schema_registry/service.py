"""``logbus schema-registry CONFIG``: replay the store, then serve the HTTP API with uvicorn until SIGTERM."""

from __future__ import annotations

import asyncio
import logging

from schema_registry.app import CONTENT_TYPE, create_app
from schema_registry.config import RegistryConfig
from schema_registry.core import Registry
from schema_registry.negotiation import Negotiation
from schema_registry.store import KafkaStore
from settings import http_server
from settings.http_auth import HttpAuth

log = logging.getLogger(__name__)


def build_app(config: RegistryConfig, registry: Registry):
    """The HTTP app, behind BASIC authentication when ``authentication.method=BASIC``."""
    app = Negotiation(create_app(registry, int(config["max.request.bytes"])))
    authenticator = config.authenticator()
    if authenticator is None:
        return app
    return HttpAuth(app, authenticator, config.role_policy(), content_type=CONTENT_TYPE)


async def serve(config: RegistryConfig) -> None:
    import uvicorn

    readonly = config["mode"].upper() == "READONLY"
    store = KafkaStore(config["kafkastore.bootstrap.servers"], config["kafkastore.topic"],
                       int(config["kafkastore.timeout.ms"]), int(config["kafkastore.topic.replication.factor"]),
                       create=not readonly, security=config.kafkastore_security.librdkafka())
    registry = Registry(store, config["schema.compatibility.level"], config["mode"])
    store.apply = registry.apply
    await store.start()
    app = build_app(config, registry)
    servers = [uvicorn.Server(http_server.uvicorn_config(app, config.values, listener, log_level="warning",
                                                         lifespan="off", access_log=False))
               for listener in config.listeners]
    log.info("schema registry on %s (topic %s, %s, default compatibility %s, authentication %s)",
             ", ".join(lst.url for lst in config.listeners), config["kafkastore.topic"], config["mode"].upper(),
             registry.default_level, config["authentication.method"].upper())

    try:  # one server per listener; when one stops (a signal), the others follow
        tasks = [asyncio.ensure_future(s.serve()) for s in servers]
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        for s in servers:
            s.should_exit = True
        await asyncio.gather(*tasks, return_exceptions=True)
    finally:
        await store.stop()


def run(path: str, overrides: list[str]) -> int:
    config = RegistryConfig.load(path, overrides)
    asyncio.run(serve(config))
    return 0
