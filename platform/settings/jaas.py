"""Kafka's ``sasl.jaas.config`` values: ``<LoginModule class> <flag> key="value" ...;``. No I/O.

PlainLoginModule: ``username``/``password`` (this broker's own) and ``user_<name>="<password>"`` (the users the
listener accepts). ScramLoginModule: ``username``/``password``."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

PLAIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
SCRAM_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"
_FLAGS = ("required", "requisite", "sufficient", "optional")
_TOKEN = re.compile(r'\s*(?:(;)|([A-Za-z0-9_.$-]+)\s*=\s*("(?:[^"\\]|\\.)*"|[^\s;"]+)|([A-Za-z0-9_.$]+))')


class JaasError(ValueError):
    pass


@dataclass
class LoginModule:
    name: str
    flag: str
    options: dict[str, str] = field(default_factory=dict)

    @property
    def users(self) -> dict[str, str]:
        """PlainLoginModule's ``user_<name>="<password>"`` entries."""
        return {k[5:]: v for k, v in self.options.items() if k.startswith("user_")}


def parse(text: str) -> list[LoginModule]:
    """Every login module of a JAAS config value, in order."""
    modules: list[LoginModule] = []
    current: LoginModule | None = None
    pos, text = 0, text.strip()
    while pos < len(text):
        match = _TOKEN.match(text, pos)
        if match is None or match.end() == pos:
            raise JaasError(f"sasl.jaas.config: cannot parse at {text[pos:pos + 30]!r}")
        pos = match.end()
        semicolon, key, value, word = match.groups()
        if semicolon:
            if current is None:
                raise JaasError("sasl.jaas.config: ';' without a login module")
            modules.append(current)
            current = None
        elif word is not None:
            if current is None:
                current = LoginModule(word, "")
            elif not current.flag and word.lower() in _FLAGS:
                current.flag = word.lower()
            else:
                raise JaasError(f"sasl.jaas.config: unexpected {word!r}")
        else:
            if current is None or not current.flag:
                raise JaasError(f"sasl.jaas.config: option {key} before the login module and its flag")
            if value.startswith('"'):
                value = re.sub(r'\\(.)', r'\1', value[1:-1])
            current.options[key] = value
        while pos < len(text) and text[pos].isspace():
            pos += 1
    if current is not None:
        raise JaasError("sasl.jaas.config: a login module must end with ';'")
    if not modules:
        raise JaasError("sasl.jaas.config: no login module")
    return modules
