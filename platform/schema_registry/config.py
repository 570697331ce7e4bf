"""Registry configuration with Confluent Schema Registry's property names and defaults."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

from settings.properties import ConfigError, parse_properties

LEVELS = ("NONE", "BACKWARD", "BACKWARD_TRANSITIVE", "FORWARD", "FORWARD_TRANSITIVE", "FULL", "FULL_TRANSITIVE")
MODES = ("READWRITE", "READONLY")
KEYS = {
    "listeners": "http://127.0.0.1:8081",
    "kafkastore.bootstrap.servers": None,
    "kafkastore.topic": "_schemas",
    "kafkastore.topic.replication.factor": "3",
    "kafkastore.timeout.ms": "500",
    "schema.compatibility.level": "BACKWARD",
    "host.name": "127.0.0.1",
    "mode": "READWRITE",
    "max.request.bytes": "10485760",
}


class RegistryConfigError(ValueError):
    pass


@dataclass
class RegistryConfig:
    values: dict[str, str]

    @classmethod
    def load(cls, path: str | None, overrides: list[str] = ()) -> "RegistryConfig":
        raw: dict[str, str] = {}
        if path:
            try:
                text = Path(path).read_text()
            except OSError as exc:
                raise RegistryConfigError(f"cannot read {path}: {exc.strerror}") from None
            try:
                raw.update(parse_properties(text))
            except ConfigError as exc:
                raise RegistryConfigError(str(exc)) from None
        for item in overrides:
            key, sep, value = item.partition("=")
            if not sep:
                raise RegistryConfigError(f"--override expects key=value, got {item!r}")
            raw[key.strip()] = value.strip()
        unknown = set(raw) - set(KEYS)
        if unknown:
            raise RegistryConfigError(f"unknown config key {sorted(unknown)[0]!r}")
        values = {k: raw.get(k, v) for k, v in KEYS.items()}
        if not values["kafkastore.bootstrap.servers"]:
            raise RegistryConfigError("kafkastore.bootstrap.servers is required")
        if values["schema.compatibility.level"].upper() not in LEVELS:
            raise RegistryConfigError(f"schema.compatibility.level must be one of {', '.join(LEVELS)}")
        if values["mode"].upper() not in MODES:
            raise RegistryConfigError("mode must be READWRITE or READONLY")
        try:
            int(values["kafkastore.timeout.ms"])
            int(values["max.request.bytes"])
        except ValueError as exc:
            raise RegistryConfigError(str(exc)) from None
        cfg = cls(values)
        cfg.listener  # validates
        return cfg

    def __getitem__(self, key: str) -> str:
        return self.values[key]

    @property
    def listener(self) -> tuple[str, int]:
        first = self.values["listeners"].split(",")[0].strip()
        url = urlparse(first)
        if url.scheme != "http" or not url.hostname or not url.port:
            raise RegistryConfigError(f"listeners: expected http://host:port, got {first!r}")
        return url.hostname, url.port
