"""Topic-level configs: Kafka 3.x's whole set (``TopicConfig`` / ``LogConfig``), with Kafka's types, validators,
defaults, error messages and the broker keys that supply each default (``ServerTopicConfigSynonyms``).

A topic stores only its overrides (``DYNAMIC_TOPIC_CONFIG``); every other config takes the broker's value of its
synonym key when the broker's config file sets it (``STATIC_BROKER_CONFIG``), else Kafka's default
(``DEFAULT_CONFIG``). :func:`validate` checks overrides as Kafka's ``ConfigDef`` does: the value must parse as
the config's type, then pass its validator; an unknown name is refused. Every refusal is INVALID_CONFIG with
Kafka's wording ("Invalid value x for configuration retention.ms: Not a number of type LONG").

:func:`log_config` turns a topic's effective values into the :class:`TopicLogConfig` its partition logs use.
Configs marked ``effect=False`` are accepted, stored and described but change nothing (see the README).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Callable

from broker.log.log import LogConfig
from broker.protocol import compression
from broker.protocol.validation import RecordPolicy

LONG_MAX = 2**63 - 1
INT_MIN, INT_MAX = -(2**31), 2**31 - 1
# Kafka's DescribeConfigs config sources and config types.
DYNAMIC_TOPIC_CONFIG, STATIC_BROKER_CONFIG, DEFAULT_CONFIG = 1, 4, 5
TYPE_IDS = {"BOOLEAN": 1, "STRING": 2, "INT": 3, "LONG": 5, "DOUBLE": 6, "LIST": 7}
CODECS = {"uncompressed": compression.NONE, "gzip": compression.GZIP, "snappy": compression.SNAPPY,
          "lz4": compression.LZ4, "zstd": compression.ZSTD, "producer": None}
_INTEGER = re.compile(r"^[+-]?[0-9]+$")
_VERSION = re.compile(r"^(0\.(8\.[0-2]|9\.0|10\.[0-2]|11\.0)|[1-3]\.[0-9])(\.[0-9]+)?(-IV[0-9]+)?$")
_THROTTLED = re.compile(r"^[0-9]+:[0-9]+$")


class InvalidConfig(ValueError):
    """A topic config that Kafka refuses (INVALID_CONFIG)."""


def _parse(kind: str, name: str, raw: str):
    """Kafka's ``ConfigDef.parseType`` for a string value."""
    text = raw.strip()
    bad = f"Invalid value {raw} for configuration {name}: "
    if kind == "BOOLEAN":
        if text.lower() not in ("true", "false"):
            raise InvalidConfig(bad + "Expected value to be either true or false")
        return text.lower() == "true"
    if kind in ("INT", "LONG"):
        lo, hi = (INT_MIN, INT_MAX) if kind == "INT" else (-(2**63), LONG_MAX)
        if not _INTEGER.match(text) or not lo <= int(text) <= hi:
            raise InvalidConfig(bad + f"Not a number of type {kind}")
        return int(text)
    if kind == "DOUBLE":
        try:
            if "_" in text:
                raise ValueError
            return float(text)
        except ValueError:
            raise InvalidConfig(bad + "Not a number of type DOUBLE") from None
    if kind == "LIST":
        return [item.strip() for item in text.split(",")] if text else []
    return text


def at_least(low: int):
    def check(value) -> str | None:
        return f"Value must be at least {low}" if value < low else None
    return check


def between(low, high):
    def check(value) -> str | None:
        if value < low:
            return f"Value must be at least {low}"
        return f"Value must be no more than {high}" if value > high else None
    return check


def one_of(*allowed: str):
    def check(value) -> str | None:
        return None if value in allowed else f"String must be one of: {', '.join(allowed)}"
    return check


def each_one_of(*allowed: str):
    """Kafka's ``ValidList.in``: every item of the list must be one of ``allowed``."""
    def check(items) -> str | None:
        return next((f"String must be one of: {', '.join(allowed)}" for i in items if i not in allowed), None)
    return check


def _gzip_level(value) -> str | None:
    return None if value == -1 or 1 <= value <= 9 else "Value must be between 1 and 9, or -1"


def _version(value) -> str | None:
    return None if _VERSION.match(value) else f"Version `{value}` is not a valid version"


