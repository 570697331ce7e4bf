"""HTTP BASIC (and bearer-token) authentication for logbus's HTTP services (the schema registry, the audit service),
configured the way Confluent's REST services are (``authentication.method``, ``authentication.realm``,
``authentication.roles``), with users in a Jetty ``PropertyFileLoginModule`` password file.

Password file (Jetty's PropertyUserStore format): ``user: credential[,role ...]`` per line, ``#`` comments; the
credential is the password in plain text or ``MD5:<hex digest>`` (Jetty's ``Credential.MD5``). Confluent names
that file in a JAAS config passed to the JVM (``SCHEMA_REGISTRY_OPTS=-Djava.security.auth.login.config=jaas.conf``)
whose section named like ``authentication.realm`` holds::

    SchemaRegistry {
      org.eclipse.jetty.jaas.spi.PropertyFileLoginModule required file="/etc/logbus/http-users.properties";
    };

:func:`users_from_jaas` reads that. :class:`HttpAuth` is a pure ASGI middleware (no body read, no I/O) answering
401 with ``WWW-Authenticate: Basic realm="..."`` and a JSON error body, or 403 when the user's roles do not allow
the request (the caller's ``allowed(method, path, roles)`` decides)."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

from settings import jaas
from settings.properties import ConfigError

METHODS = ("NONE", "BASIC", "BEARER")
PROPERTY_FILE_MODULES = ("org.eclipse.jetty.jaas.spi.PropertyFileLoginModule",
                         "org.eclipse.jetty.plus.jaas.spi.PropertyFileLoginModule")  # Jetty 9+, Jetty 7/8
JAAS_PROPERTY = "java.security.auth.login.config"
_SECTION = re.compile(r"([A-Za-z0-9_.$-]+)\s*\{(.*?)\}\s*;", re.S)


@dataclass(frozen=True)
class User:
    name: str
    credential: str  # as written: plain text or MD5:<hex>
    roles: frozenset[str] = field(default_factory=frozenset)

    def check(self, password: str) -> bool:
        if self.credential.startswith("MD5:"):
            given = hashlib.md5(password.encode()).hexdigest()
            return hmac.compare_digest(given, self.credential[4:].strip().lower())
        if self.credential.startswith(("CRYPT:", "OBF:")):
            return False  # refused when the file is read
        return hmac.compare_digest(password.encode(), self.credential.encode())


def parse_users(text: str, where: str = "password file") -> dict[str, User]:
    """Jetty's ``user: credential[,role...]`` lines."""
    users: dict[str, User] = {}
    for lineno, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line[0] in "#!":
            continue
        name, sep, rest = line.partition(":")
        if not sep:
            name, sep, rest = line.partition("=")
        if not sep or not name.strip():
            raise ConfigError(f"{where} line {lineno}: expected 'user: password[,role ...]'")
        credential, *roles = [part.strip() for part in rest.split(",")]
        if credential.startswith(("CRYPT:", "OBF:")):
            raise ConfigError(f"{where} line {lineno}: {credential.split(':')[0]}: credentials are not supported "
                              "(use a plain password or MD5:<hex>)")
        users[name.strip()] = User(name.strip(), credential, frozenset(r for r in roles if r))
    return users


def read_users(path: str) -> dict[str, User]:
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise ConfigError(f"cannot read the password file {path}: {exc.strerror}") from None
    return parse_users(text, path)


def jaas_sections(text: str) -> dict[str, list[jaas.LoginModule]]:
    """A JAAS config file's ``Name { module flag options; ... };`` sections (``//`` and ``/* */`` comments)."""
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    text = re.sub(r"(?m)//.*$", " ", text)
    sections = {}
    for match in _SECTION.finditer(text):
        try:
            sections[match.group(1)] = jaas.parse(match.group(2))
        except jaas.JaasError as exc:
            raise ConfigError(f"JAAS section {match.group(1)}: {str(exc).replace('sasl.jaas.config: ', '')}") \
                from None
    if not sections and text.strip():
        raise ConfigError("not a JAAS config: expected 'Name { <LoginModule> required file=\"...\"; };'")
    return sections


