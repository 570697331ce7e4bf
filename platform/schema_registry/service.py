"""``logbus schema-registry CONFIG``: replay the store, then serve the HTTP API with uvicorn until SIGTERM."""

from __future__ import annotations

import asyncio
import logging

from schema_registry.app import create_app
from schema_registry.config import RegistryConfig
from schema_registry.core import Registry
from schema_registry.store import KafkaStore

log = logging.getLogger(__name__)


async def serve(config: RegistryConfig) -> None:
    import uvicorn

    readonly = config["mode"].upper() == "READONLY"
    store = KafkaStore(config["kafkastore.bootstrap.servers"], config["kafkastore.topic"],
                       int(config["kafkastore.timeout.ms"]), int(config["kafkastore.topic.replication.factor"]),
                       create=not readonly)
    registry = Registry(store, config["schema.compatibility.level"], config["mode"])
    store.apply = registry.apply
    await store.start()
    host, port = config.listener
    app = create_app(registry, int(config["max.request.bytes"]))
    server = uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level="warning", lifespan="off",
                                           access_log=False))
    log.info("schema registry on http://%s:%d (topic %s, %s, default compatibility %s)", host, port,
             config["kafkastore.topic"], config["mode"].upper(), registry.default_level)
    try:
        await server.serve()
    finally:
        await store.stop()


def run(path: str, overrides: list[str]) -> int:
    config = RegistryConfig.load(path, overrides)
    asyncio.run(serve(config))
    return 0