def _throttled(items) -> str | None:
    if items == ["*"] or all(_THROTTLED.match(i) for i in items):
        return None
    return ("must be the literal '*' or a list of replicas in the following format: "
            "[partitionId]:[brokerId],[partitionId]:[brokerId],...")


def _no_tiered_storage(value) -> str | None:
    # Kafka's own refusal when the broker has no remote log storage (logbus has none)
    return ("Tiered Storage functionality is disabled in the broker. Topic cannot be configured with remote log "
            "storage.") if value else None


@dataclass(frozen=True)
class TopicConfigDef:
    name: str
    type: str  # Kafka's ConfigDef type: BOOLEAN, STRING, INT, LONG, DOUBLE, LIST
    default: str  # Kafka's default, as DescribeConfigs shows it
    check: Callable[[object], str | None] | None = None  # the complaint, in Kafka's words, or None
    synonyms: tuple[str, ...] = ()  # broker keys that supply the default (ServerTopicConfigSynonyms)
    broker: Callable[[object], object] | None = None  # the broker's value (from its BrokerConfig)
    effect: bool = True  # False: stored and described, changes nothing in logbus

    def broker_default(self, config) -> tuple[str, int]:
        """(value, source) of this config on a topic without an override."""
        if self.broker is None:
            return self.default, DEFAULT_CONFIG
        value = self.broker(config)
        text = str(value).lower() if isinstance(value, bool) else str(value)
        return text, STATIC_BROKER_CONFIG if any(k in config.explicit for k in self.synonyms) else DEFAULT_CONFIG


def _key(name: str) -> Callable[[object], object]:
    return lambda c: c[name]