def users_from_jaas(path: str, realm: str) -> dict[str, User]:
    """The users of the PropertyFileLoginModule in section ``realm`` of JAAS file ``path``."""
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise ConfigError(f"cannot read the JAAS config {path}: {exc.strerror}") from None
    try:
        sections = jaas_sections(text)
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from None
    if realm not in sections:
        raise ConfigError(f"{path}: no section {realm!r} (authentication.realm); sections: "
                          f"{', '.join(sections) or 'none'}")
    for module in sections[realm]:
        if module.name in PROPERTY_FILE_MODULES:
            if "file" not in module.options:
                raise ConfigError(f"{path}: {module.name} needs file=\"...\"")
            file = Path(module.options["file"])
            return read_users(str(file if file.is_absolute() else Path(path).parent / file))
    raise ConfigError(f"{path}: section {realm!r} has no {PROPERTY_FILE_MODULES[0]} (the only login module "
                      "logbus reads)")


def jaas_path_from_opts(opts: str | None) -> str | None:
    """``-Djava.security.auth.login.config=PATH`` out of ``SCHEMA_REGISTRY_OPTS``/``KAFKA_OPTS``-style options."""
    for word in shlex.split(opts or ""):
        if word.startswith(f"-D{JAAS_PROPERTY}="):
            return word.split("=", 1)[1]
    return None


def parse_basic(header: str | None) -> tuple[str, str] | None:
    """(user, password) of an ``Authorization: Basic ...`` header value, None when absent or malformed."""
    if not header or not header[:6].lower() == "basic ":
        return None
    try:
        decoded = base64.b64decode(header[6:].strip(), validate=True).decode("utf-8")
    except (ValueError, UnicodeDecodeError):
        return None
    user, sep, password = decoded.partition(":")
    return (user, password) if sep else None


def parse_bearer(header: str | None) -> str | None:
    if not header or not header[:7].lower() == "bearer ":
        return None
    return header[7:].strip() or None


@dataclass
class Authenticator:
    """Who a request's ``Authorization`` header names: BASIC against ``users``, bearer against ``tokens``."""
    realm: str = ""
    users: dict[str, User] | None = None  # None: BASIC off
    tokens: tuple[str, ...] = ()  # empty: bearer off
    allowed_roles: frozenset[str] | None = None  # authentication.roles; None is Confluent's "*" (any user)

    def identify(self, header: str | None) -> tuple[str, frozenset[str]] | None:
        """(principal, roles) or None (not authenticated)."""
        if self.users is not None:
            basic = parse_basic(header)
            if basic is not None:
                user = self.users.get(basic[0])
                if user is not None and user.check(basic[1]):
                    return user.name, user.roles
                return None
        token = parse_bearer(header) if self.tokens else None
        if token is not None and any(hmac.compare_digest(token.encode(), t.encode()) for t in self.tokens):
            return "bearer", frozenset(("*",))
        return None

    def permits(self, roles: frozenset[str]) -> bool:
        """``authentication.roles``: may a user with ``roles`` use the service at all (Jetty: 403 if not)."""
        return self.allowed_roles is None or "*" in roles or bool(roles & self.allowed_roles)

    @property
    def challenge(self) -> str:
        return f'Basic realm="{self.realm}"' if self.users is not None else f'Bearer realm="{self.realm}"'


def error_response(status: int, message: str, content_type: str, headers: list[tuple[bytes, bytes]] = ()):
    body = json.dumps({"error_code": status, "message": message}).encode()
    return ({"type": "http.response.start", "status": status,
             "headers": [(b"content-type", content_type.encode()), (b"content-length", str(len(body)).encode()),
                         *headers]},
            {"type": "http.response.body", "body": body})


