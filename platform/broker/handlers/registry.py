"""The one registry of API handlers. ApiVersions answers from it, so what is advertised is what is served.

A handler module registers itself with ``@handles(key, name, min_version, max_version)``. A handler takes
``(broker, header, request)`` and returns a kio response message, a :class:`RawResponse` (pre-framed parts,
used by Fetch for zero-copy), or :data:`NO_RESPONSE` (Produce with ``acks=0``). It may be a coroutine.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable


@dataclass(frozen=True)
class Api:
    key: int
    name: str
    min_version: int
    max_version: int
    handler: Callable

    def supports(self, version: int) -> bool:
        return self.min_version <= version <= self.max_version


APIS: dict[int, Api] = {}
NO_RESPONSE = object()


class RawResponse:
    """A whole response frame as parts: ``bytes`` and file regions (sent with sendfile). A plain slotted class:
    one is made per Produce and Fetch answered, and a frozen dataclass's ``__init__`` costs several times more."""

    __slots__ = ("parts",)

    def __init__(self, parts: list):
        self.parts = parts

    def __repr__(self) -> str:
        return f"RawResponse({self.parts!r})"


def handles(key: int, name: str, min_version: int, max_version: int):
    def register(fn: Callable) -> Callable:
        if key in APIS:
            raise RuntimeError(f"api key {key} registered twice")
        APIS[key] = Api(key, name, min_version, max_version, fn)
        return fn

    return register