_DEFS = [
    TopicConfigDef("cleanup.policy", "LIST", "delete", each_one_of("compact", "delete"), ("log.cleanup.policy",),
                   _key("log.cleanup.policy")),
    TopicConfigDef("compression.type", "STRING", "producer",
                   one_of("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer"), ("compression.type",),
                   _key("compression.type")),
    TopicConfigDef("compression.gzip.level", "INT", "-1", _gzip_level, ("compression.gzip.level",),
                   _key("compression.gzip.level")),
    TopicConfigDef("compression.lz4.level", "INT", "9", between(1, 17), ("compression.lz4.level",),
                   _key("compression.lz4.level")),
    TopicConfigDef("compression.zstd.level", "INT", "3", between(-131072, 22), ("compression.zstd.level",),
                   _key("compression.zstd.level")),
    TopicConfigDef("delete.retention.ms", "LONG", "86400000", at_least(0), ("log.cleaner.delete.retention.ms",),
                   _key("log.cleaner.delete.retention.ms")),
    TopicConfigDef("file.delete.delay.ms", "LONG", "60000", at_least(0), ("log.segment.delete.delay.ms",),
                   _key("log.segment.delete.delay.ms")),
    TopicConfigDef("flush.messages", "LONG", str(LONG_MAX), at_least(1), ("log.flush.interval.messages",),
                   _key("log.flush.interval.messages")),
    TopicConfigDef("flush.ms", "LONG", str(LONG_MAX), at_least(0), ("log.flush.interval.ms",),
                   lambda c: c.flush_ms),
    TopicConfigDef("follower.replication.throttled.replicas", "LIST", "", _throttled, effect=False),
    TopicConfigDef("index.interval.bytes", "INT", "4096", at_least(0), ("log.index.interval.bytes",),
                   _key("log.index.interval.bytes")),
    TopicConfigDef("leader.replication.throttled.replicas", "LIST", "", _throttled, effect=False),
    TopicConfigDef("local.retention.bytes", "LONG", "-2", at_least(-2), effect=False),
    TopicConfigDef("local.retention.ms", "LONG", "-2", at_least(-2), effect=False),
    TopicConfigDef("max.compaction.lag.ms", "LONG", str(LONG_MAX), at_least(1),
                   ("log.cleaner.max.compaction.lag.ms",), _key("log.cleaner.max.compaction.lag.ms")),
    TopicConfigDef("max.message.bytes", "INT", "1048588", at_least(0), ("message.max.bytes",),
                   _key("message.max.bytes")),
    TopicConfigDef("message.downconversion.enable", "BOOLEAN", "true", effect=False),
    TopicConfigDef("message.format.version", "STRING", "3.0-IV1", _version, effect=False),
    TopicConfigDef("message.timestamp.after.max.ms", "LONG", str(LONG_MAX), at_least(0),
                   ("log.message.timestamp.after.max.ms",), _key("log.message.timestamp.after.max.ms")),
    TopicConfigDef("message.timestamp.before.max.ms", "LONG", str(LONG_MAX), at_least(0),
                   ("log.message.timestamp.before.max.ms",), _key("log.message.timestamp.before.max.ms")),
    TopicConfigDef("message.timestamp.difference.max.ms", "LONG", str(LONG_MAX), at_least(0),
                   ("log.message.timestamp.difference.max.ms",), _key("log.message.timestamp.difference.max.ms")),
    TopicConfigDef("message.timestamp.type", "STRING", "CreateTime", one_of("CreateTime", "LogAppendTime"),
                   ("log.message.timestamp.type",), _key("log.message.timestamp.type")),
    TopicConfigDef("min.cleanable.dirty.ratio", "DOUBLE", "0.5", between(0, 1), ("log.cleaner.min.cleanable.ratio",),
                   _key("log.cleaner.min.cleanable.ratio")),
    TopicConfigDef("min.compaction.lag.ms", "LONG", "0", at_least(0), ("log.cleaner.min.compaction.lag.ms",),
                   _key("log.cleaner.min.compaction.lag.ms")),
    TopicConfigDef("min.insync.replicas", "INT", "1", at_least(1), ("min.insync.replicas",),
                   _key("min.insync.replicas")),
    TopicConfigDef("preallocate", "BOOLEAN", "false", effect=False),
    TopicConfigDef("remote.log.copy.disable", "BOOLEAN", "false", effect=False),
    TopicConfigDef("remote.log.delete.on.disable", "BOOLEAN", "false", effect=False),
    TopicConfigDef("remote.storage.enable", "BOOLEAN", "false", _no_tiered_storage),
    TopicConfigDef("retention.bytes", "LONG", "-1", None, ("log.retention.bytes",), _key("log.retention.bytes")),
    TopicConfigDef("retention.ms", "LONG", "604800000", at_least(-1),
                   ("log.retention.ms", "log.retention.minutes", "log.retention.hours"), lambda c: c.retention_ms),
    TopicConfigDef("segment.bytes", "INT", "1073741824", at_least(14), ("log.segment.bytes",),
                   _key("log.segment.bytes")),
    TopicConfigDef("segment.index.bytes", "INT", "10485760", at_least(4), effect=False),
    TopicConfigDef("segment.jitter.ms", "LONG", "0", at_least(0), ("log.roll.jitter.ms", "log.roll.jitter.hours"),
                   lambda c: c.roll_jitter_ms),
    TopicConfigDef("segment.ms", "LONG", "604800000", at_least(1), ("log.roll.ms", "log.roll.hours"),
                   lambda c: c.roll_ms),
    TopicConfigDef("unclean.leader.election.enable", "BOOLEAN", "false", None, ("unclean.leader.election.enable",),
                   _key("unclean.leader.election.enable")),
]
TOPIC_CONFIGS: dict[str, TopicConfigDef] = {d.name: d for d in _DEFS}
NO_EFFECT = tuple(d.name for d in _DEFS if not d.effect)


def parse(name: str, raw: str):
    """The typed value of one config (raises InvalidConfig as Kafka's ConfigDef would)."""
    definition = TOPIC_CONFIGS.get(name)
    if definition is None:
        raise InvalidConfig(f"Unknown topic config name: {name}")
    if not isinstance(raw, str):
        raise InvalidConfig(f"Invalid value {raw} for configuration {name}: a value is required")
    value = _parse(definition.type, name, raw)
    complaint = definition.check(value) if definition.check else None
    if complaint:
        raise InvalidConfig(f"Invalid value {raw} for configuration {name}: {complaint}")
    return value


