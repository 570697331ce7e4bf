"""A Kafka client's security settings, parsed once for every service that talks to a cluster.

Services (mirror, audit counters and service, registry, loads, admin CLIs) take a client's properties in either
naming: Kafka's Java client (``security.protocol``, ``sasl.mechanism``, ``sasl.jaas.config``,
``ssl.truststore.location``, ``ssl.keystore.location``, ...) or librdkafka's (``sasl.username``,
``sasl.password``, ``ssl.ca.location``, ``ssl.certificate.location``, ``ssl.key.location``, ...). SASL mechanisms:
PLAIN, SCRAM-SHA-256/512, and OAUTHBEARER with an OIDC client-credentials login (librdkafka's
``sasl.oauthbearer.method=oidc``, ``sasl.oauthbearer.client.id``, ``sasl.oauthbearer.client.secret``,
``sasl.oauthbearer.token.endpoint.url``, ``sasl.oauthbearer.scope``; or Kafka's ``sasl.oauthbearer.token.endpoint.url``
with ``clientId``, ``clientSecret`` and ``scope`` in the ``OAuthBearerLoginModule`` of ``sasl.jaas.config``).
:class:`ClientSecurity` reads them (optionally under a prefix such as ``kafkastore.``) and renders them for
confluent-kafka (:meth:`~ClientSecurity.librdkafka`), kafka-python / aiokafka
(:meth:`~ClientSecurity.kafka_python`) or a plain :class:`ssl.SSLContext`.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass

from settings import jaas
from settings.properties import ConfigError

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")

# Every key this module reads (without a prefix). The Java keys without a librdkafka twin are consumed here;
# a service passing the rest of its properties to librdkafka must leave these out (see split()).
KEYS = frozenset((
    "security.protocol", "sasl.mechanism", "sasl.mechanisms", "sasl.jaas.config", "sasl.username", "sasl.password",
    "ssl.truststore.location", "ssl.truststore.type", "ssl.truststore.password", "ssl.truststore.certificates",
    "ssl.ca.location", "ssl.keystore.location", "ssl.keystore.type", "ssl.keystore.password", "ssl.key.password",
    "ssl.certificate.location", "ssl.key.location", "ssl.endpoint.identification.algorithm",
    "sasl.oauthbearer.method", "sasl.oauthbearer.client.id", "sasl.oauthbearer.client.secret",
    "sasl.oauthbearer.token.endpoint.url", "sasl.oauthbearer.scope", "sasl.login.callback.handler.class",
))


@dataclass(frozen=True)
class OidcLogin:
    """An OIDC client-credentials login (OAUTHBEARER)."""
    token_url: str
    client_id: str
    client_secret: str
    scope: str | None = None


@dataclass(frozen=True)
class ClientSecurity:
    protocol: str = "PLAINTEXT"
    mechanism: str | None = None
    username: str | None = None
    password: str | None = None
    ca_file: str | None = None  # PEM CA certificates trusted for the brokers' certificates (None: system CAs)
    cert_file: str | None = None  # PEM client certificate (chain); with key_file, or a PEM key store
    key_file: str | None = None
    key_password: str | None = None
    check_hostname: bool = True
    oidc: OidcLogin | None = None

    @property
    def tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    @property
    def sasl(self) -> bool:
        return self.protocol.startswith("SASL_")

    @classmethod
    def from_properties(cls, props: dict[str, str], prefix: str = "") -> "ClientSecurity":
        """The settings under ``prefix`` in ``props``; ConfigError names the first key that does not fit."""
        def get(key: str) -> str | None:
            value = props.get(prefix + key)
            return value.strip() if isinstance(value, str) and value.strip() else None

        protocol = (get("security.protocol") or "PLAINTEXT").upper()
        if protocol not in PROTOCOLS:
            raise ConfigError(f"{prefix}security.protocol={protocol}: expected one of {', '.join(PROTOCOLS)}")
        mechanism = get("sasl.mechanism") or get("sasl.mechanisms")
        username, password = get("sasl.username"), get("sasl.password")
        options: dict[str, str] = {}
        if get("sasl.jaas.config"):
            try:
                options = jaas.parse(get("sasl.jaas.config"))[0].options
            except jaas.JaasError as exc:
                raise ConfigError(f"{prefix}{exc}") from None
            username, password = options.get("username", username), options.get("password", password)
        oidc = None
        if protocol.startswith("SASL_"):
            mechanism = (mechanism or "GSSAPI").upper()
            if mechanism not in MECHANISMS:
                raise ConfigError(f"{prefix}sasl.mechanism={mechanism}: logbus clients use {', '.join(MECHANISMS)}")
            if mechanism == "OAUTHBEARER":
                oidc = _oidc_login(get, options, prefix)
            elif not username or password is None:
                raise ConfigError(f"{prefix}security.protocol={protocol} needs a user: {prefix}sasl.jaas.config "
                                  f"(username=... password=...) or {prefix}sasl.username and {prefix}sasl.password")
        for key in ("ssl.truststore.type", "ssl.keystore.type"):
            kind = (get(key) or "PEM").upper()
            if kind not in ("PEM",):
                raise ConfigError(f"{prefix}{key}={kind}: logbus clients read PEM files only")
        key_store = get("ssl.keystore.location")
        cert_file = get("ssl.certificate.location") or key_store
        key_file = get("ssl.key.location") or key_store
        algorithm = props.get(prefix + "ssl.endpoint.identification.algorithm")  # Kafka: "" turns the check off
        check = algorithm is None or algorithm.strip().lower() == "https"
        return cls(protocol, mechanism if protocol.startswith("SASL_") else None, username, password,
                   get("ssl.truststore.location") or get("ssl.ca.location"), cert_file, key_file,
                   get("ssl.key.password") or get("ssl.keystore.password"), check, oidc)

    @staticmethod
    def split(props: dict[str, str], prefix: str = "") -> tuple[dict[str, str], dict[str, str]]:
        """(the security keys under ``prefix``, every other key) — the others can go to a client unchanged."""
        mine = {k: v for k, v in props.items() if k.startswith(prefix) and k[len(prefix):] in KEYS}
        return mine, {k: v for k, v in props.items() if k not in mine}

    def librdkafka(self) -> dict[str, str]:
        """confluent-kafka (librdkafka) settings."""
        conf = {"security.protocol": self.protocol}
        if self.sasl and self.oidc is not None:
            conf.update({"sasl.mechanism": "OAUTHBEARER", "sasl.oauthbearer.method": "oidc",
                         "sasl.oauthbearer.client.id": self.oidc.client_id,
                         "sasl.oauthbearer.client.secret": self.oidc.client_secret,
                         "sasl.oauthbearer.token.endpoint.url": self.oidc.token_url,
                         **({"sasl.oauthbearer.scope": self.oidc.scope} if self.oidc.scope else {})})
        elif self.sasl:
            conf.update({"sasl.mechanism": self.mechanism, "sasl.username": self.username,
                         "sasl.password": self.password})
        if self.tls:
            if self.ca_file:
                conf["ssl.ca.location"] = self.ca_file
            if self.cert_file:
                conf["ssl.certificate.location"] = self.cert_file
                conf["ssl.key.location"] = self.key_file
                if self.key_password:
                    conf["ssl.key.password"] = self.key_password
            conf["ssl.endpoint.identification.algorithm"] = "https" if self.check_hostname else "none"
        return conf

    def kafka_python(self) -> dict[str, object]:
        """kafka-python / aiokafka keyword arguments (aiokafka takes ``ssl_context`` the same way)."""
        kwargs: dict[str, object] = {"security_protocol": self.protocol}
        if self.sasl and self.oidc is not None:  # aiokafka's token provider (the registry's election)
            from settings.oidc import OidcTokens

            https = self.oidc.token_url.startswith("https:") and self.ca_file  # the brokers' CAs for the endpoint too
            context = ssl.create_default_context(cafile=self.ca_file) if https else None
            tokens = OidcTokens(self.oidc.token_url, self.oidc.client_id, self.oidc.client_secret, self.oidc.scope,
                                context)
            kwargs.update(sasl_mechanism="OAUTHBEARER", sasl_oauth_token_provider=tokens.aiokafka_provider())
        elif self.sasl:
            kwargs.update(sasl_mechanism=self.mechanism, sasl_plain_username=self.username,
                          sasl_plain_password=self.password)
        if self.tls:
            kwargs["ssl_context"] = self.ssl_context()
        return kwargs

    def ssl_context(self) -> ssl.SSLContext | None:
        """A client TLS context (None for PLAINTEXT and SASL_PLAINTEXT)."""
        if not self.tls:
            return None
        context = ssl.create_default_context(cafile=self.ca_file)
        context.check_hostname = self.check_hostname
        if self.cert_file:
            context.load_cert_chain(self.cert_file, self.key_file, self.key_password)
        return context


def _oidc_login(get, options: dict[str, str], prefix: str) -> OidcLogin:
    """The OIDC login of an OAUTHBEARER client, from librdkafka's keys or Kafka's (JAAS options)."""
    method = (get("sasl.oauthbearer.method") or "oidc").lower()
    if method != "oidc":
        raise ConfigError(f"{prefix}sasl.oauthbearer.method={method}: logbus clients log in with oidc "
                          "(client credentials)")
    url = get("sasl.oauthbearer.token.endpoint.url")
    client_id = get("sasl.oauthbearer.client.id") or options.get("clientId")
    secret = get("sasl.oauthbearer.client.secret") or options.get("clientSecret")
    if not (url and client_id and secret):
        raise ConfigError(f"{prefix}sasl.mechanism=OAUTHBEARER needs {prefix}sasl.oauthbearer.token.endpoint.url, "
                          f"{prefix}sasl.oauthbearer.client.id and {prefix}sasl.oauthbearer.client.secret (or "
                          "clientId and clientSecret in sasl.jaas.config)")
    return OidcLogin(url, client_id, secret, get("sasl.oauthbearer.scope") or options.get("scope"))


def librdkafka_config(props: dict[str, str], prefix: str = "") -> dict[str, str]:
    """``props`` with its security keys (under ``prefix``, which is dropped) in librdkafka's names; the other keys
    as they are. Kafka's Java names (sasl.jaas.config, ssl.truststore.location, ...) become librdkafka's."""
    mine, rest = ClientSecurity.split(props, prefix)
    if not mine:
        return dict(rest)
    return {**rest, **ClientSecurity.from_properties(mine, prefix).librdkafka()}


def connection(conf: dict) -> dict:
    """Where and how to connect, out of a client's librdkafka settings: ``bootstrap.servers`` and the security
    settings (``security.*``, ``sasl.*``, ``ssl.*``) — the base of the other clients a service opens to the same
    cluster (admin clients, offset readers)."""
    return {k: v for k, v in conf.items()
            if k == "bootstrap.servers" or k.split(".")[0] in ("security", "sasl", "ssl")}


def client_base(where: str | dict) -> dict:
    """librdkafka settings from a bootstrap string or a :func:`connection` dict."""
    return {"bootstrap.servers": where} if isinstance(where, str) else dict(where)
