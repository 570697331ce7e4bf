"""The schema registry's domain (schema_registry.core.Registry) over an in-memory store, for unit tests: a fake of
schema_registry.store whose writes are applied at once, as the store's reader would apply them."""

from __future__ import annotations

import asyncio

from schema_registry.core import Registry


class MemoryStore:
    def __init__(self):
        self.registry: Registry | None = None

    async def write(self, key: dict, value: dict | None) -> None:
        self.registry.apply(key, value)

    async def catch_up(self) -> None:
        return None


def memory_registry(level: str = "BACKWARD") -> Registry:
    store = MemoryStore()
    store.registry = Registry(store, level, "READWRITE")
    return store.registry


def run(coro):
    return asyncio.run(coro)