class HttpAuth:
    """ASGI middleware: every HTTP request needs :meth:`Authenticator.identify` to name someone, except
    ``open_paths``; then ``allowed(method, path, roles)`` (None: everything) decides 403. The principal goes
    into ``scope["user_principal"]``."""

    def __init__(self, app, authenticator: Authenticator, allowed=None, open_paths: tuple[str, ...] = (),
                 content_type: str = "application/json"):
        self.app, self.auth, self.allowed = app, authenticator, allowed
        self.open_paths, self.content_type = open_paths, content_type

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope["path"] in self.open_paths:
            return await self.app(scope, receive, send)
        header = next((v.decode("latin-1") for k, v in scope["headers"] if k == b"authorization"), None)
        who = self.auth.identify(header)
        if who is None:
            start, body = error_response(401, "Unauthorized", self.content_type,
                                         [(b"www-authenticate", self.auth.challenge.encode())])
        elif not self.auth.permits(who[1]) or (self.allowed is not None
                                               and not self.allowed(scope["method"], scope["path"], who[1])):
            start, body = error_response(403, f"User {who[0]} is not allowed to {scope['method']} {scope['path']}",
                                         self.content_type)
        else:
            scope["user_principal"] = who[0]  # in place: what the app adds to the scope (its route) stays visible
            return await self.app(scope, receive, send)
        await send(start)
        await send(body)


def from_properties(props: dict, methods: tuple[str, ...] = ("NONE", "BASIC"), jaas_env: tuple[str, ...] = (),
                    environ: dict | None = None, default_realm: str = "") -> Authenticator | None:
    """The :class:`Authenticator` of a service's properties (None for ``authentication.method=NONE``):
    ``authentication.method`` (one of ``methods``, or several comma-separated), ``authentication.realm``,
    ``authentication.roles`` (``*``: any user), BASIC users from ``authentication.users.file`` (the password file)
    or from the JAAS config named by ``authentication.jaas.file`` or by ``-Djava.security.auth.login.config=`` in
    one of the ``jaas_env`` variables (section ``authentication.realm``); BEARER tokens from
    ``authentication.bearer.tokens`` (comma-separated; with a config provider, ``${file:...}``)."""
    def get(key: str) -> str | None:
        value = props.get(key)
        return value.strip() if isinstance(value, str) and value.strip() else None

    chosen = [m.strip().upper() for m in (get("authentication.method") or "NONE").split(",") if m.strip()]
    for method in chosen:
        if method not in methods:
            raise ConfigError(f"authentication.method={method}: expected {' or '.join(methods)}")
    if chosen == ["NONE"] or not chosen:
        return None
    if "NONE" in chosen:
        raise ConfigError("authentication.method: NONE cannot be combined with another method")
    realm = get("authentication.realm") or default_realm
    users = None
    if "BASIC" in chosen:
        if get("authentication.users.file"):
            users = read_users(get("authentication.users.file"))
        else:
            environ = environ if environ is not None else os.environ
            jaas_file = get("authentication.jaas.file") or next(
                (p for p in (jaas_path_from_opts(environ.get(e)) for e in jaas_env) if p), None)
            if not jaas_file:
                where = " or ".join([f"{e}=-D{JAAS_PROPERTY}=FILE" for e in jaas_env] + ["authentication.jaas.file"])
                raise ConfigError(f"authentication.method=BASIC needs the users: a JAAS config ({where}) or "
                                  "authentication.users.file")
            users = users_from_jaas(jaas_file, realm)
    tokens: tuple[str, ...] = ()
    if "BEARER" in chosen:
        tokens = tuple(t.strip() for t in (get("authentication.bearer.tokens") or "").split(",") if t.strip())
        if not tokens:
            raise ConfigError("authentication.method=BEARER needs authentication.bearer.tokens")
    names = frozenset(r.strip() for r in (get("authentication.roles") or "*").split(",") if r.strip())
    return Authenticator(realm, users, tokens, None if not names or "*" in names else names)
