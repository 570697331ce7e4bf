"""Version-agnostic construction of ``kio`` messages.

Each (api, version) has its own generated dataclasses; fields come and go between versions. Handlers build a
response with :func:`build`, passing every field they know: fields the version lacks are dropped, plain ints
become ``ErrorCode`` members, ``timedelta`` or ``datetime`` values where the schema wants them. No I/O here.
"""

from __future__ import annotations

import dataclasses
import datetime
import sys
from functools import lru_cache

from kio.schema.errors import ErrorCode

from broker.protocol.codec import response_type

__all__ = ["ErrorCode", "build", "nested", "ms", "response_class"]


@lru_cache(maxsize=None)
def _fields(cls) -> tuple[tuple[str, str | None], ...]:
    return tuple((f.name, f.metadata.get("kafka_type")) for f in dataclasses.fields(cls))


def build(cls, **values):
    kwargs = {}
    for name, kafka_type in _fields(cls):
        if name not in values:
            continue
        value = values[name]
        if kafka_type == "error_code" and not isinstance(value, ErrorCode):
            value = ErrorCode(int(value))
        elif kafka_type in ("timedelta_i32", "timedelta_i64") and isinstance(value, int):
            value = datetime.timedelta(milliseconds=value)
        elif kafka_type == "datetime_i64" and isinstance(value, int):  # -1 ("none") stays -1 on the wire
            value = datetime.datetime.fromtimestamp(value / 1000, datetime.timezone.utc)
        kwargs[name] = value
    return cls(**kwargs)


@lru_cache(maxsize=None)
def nested(cls, name: str):
    """A class generated in the same module as ``cls`` (e.g. a response's per-topic entry)."""
    return getattr(sys.modules[cls.__module__], name)


def response_class(api_key: int, version: int):
    return response_type(api_key, version)


def ms(value) -> int:
    """Milliseconds of a kio timedelta field (or an int)."""
    if isinstance(value, datetime.timedelta):
        return int(value.total_seconds() * 1000)
    return int(value)
