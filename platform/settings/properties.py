"""Java-style properties files (``key=value``, ``#`` comments), the format of every logbus service's config.

Kafka's configuration providers (KIP-297, KIP-887) keep secrets out of config files: with
``config.providers=file,env`` and ``config.providers.<alias>.class`` naming one of Kafka's providers, a value may
hold ``${file:/path/secrets.properties:key}`` (a key of a properties file), ``${directory:/path:name}`` (a file's
content) or ``${env:NAME}`` (an environment variable); :func:`parse_properties` substitutes them and drops the
``config.providers*`` keys. A reference that cannot be resolved is a ConfigError naming the key.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

PROVIDERS = {
    "org.apache.kafka.common.config.provider.FileConfigProvider": "file",
    "org.apache.kafka.common.config.provider.DirectoryConfigProvider": "directory",
    "org.apache.kafka.common.config.provider.EnvVarConfigProvider": "env",
}
_REFERENCE = re.compile(r"\$\{([^}]*?):(?:([^}]*?):)?([^}]*?)\}")  # ${provider:[path:]key}, Kafka's pattern


class ConfigError(ValueError):
    """A key is unknown or its value is invalid."""


def parse_properties(text: str) -> dict[str, str]:
    """A subset of java.util.Properties: ``key=value`` or ``key: value`` lines, ``#``/``!`` comments."""
    out: dict[str, str] = {}
    for lineno, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if not stripped or stripped[0] in "#!":
            continue
        for sep in ("=", ":"):
            if sep in stripped:
                key, _, value = stripped.partition(sep)
                out[key.strip()] = value.strip()
                break
        else:
            raise ConfigError(f"line {lineno}: expected key=value, got {stripped!r}")
    return resolve_providers(out) if "config.providers" in out else out


def resolve_providers(props: dict[str, str]) -> dict[str, str]:
    """``props`` with every ``${alias:path:key}`` of a configured provider substituted, provider keys dropped."""
    kinds: dict[str, str] = {}
    for alias in (a.strip() for a in props.get("config.providers", "").split(",") if a.strip()):
        cls = props.get(f"config.providers.{alias}.class", "").strip()
        if cls not in PROVIDERS:
            raise ConfigError(f"config.providers.{alias}.class={cls or '(unset)'}: logbus knows "
                              f"{', '.join(PROVIDERS)}")
        kinds[alias] = PROVIDERS[cls]
    cache: dict[str, dict[str, str]] = {}

    def lookup(key: str, match: re.Match) -> str:
        alias, path, name = match.group(1), match.group(2), match.group(3)
        kind = kinds.get(alias)
        if kind is None:
            return match.group(0)  # not a configured provider: left as written (as Kafka does)
        try:
            if kind == "env":
                return os.environ[name]
            if kind == "directory":
                return (Path(path) / name).read_text().rstrip("\n")
            if path not in cache:
                cache[path] = parse_properties(Path(path).read_text())
            return cache[path][name]
        except KeyError:
            raise ConfigError(f"{key}: {match.group(0)} names nothing ({kind} provider)") from None
        except (OSError, TypeError) as exc:
            raise ConfigError(f"{key}: {match.group(0)}: cannot read {path}: "
                              f"{getattr(exc, 'strerror', None) or exc}") from None

    return {key: _REFERENCE.sub(lambda m, key=key: lookup(key, m), value) for key, value in props.items()
            if key != "config.providers" and not key.startswith("config.providers.")}


def read_properties(path: str | Path) -> dict[str, str]:
    """The properties of file ``path``; ConfigError when it cannot be read or parsed."""
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror}") from None
    try:
        return parse_properties(text)
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from None