def validate(configs: dict[str, str], defaults: dict[str, str] | None = None) -> None:
    """Check a topic's overrides; ``defaults`` (the broker's effective defaults, else Kafka's) complete them for
    the checks across configs (Kafka's ``LogConfig.validateValues``)."""
    for name, raw in configs.items():
        parse(name, raw)

    def effective(name: str) -> str:
        return configs.get(name, (defaults or {}).get(name, TOPIC_CONFIGS[name].default))

    min_lag, max_lag = int(effective("min.compaction.lag.ms")), int(effective("max.compaction.lag.ms"))
    if min_lag > max_lag:
        raise InvalidConfig(f"conflict topic config setting min.compaction.lag.ms ({min_lag}) > "
                            f"max.compaction.lag.ms ({max_lag})")


@lru_cache(maxsize=16)
def broker_defaults(config) -> dict[str, tuple[str, int]]:
    """Every topic config's value and source on a topic without overrides, from a BrokerConfig (static: computed
    once per config object; callers must not change the dict)."""
    return {name: d.broker_default(config) for name, d in TOPIC_CONFIGS.items()}


def effective_values(overrides: dict[str, str], defaults: dict[str, tuple[str, int]]) -> dict[str, tuple[str, int]]:
    """name -> (value, source) of a topic: its override, else the broker default."""
    return {name: (overrides[name], DYNAMIC_TOPIC_CONFIG) if name in overrides else defaults[name]
            for name in TOPIC_CONFIGS}


def synonyms(name: str, overrides: dict[str, str], config) -> list[tuple[str, str, int]]:
    """DescribeConfigs' synonyms of one topic config, highest precedence first: (name, value, source)."""
    definition = TOPIC_CONFIGS[name]
    out = [(name, overrides[name], DYNAMIC_TOPIC_CONFIG)] if name in overrides else []
    for key in definition.synonyms:
        if key in config.explicit:
            value = config[key]
            out.append((key, str(value).lower() if isinstance(value, bool) else str(value), STATIC_BROKER_CONFIG))
    out.append((definition.synonyms[0] if definition.synonyms else name, definition.default, DEFAULT_CONFIG))
    return out


@dataclass
class TopicLogConfig(LogConfig):
    """A partition log's config with what Kafka's LogConfig adds for the produce path."""

    records: RecordPolicy = field(default_factory=RecordPolicy)  # what Produce does to incoming batches
    compacted: bool = False  # cleanup.policy includes compact: Produce refuses records without a key


def timestamp_bounds(values: dict[str, str]) -> tuple[int, int]:
    """(before, after) max ms: ``message.timestamp.before/after.max.ms``, each falling back to the deprecated
    ``message.timestamp.difference.max.ms`` while it is left at its default (Kafka 3.6+, KIP-937)."""
    difference = int(values["message.timestamp.difference.max.ms"])
    before = int(values["message.timestamp.before.max.ms"])
    after = int(values["message.timestamp.after.max.ms"])
    return (difference if before == LONG_MAX else before), (difference if after == LONG_MAX else after)


def log_config(values: dict[str, str]) -> TopicLogConfig:
    """The log config of a topic from its effective values (name -> text)."""
    codec = CODECS[values["compression.type"]]
    level = {compression.GZIP: int(values["compression.gzip.level"]),
             compression.LZ4: int(values["compression.lz4.level"]),
             compression.ZSTD: int(values["compression.zstd.level"])}.get(codec)
    before, after = timestamp_bounds(values)
    compact = "compact" in values["cleanup.policy"].split(",")
    segment_ms = int(values["segment.ms"])
    max_lag = int(values["max.compaction.lag.ms"])
    return TopicLogConfig(
        segment_bytes=int(values["segment.bytes"]),
        # Kafka's maxSegmentMs: a compacted log rolls by max.compaction.lag.ms too, so its records get cleaned
        roll_ms=min(segment_ms, max_lag) if compact and max_lag > 0 else segment_ms,
        segment_jitter_ms=int(values["segment.jitter.ms"]),
        index_interval_bytes=int(values["index.interval.bytes"]),
        retention_ms=int(values["retention.ms"]),
        retention_bytes=int(values["retention.bytes"]),
        flush_interval_messages=int(values["flush.messages"]),
        flush_ms=int(values["flush.ms"]),
        max_message_bytes=int(values["max.message.bytes"]),
        file_delete_delay_ms=int(values["file.delete.delay.ms"]),
        cleanup_policy=values["cleanup.policy"],
        records=RecordPolicy(codec, level, values["message.timestamp.type"] == "LogAppendTime", before, after),
        compacted=compact,
    )
