"""Registry configuration with Confluent Schema Registry's property names and defaults."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from settings import http_auth, http_server
from settings.properties import ConfigError, parse_properties
from settings.security import KEYS as CLIENT_SECURITY_KEYS
from settings.security import ClientSecurity
from telemetry.exposition import parse_listener

LEVELS = ("NONE", "BACKWARD", "BACKWARD_TRANSITIVE", "FORWARD", "FORWARD_TRANSITIVE", "FULL", "FULL_TRANSITIVE")
MODES = ("READWRITE", "READONLY")
KEYS = {
    "listeners": "http://127.0.0.1:8081",
    "kafkastore.bootstrap.servers": None,
    "kafkastore.topic": "_schemas",
    "kafkastore.topic.replication.factor": "3",
    "kafkastore.timeout.ms": "500",
    # logbus: the leader writes through a transactional producer of this id, so a newly elected leader fences an
    # earlier one (a paused leader that resumes cannot write); empty: plain idempotent writes, as Confluent's
    "kafkastore.transactional.id": "",
    "schema.compatibility.level": "BACKWARD",
    "host.name": "127.0.0.1",
    "mode": "READWRITE",
    "max.request.bytes": "10485760",
    "dek.registry.max.keys": "20000",  # Confluent's cap on KEKs, and on DEKs, of the DEK registry (40972 past it)
    # leader election among writable instances (Confluent's keys): through Kafka's group protocol
    "leader.eligibility": "true",
    "schema.registry.group.id": "schema-registry",
    "inter.instance.protocol": "",
    "metrics.listener": "",  # logbus: Prometheus metrics on http://HOST:PORT/metrics (the broker's key)  # the scheme other instances reach this one with (default: the first listener's)
    # HTTP authentication, Confluent's keys (rest-utils); authentication.roles "*" is any user of the file
    "authentication.method": "NONE",
    "authentication.realm": "",
    "authentication.roles": "*",
}
OPTIONAL = {
    *http_server.SERVER_SSL_KEYS,  # the https listeners' key store, trust store, client authentication
    "authentication.jaas.file",  # logbus: the JAAS config (Confluent: -Djava.security.auth.login.config)
    "authentication.users.file",  # logbus: the PropertyFileLoginModule password file itself
    "authentication.roles.write",  # logbus: roles that register schemas (default: every role)
    "authentication.roles.admin",  # logbus: roles that delete, change /config and /mode (default: write roles)
    *(f"kafkastore.{k}" for k in CLIENT_SECURITY_KEYS),  # the store's Kafka client security
}
JAAS_ENV = ("SCHEMA_REGISTRY_OPTS", "KAFKA_OPTS")


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
        unknown = set(raw) - set(KEYS) - OPTIONAL
        if unknown:
            raise RegistryConfigError(f"unknown config key {sorted(unknown)[0]!r}")
        values = {k: raw.get(k, v) for k, v in KEYS.items()}
        values.update({k: v for k, v in raw.items() if k in OPTIONAL})
        if not values["kafkastore.bootstrap.servers"]:
            raise RegistryConfigError("kafkastore.bootstrap.servers is required")
        if values["schema.compatibility.level"].upper() not in LEVELS:
            raise RegistryConfigError(f"schema.compatibility.level must be one of {', '.join(LEVELS)}")
        if values["mode"].upper() not in MODES:
            raise RegistryConfigError("mode must be READWRITE or READONLY")
        try:
            parse_listener(values["metrics.listener"].strip())
        except ValueError as exc:
            raise RegistryConfigError(str(exc)) from None
        if values["leader.eligibility"].strip().lower() not in ("true", "false"):
            raise RegistryConfigError("leader.eligibility must be true or false")
        try:
            int(values["kafkastore.timeout.ms"])
            int(values["max.request.bytes"])
        except ValueError as exc:
            raise RegistryConfigError(str(exc)) from None
        cfg = cls(values)
        try:
            cfg.listeners  # validates
            http_server.check_ssl(values, cfg.listeners)
            cfg.kafkastore_security
            cfg.identity
            cfg.authenticator()
        except ConfigError as exc:
            raise RegistryConfigError(str(exc)) from None
        return cfg

    def __getitem__(self, key: str) -> str:
        return self.values[key]

    def get(self, key: str) -> str | None:
        value = self.values.get(key)
        return value.strip() if isinstance(value, str) and value.strip() else None

    @property
    def listeners(self) -> list[http_server.Listener]:
        return http_server.parse_listeners(self.values["listeners"])

    @property
    def listener(self) -> tuple[str, int]:
        first = self.listeners[0]
        return first.host, first.port

    @property
    def identity(self):
        """How the other instances reach this one: ``host.name``, and the port and scheme of the listener of
        ``inter.instance.protocol`` (the first listener when unset)."""
        from schema_registry.election import Identity

        wanted = self.values["inter.instance.protocol"].strip().lower()
        chosen = next((lst for lst in self.listeners if lst.scheme == wanted), None) if wanted else self.listeners[0]
        if chosen is None:
            raise ConfigError(f"inter.instance.protocol={wanted}: no listener has that scheme")
        return Identity(self.values["host.name"], chosen.port, chosen.scheme,
                        self.values["leader.eligibility"].strip().lower() == "true")

    def forwarding_verify(self):
        """What a forwarded request trusts of the leader's certificate: the registry's trust store, else the CA of
        its Kafka store client, else the system's CAs."""
        import ssl

        ca = self.get("ssl.truststore.location") or self.kafkastore_security.ca_file
        return ssl.create_default_context(cafile=ca) if ca else True

    @property
    def kafkastore_security(self) -> ClientSecurity:
        """The store's Kafka client security (``kafkastore.security.protocol``, ``kafkastore.sasl.*``,
        ``kafkastore.ssl.*``, Kafka's or librdkafka's names)."""
        return ClientSecurity.from_properties(self.values, "kafkastore.")

    def authenticator(self, environ: dict | None = None) -> http_auth.Authenticator | None:
        """None for authentication.method=NONE; BASIC users from ``authentication.users.file``, or from the
        JAAS config named by ``authentication.jaas.file`` or ``-Djava.security.auth.login.config=`` in
        SCHEMA_REGISTRY_OPTS (Confluent's way), section ``authentication.realm``."""
        return http_auth.from_properties(self.values, ("NONE", "BASIC"), JAAS_ENV, environ)

    def role_policy(self):
        """``allowed(method, path, roles)`` for the logbus role split, None when it is not configured."""
        write = roles(self.get("authentication.roles.write"))
        admin = roles(self.get("authentication.roles.admin")) or write
        if write is None and admin is None:
            return None

        def allowed(method: str, path: str, user_roles: frozenset[str]) -> bool:
            need = operation(method, path)
            if need == "read":
                return True
            if need == "write":
                return write is None or bool(user_roles & (write | (admin or frozenset())))
            return admin is None or bool(user_roles & admin)

        return allowed


def roles(value: str | None) -> frozenset[str] | None:
    """A comma-separated role list; None for unset or ``*`` (any role)."""
    names = frozenset(r.strip() for r in (value or "").split(",") if r.strip())
    return None if not names or "*" in names else names


def operation(method: str, path: str) -> str:
    """``read``, ``write`` or ``admin``: GETs, schema lookups (POST /subjects/{s}) and compatibility checks read;
    registering (POST /subjects/{s}/versions) and creating KEKs and DEKs write; deletes, undeletes, changes of
    /config, /mode and KEKs (PUT) and testing a KEK's KMS administer."""
    if method in ("GET", "HEAD", "OPTIONS"):
        return "read"
    parts = [p for p in path.split("/") if p]
    if method == "POST" and parts[:1] == ["compatibility"]:
        return "read"
    if method == "POST" and parts[:1] == ["subjects"] and len(parts) == 2:
        return "read"
    if method == "POST" and parts[:1] == ["subjects"]:
        return "write"
    if method == "POST" and parts[:2] == ["dek-registry", "v1"] and parts[-1] not in ("undelete", "test"):
        return "write"  # a producer's serializer creates its KEK and DEKs
    return "admin"
