"""Java-style properties files (``key=value``, ``#`` comments), the format of every logbus service's config."""

from __future__ import annotations

from pathlib import Path


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
    return out


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
