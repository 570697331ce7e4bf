"""Broker configuration: Kafka's own key names, types and defaults.

A config file is a Java-style properties file (``key=value``, ``#`` comments). Unknown keys and values that
do not parse are refused at start-up with a :class:`ConfigError` naming the key.
"""

from __future__ import annotations

import re
import socket
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Callable

from settings.properties import ConfigError, parse_properties  # noqa: F401  (re-exported)


SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
DEFAULT_PROTOCOL_MAP = {p: p for p in SECURITY_PROTOCOLS}
_NAME = re.compile(r"^[A-Za-z0-9_]+$")


def _int(lo: int | None = None):
    def parse(raw: str) -> int:
        value = int(raw.strip())
        if lo is not None and value < lo:
            raise ValueError(f"must be >= {lo}")
        return value

    return parse


def _ratio(raw: str) -> float:
    value = float(raw.strip())
    if not 0.0 <= value <= 1.0:
        raise ValueError("must be between 0 and 1")
    return value


def _bool(raw: str) -> bool:
    lowered = raw.strip().lower()
    if lowered not in ("true", "false"):
        raise ValueError("must be true or false")
    return lowered == "true"


def _choice(*allowed: str):
    def parse(raw: str) -> str:
        value = raw.strip()
        if value not in allowed:
            raise ValueError(f"must be one of {', '.join(allowed)}")
        return value

    return parse


def _authorizer(raw: str) -> str:
    return _choice("", "kafka.security.authorizer.AclAuthorizer",
                   "org.apache.kafka.metadata.authorizer.StandardAuthorizer", "logbus.AclAuthorizer")(raw)


def _metrics_listener(raw: str) -> str:
    from telemetry.exposition import parse_listener

    parse_listener(raw.strip())
    return raw.strip()


def _str(raw: str) -> str:
    return raw.strip()


def _list(raw: str) -> list[str]:
    return [part.strip() for part in raw.split(",") if part.strip()]


def _listeners(raw: str) -> list[str]:
    items = _list(raw)
    for item in items:
        parse_listener(item, {})
    return items


def _ip_overrides(raw: str) -> dict[str, int]:
    """``max.connections.per.ip.overrides``: ``host-or-ip:count`` pairs, comma-separated."""
    from broker.network.quotas import normal_host

    out: dict[str, int] = {}
    for item in _list(raw):
        host, sep, count = item.rpartition(":")
        if not sep or not host or not count.strip().isdigit():
            raise ValueError(f"{item!r}: expected host:count")
        out[normal_host(host.strip())] = int(count)
    return out


def _protocol_map(raw: str) -> dict[str, str]:
    out = {}
    for item in _list(raw):
        name, sep, protocol = item.partition(":")
        if not sep or not _NAME.match(name.strip()) or protocol.strip().upper() not in SECURITY_PROTOCOLS:
            raise ValueError(f"{item!r}: expected LISTENER_NAME:PROTOCOL with a protocol of "
                             f"{', '.join(SECURITY_PROTOCOLS)}")
        out[name.strip().upper()] = protocol.strip().upper()
    return out


@dataclass(frozen=True)
class Key:
    name: str
    parse: Callable[[str], object]
    default: object
    doc: str


IMPLEMENTED_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER", "GSSAPI")
OAUTHBEARER_VALIDATOR = "org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler"
OAUTHBEARER_LOGIN_HANDLER = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginCallbackHandler"
# Kafka 3.1-3.3's name of the same class (deprecated since 3.4, still accepted)
OAUTHBEARER_LOGIN_HANDLERS = (OAUTHBEARER_LOGIN_HANDLER,
                              "org.apache.kafka.common.security.oauthbearer.secured.OAuthBearerLoginCallbackHandler")

# Kafka's SSL and SASL keys; each may also be set for one listener as listener.name.<listener>.<key>.
SECURITY_KEYS = [
    Key("ssl.keystore.type", _choice("JKS", "PKCS12", "PEM"), "JKS", "Format of the key store: JKS (Kafka's "
        "default), PKCS12 or PEM. With JKS or PKCS12 the file is read by its content (JKS, PKCS12, or PEM text); "
        "PEM is read as PEM only. JCEKS is refused."),
    Key("ssl.keystore.location", _str, None, "The key store file: a JKS (keytool's) or PKCS12 file, or for PEM "
        "one file with the private key and the certificate chain."),
    Key("ssl.keystore.password", _str, None, "Password of a JKS (needed) or PKCS12 key store."),
    Key("ssl.key.password", _str, None, "Password of the private key (PEM key store; JKS: defaults to "
        "ssl.keystore.password)."),
    Key("ssl.keystore.certificate.chain", _str, None, "The certificate chain in PEM, inline (with "
        "ssl.keystore.key, instead of ssl.keystore.location)."),
    Key("ssl.keystore.key", _str, None, "The private key in PEM, inline."),
    Key("ssl.truststore.type", _choice("JKS", "PKCS12", "PEM"), "JKS", "Format of the trust store: JKS (Kafka's "
        "default), PKCS12 or PEM, read as ssl.keystore.type (a PEM file given as JKS is read as PEM)."),
    Key("ssl.truststore.location", _str, None, "CA certificates trusted for peers' certificates: a JKS or PKCS12 "
        "trust store, or PEM."),
    Key("ssl.truststore.password", _str, None, "Password of a JKS or PKCS12 trust store (JKS: optional, its "
        "integrity is checked when set; PEM needs none)."),
    Key("ssl.truststore.certificates", _str, None, "CA certificates in PEM, inline."),
    Key("ssl.client.auth", _choice("none", "requested", "required"), "none", "Whether SSL listeners ask "
        "clients for a certificate (required: the certificate's DN becomes the principal)."),
    Key("ssl.endpoint.identification.algorithm", _str, "https", "https: brokers check the host name in the "
        "certificate of the broker they connect to; empty: no check."),
    Key("ssl.enabled.protocols", _list, ["TLSv1.2", "TLSv1.3"], "TLS versions accepted."),
    Key("security.inter.broker.protocol", _choice(*SECURITY_PROTOCOLS), "PLAINTEXT",
        "Security protocol between brokers, when inter.broker.listener.name is not set."),
    Key("sasl.enabled.mechanisms", _list, ["GSSAPI"], "SASL mechanisms offered on SASL listeners (logbus: "
        "PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER, GSSAPI)."),
    Key("sasl.mechanism.inter.broker.protocol", _str, "GSSAPI", "SASL mechanism brokers use with each other."),
    Key("sasl.jaas.config", _str, None, "JAAS login configuration (usually set per listener and mechanism: "
        "listener.name.<listener>.<mechanism>.sasl.jaas.config)."),
]
# Keys that may also be set for one listener, or one listener and SASL mechanism:
# listener.name.<listener>[.<mechanism>].<key> (Kafka's saslMechanismConfigPrefix)
MECHANISM_KEYS = [
    Key("connections.max.reauth.ms", _int(0), 0, "KIP-368: when positive, a SASL session lasts at most this "
        "long: clients (SaslAuthenticate v1+) are told, and a connection not re-authenticated by then is closed "
        "at its next request (0: sessions do not expire, except an OAUTHBEARER token's own expiry)."),
    Key("sasl.server.callback.handler.class", _str, None, "OAUTHBEARER: unset for Kafka's unsecured JWS "
        f"validator; {OAUTHBEARER_VALIDATOR} for signed JWTs checked against sasl.oauthbearer.jwks.endpoint.url."),
    Key("sasl.oauthbearer.jwks.endpoint.url", _str, None, "OAUTHBEARER: the JWKS (http(s):// or file://) "
        "whose keys sign valid tokens."),
    Key("sasl.oauthbearer.jwks.endpoint.refresh.ms", _int(1), 3600000, "OAUTHBEARER: reload the JWKS this "
        "often (and when a token names an unknown key id)."),
    Key("sasl.oauthbearer.expected.audience", _list, [], "OAUTHBEARER: a token's aud must name one of these "
        "(empty: not checked)."),
    Key("sasl.oauthbearer.expected.issuer", _str, None, "OAUTHBEARER: a token's iss must be this (unset: not "
        "checked)."),
    Key("sasl.oauthbearer.sub.claim.name", _str, "sub", "OAUTHBEARER: the claim naming the principal."),
    Key("sasl.oauthbearer.scope.claim.name", _str, "scope", "OAUTHBEARER: the claim holding the scope."),
    Key("sasl.oauthbearer.clock.skew.seconds", _int(0), 30, "OAUTHBEARER: leeway for exp, iat and nbf."),
    Key("sasl.kerberos.service.name", _str, None, "GSSAPI: the Kerberos service name of the brokers (the first "
        "component of the listener's principal, e.g. kafka)."),
    Key("sasl.kerberos.principal.to.local.rules", _list, ["DEFAULT"], "GSSAPI: Kafka's rules mapping a Kerberos "
        "name to the principal's name (DEFAULT: the first component, for names of the default realm)."),
    Key("sasl.login.callback.handler.class", _str, None, "OAUTHBEARER between brokers: unset for Kafka's "
        f"unsecured login; {OAUTHBEARER_LOGIN_HANDLER} for an OIDC client-credentials login at "
        "sasl.oauthbearer.token.endpoint.url (the JAAS options clientId, clientSecret, scope)."),
    Key("sasl.oauthbearer.token.endpoint.url", _str, None, "OAUTHBEARER between brokers: the OIDC token "
        "endpoint (http(s)://) of the client-credentials login."),
    Key("sasl.login.connect.timeout.ms", _int(1), 10000, "OAUTHBEARER between brokers: connect timeout of "
        "the token endpoint."),
    Key("sasl.login.read.timeout.ms", _int(1), 10000, "OAUTHBEARER between brokers: read timeout of the "
        "token endpoint."),
]
# Kafka's PASSWORD-type keys: DescribeConfigs answers them with no value and is_sensitive=true.
SENSITIVE_KEYS = frozenset(("ssl.keystore.password", "ssl.key.password", "ssl.keystore.key",
                            "ssl.truststore.password", "sasl.jaas.config"))
_SCOPED = re.compile(r"^listener\.name\.([a-z0-9_]+)\.(.+)$")
_JAAS_KEY = Key("sasl.jaas.config", _str, None, "JAAS login configuration of one listener and mechanism.")


def listener_scoped_key(name: str) -> Key | None:
    """The key of ``listener.name.<listener>.<key>`` (an SSL or SASL key, or ``<mechanism>.sasl.jaas.config``)."""
    match = _SCOPED.match(name)
    if match is None:
        return None
    rest = match.group(2)
    if rest == "max.connections":
        return KEYS[rest]
    for key in SECURITY_KEYS:
        if key.name == rest:
            return key
    mechanism, sep, tail = rest.partition(".")
    if sep and tail == "sasl.jaas.config" and mechanism.upper() in SASL_MECHANISMS:
        return _JAAS_KEY
    for key in MECHANISM_KEYS:  # the mechanism in lower case, as Kafka's saslMechanismConfigPrefix
        if key.name == rest or (sep and key.name == tail and mechanism.upper() in SASL_MECHANISMS
                                and mechanism == mechanism.lower()):
            return key
    return None


LONG_MAX = 2**63 - 1

KEYS: dict[str, Key] = {
    k.name: k
    for k in [
        Key("broker.id", _int(0), 0, "This broker's id."),
        Key("listeners", _listeners, ["PLAINTEXT://127.0.0.1:9092"], "Where to listen: NAME://host:port, "
            "comma-separated, one port each (an empty host binds every interface)."),
        Key("metrics.listener", _metrics_listener, "", "Where to serve Prometheus metrics: http://HOST:PORT "
            "(path /metrics; empty: off)."),
        Key("advertised.listeners", _listeners, None, "What Metadata tells clients, per listener name: a client "
            "gets the brokers' addresses of the listener it connected to (default: listeners)."),
        Key("listener.security.protocol.map", _protocol_map, DEFAULT_PROTOCOL_MAP,
            "Security protocol of each listener name: PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL."),
        Key("inter.broker.listener.name", _str, None, "The listener brokers use to reach each other "
            "(default: the listener of security.inter.broker.protocol if set, else the one named PLAINTEXT, "
            "else the first)."),
        *SECURITY_KEYS,
        *MECHANISM_KEYS,
        Key("log.dirs", _list, ["/tmp/logbus-logs"], "Directories holding partition logs."),
        Key("num.partitions", _int(1), 1, "Partitions of an auto-created topic."),
        Key("default.replication.factor", _int(1), 1, "Replication factor of an auto-created topic."),
        Key("auto.create.topics.enable", _bool, True, "Create a topic on first Metadata/Produce request."),
        Key("log.segment.bytes", _int(14), 1024**3, "Roll the active segment at this size."),
        Key("log.roll.ms", _int(1), None, "Roll the active segment after this age (ms)."),
        Key("log.roll.hours", _int(1), 168, "Roll the active segment after this age (hours)."),
        Key("log.roll.jitter.ms", _int(0), None, "Largest random amount taken off the roll age of a segment (ms)."),
        Key("log.roll.jitter.hours", _int(0), 0, "The same in hours."),
        Key("log.segment.delete.delay.ms", _int(0), 60000, "Keep a deleted segment's files this long (in-flight "
            "reads finish)."),
        Key("log.index.interval.bytes", _int(0), 4096, "Bytes between two sparse index entries."),
        Key("log.retention.ms", _int(-1), None, "Delete segments older than this (ms); -1 keeps forever."),
        Key("log.retention.minutes", _int(-1), None, "Retention in minutes."),
        Key("log.retention.hours", _int(-1), 168, "Retention in hours (7 days, as Kafka)."),
        Key("log.retention.bytes", _int(-1), -1, "Delete oldest segments while a partition is larger."),
        Key("log.retention.check.interval.ms", _int(1), 300_000, "How often retention runs."),
        Key("log.flush.interval.messages", _int(1), LONG_MAX, "fsync after this many messages."),
        Key("log.flush.interval.ms", _int(0), None, "fsync data older than this (ms)."),
        Key("log.flush.scheduler.interval.ms", _int(1), LONG_MAX, "How often the flusher checks."),
        Key("message.max.bytes", _int(0), 1048588, "Largest record batch accepted."),
        Key("socket.request.max.bytes", _int(1), 104857600, "Largest request frame accepted."),
        Key("queued.max.request.bytes", _int(-1), 209715200, "Bytes of large request frames (over 1 MiB) read "
            "or being handled at once, across all connections; -1: unbounded (Kafka's default)."),
        Key("max.connections", _int(0), 2**31 - 1, "Connections the broker keeps open at once, over every listener "
            "but the inter-broker one (KIP-402); also per listener as listener.name.<listener>.max.connections. "
            "A connection over the limit is closed at once."),
        Key("max.connections.per.ip", _int(0), 2**31 - 1, "Connections one IP address may keep open at once; "
            "more are closed at once."),
        Key("max.connections.per.ip.overrides", _ip_overrides, {}, "Per-host or per-IP exceptions to "
            "max.connections.per.ip: host:count,ip:count."),
        Key("max.broker.partitions", _int(-1), -1, "Partitions one broker may host (KIP-578's name); -1: what the "
            "open-file limit allows, (RLIMIT_NOFILE - 1024) / 4."),
        Key("quota.window.num", _int(1), 11, "Samples a client quota's rate is kept in (Kafka's name)."),
        Key("quota.window.size.seconds", _int(1), 1, "Seconds each sample of a client quota's rate spans."),
        Key("controller.quota.window.num", _int(1), 11, "Windows of controller_mutation_rate a client may spend "
            "at once (the token bucket's burst: num x size x quota)."),
        Key("controller.quota.window.size.seconds", _int(1), 1, "Seconds of each such window."),
        Key("zookeeper.connect", _str, None, "ZooKeeper host:port[/chroot]: cluster mode (none: standalone)."),
        Key("zookeeper.session.timeout.ms", _int(1), 18000, "ZooKeeper session timeout."),
        Key("zookeeper.connection.timeout.ms", _int(1), None, "Wait this long for ZooKeeper at start-up "
            "(default: the session timeout)."),
        Key("broker.rack", _str, None, "Rack of this broker (shown in metadata)."),
        Key("min.insync.replicas", _int(1), 1, "Replicas that must have a write for acks=all to succeed."),
        Key("replica.lag.time.max.ms", _int(1), 30000, "A follower not caught up for this long leaves the ISR."),
        Key("replica.fetch.wait.max.ms", _int(0), 500, "Longest wait of a follower's fetch."),
        Key("replica.fetch.min.bytes", _int(1), 1, "Bytes a follower's fetch waits for."),
        Key("replica.fetch.max.bytes", _int(1), 1048576, "Bytes per partition in a follower's fetch."),
        Key("replica.fetch.response.max.bytes", _int(1), 10485760, "Bytes in a follower's fetch response."),
        Key("max.incremental.fetch.session.cache.slots", _int(0), 1000, "Incremental fetch sessions (KIP-227) the "
            "broker keeps; 0: every fetch is sessionless."),
        Key("replica.fetch.backoff.ms", _int(0), 1000, "Pause after a failed follower fetch."),
        Key("replica.socket.timeout.ms", _int(1), 30000, "Socket timeout of follower fetches."),
        Key("unclean.leader.election.enable", _bool, False, "Elect a replica outside the ISR when none is left "
            "(may lose acknowledged data)."),
        Key("auto.leader.rebalance.enable", _bool, True, "Move leadership back to the preferred replica."),
        Key("leader.imbalance.check.interval.seconds", _int(1), 300, "How often the controller does that."),
        Key("group.initial.rebalance.delay.ms", _int(0), 3000, "A new group waits this long for more members "
            "before its first rebalance."),
        Key("group.min.session.timeout.ms", _int(1), 6000, "Smallest session timeout a consumer may ask for."),
        Key("group.max.session.timeout.ms", _int(1), 1800000, "Largest session timeout a consumer may ask for."),
        Key("group.consumer.session.timeout.ms", _int(1), 45000, "Session timeout of a member of a consumer group "
            "on the \"consumer\" protocol (KIP-848): silent this long, it is removed."),
        Key("group.consumer.heartbeat.interval.ms", _int(1), 5000, "How often such a member heartbeats (the "
            "coordinator tells it)."),
        Key("log.cleaner.enable", _bool, True, "Run the log cleaner for compacted topics."),
        Key("log.cleaner.backoff.ms", _int(1), 15000, "Pause of the cleaner when no log needs cleaning."),
        Key("log.cleaner.min.cleanable.ratio", _ratio, 0.5, "Dirty ratio above which a log gets cleaned."),
        Key("log.cleaner.delete.retention.ms", _int(0), 86400000, "How long tombstones are kept."),
        Key("log.cleanup.policy", _str, "delete", "Default cleanup.policy of topics."),
        Key("log.cleaner.min.compaction.lag.ms", _int(0), 0, "A record stays uncompacted at least this long."),
        Key("log.cleaner.max.compaction.lag.ms", _int(1), LONG_MAX, "A record stays uncompacted at most this long "
            "(roughly: the cleaner's backoff and the active segment's roll come on top)."),
        # topic defaults of the produce path (Kafka's names)
        Key("compression.type", _choice("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer"), "producer",
            "Codec batches are stored with (producer: as sent; else recompressed at the leader)."),
        Key("compression.gzip.level", _int(-1), -1, "gzip level of recompressed batches (1-9, -1: zlib's default)."),
        Key("compression.lz4.level", _int(1), 9, "lz4 level of recompressed batches (1-17)."),
        Key("compression.zstd.level", _int(-131072), 3, "zstd level of recompressed batches (up to 22)."),
        Key("log.message.timestamp.type", _choice("CreateTime", "LogAppendTime"), "CreateTime",
            "Record timestamps: the producer's (CreateTime) or the leader's append time (LogAppendTime)."),
        Key("log.message.timestamp.difference.max.ms", _int(0), LONG_MAX, "Deprecated (KIP-937): the default of "
            "the two below."),
        Key("log.message.timestamp.before.max.ms", _int(0), LONG_MAX, "A CreateTime record older than the broker's "
            "time by more than this is refused (INVALID_TIMESTAMP)."),
        Key("log.message.timestamp.after.max.ms", _int(0), LONG_MAX, "A CreateTime record ahead of the broker's "
            "time by more than this is refused (INVALID_TIMESTAMP)."),
        # transactions (Kafka's names and defaults)
        Key("transaction.state.log.num.partitions", _int(1), 50, "Partitions of __transaction_state."),
        Key("transaction.state.log.replication.factor", _int(1), 3, "Replication factor of __transaction_state "
            "(a standalone broker uses 1); fewer live brokers: COORDINATOR_NOT_AVAILABLE until there are enough."),
        Key("transaction.state.log.min.isr", _int(1), 2, "min.insync.replicas of __transaction_state."),
        Key("transaction.state.log.segment.bytes", _int(14), 104857600, "segment.bytes of __transaction_state."),
        Key("transaction.max.timeout.ms", _int(1), 900000, "Largest transaction.timeout.ms a producer may ask for."),
        Key("transaction.abort.timed.out.transaction.cleanup.interval.ms", _int(1), 10000,
            "How often the coordinator aborts transactions past their timeout."),
        Key("transactional.id.expiration.ms", _int(1), 604800000, "Forget a transactional id idle this long."),
        Key("transaction.remove.expired.transaction.cleanup.interval.ms", _int(1), 3600000,
            "How often expired transactional ids are removed."),
        # authorization (Kafka's names and defaults; issue 18 item 2)
        Key("authorizer.class.name", _authorizer, "",
            "ACL authorizer (empty: no authorization, every request allowed)."),
        Key("super.users", _str, "", "Principals allowed everything, semicolon-separated (User:admin;User:broker)."),
        Key("allow.everyone.if.no.acl.found", _bool, False, "With an authorizer: a resource with no ACL at all "
            "is open to everyone."),
    ]
}


def parse_listener(item: str, protocol_map: dict[str, str]) -> tuple[str, str, int]:
    """``NAME://host:port`` → (listener name, host, port). The name is a security protocol or a name of
    ``listener.security.protocol.map``; an empty map only checks the syntax."""
    name, sep, rest = item.partition("://")
    host, colon, port = rest.rpartition(":")
    if not sep or not _NAME.match(name) or not colon or not port.isdigit() or int(port) > 65535:
        raise ValueError(f"listener {item!r}: expected NAME://host:port")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    name = name.upper()
    if protocol_map:
        protocol = protocol_map.get(name)
        if protocol is None:
            raise ValueError(f"listener {item!r}: {name} is not in listener.security.protocol.map")
        if protocol not in IMPLEMENTED_PROTOCOLS:
            raise ValueError(f"listener {item!r}: security protocol {protocol} is not implemented "
                             f"({', '.join(IMPLEMENTED_PROTOCOLS)} only)")
    return name, host, int(port)


@dataclass(frozen=True)
class Listener:
    name: str
    host: str  # to bind ("" or 0.0.0.0: every interface)
    port: int
    advertised_host: str
    advertised_port: int  # 0: whatever port the listener got


class BrokerConfig:
    """Parsed, validated broker settings. Read values with ``config["log.segment.bytes"]``."""

    keys = KEYS

    def __init__(self, values: dict[str, object], explicit: frozenset[str] = frozenset()):
        self._values = values
        self.explicit = explicit  # keys set in the file or by --override

    def __getitem__(self, key: str):
        return self._values[key]

    @classmethod
    def from_strings(cls, raw: dict[str, str]) -> "BrokerConfig":
        values = {name: key.default for name, key in KEYS.items()}
        for name, text in raw.items():
            key = KEYS.get(name) or listener_scoped_key(name)
            if key is None:
                raise ConfigError(f"unknown config key {name!r}")
            try:
                values[name] = key.parse(text)
            except ValueError as exc:
                raise ConfigError(f"invalid value {text!r} for {name}: {exc}") from None
        config = cls(values, frozenset(raw))
        config.listeners  # cross-key checks: names, ports, advertised names, the inter-broker listener
        config.check_security()
        return config

    @classmethod
    def load(cls, path: str | Path | None, overrides: list[str] = ()) -> "BrokerConfig":
        raw: dict[str, str] = {}
        if path is not None:
            try:
                text = Path(path).read_text()
            except OSError as exc:
                raise ConfigError(f"cannot read config file {path}: {exc.strerror}") from None
            raw.update(parse_properties(text))
        for item in overrides:
            name, sep, value = item.partition("=")
            if not sep:
                raise ConfigError(f"--override expects key=value, got {item!r}")
            raw[name.strip()] = value
        return cls.from_strings(raw)

    # Derived settings, resolved the way Kafka resolves them (ms beats minutes beats hours).
    @property
    def retention_ms(self) -> int:
        if self["log.retention.ms"] is not None:
            return self["log.retention.ms"]
        if self["log.retention.minutes"] is not None:
            return self["log.retention.minutes"] * 60_000
        hours = self["log.retention.hours"]
        return -1 if hours < 0 else hours * 3_600_000

    @property
    def roll_ms(self) -> int:
        if self["log.roll.ms"] is not None:
            return self["log.roll.ms"]
        return self["log.roll.hours"] * 3_600_000

    @property
    def roll_jitter_ms(self) -> int:
        if self["log.roll.jitter.ms"] is not None:
            return self["log.roll.jitter.ms"]
        return self["log.roll.jitter.hours"] * 3_600_000

    @property
    def flush_ms(self) -> int:
        value = self["log.flush.interval.ms"]
        return LONG_MAX if value is None else value

    @cached_property
    def listeners(self) -> list[Listener]:
        """Every listener with its advertised address; raises ConfigError when the keys do not fit together."""
        pmap = self["listener.security.protocol.map"]
        try:
            bound = [parse_listener(item, pmap) for item in self["listeners"]]
            advertised = {name: (host, port) for name, host, port in
                          (parse_listener(item, pmap) for item in self["advertised.listeners"] or [])}
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        names = [name for name, _, _ in bound]
        if not bound:
            raise ConfigError("listeners: at least one listener is needed")
        if len(set(names)) != len(names):
            raise ConfigError(f"listeners: each listener name may appear once ({', '.join(names)})")
        ports = [port for _, _, port in bound if port]
        if len(set(ports)) != len(ports):
            raise ConfigError("listeners: each listener needs a port of its own")
        unknown = set(advertised) - set(names)
        if unknown:
            raise ConfigError(f"advertised.listeners: {', '.join(sorted(unknown))} is not a listener name")
        out = []
        for name, host, port in bound:
            adv_host, adv_port = advertised.get(name, (host, port))
            if adv_host in ("", "0.0.0.0", "::"):
                if name in advertised:
                    raise ConfigError(f"advertised.listeners: {name} needs a host clients can reach")
                adv_host = socket.getfqdn()
            out.append(Listener(name, host, port, adv_host, adv_port))
        inter = self["inter.broker.listener.name"]
        if inter is not None and inter.upper() not in names:
            raise ConfigError(f"inter.broker.listener.name: {inter} is not a listener name ({', '.join(names)})")
        return out

    @property
    def inter_broker_listener(self) -> str:
        inter = self["inter.broker.listener.name"]
        names = [listener.name for listener in self.listeners]
        if inter:
            return inter.upper()
        protocol = self["security.inter.broker.protocol"] if "security.inter.broker.protocol" in self.explicit \
            else None
        if protocol is not None and protocol in names:
            return protocol
        return "PLAINTEXT" if "PLAINTEXT" in names else names[0]

    def check_security(self) -> None:
        """Each SSL listener has a key store; each SASL listener offers a mechanism logbus implements; a SASL
        inter-broker listener has a mechanism logbus implements."""
        for spec in self.listeners:
            protocol = self.listener_protocol(spec.name)
            if protocol in ("SSL", "SASL_SSL") and not (self.listener_value(spec.name, "ssl.keystore.location") or
                                                        self.listener_value(spec.name, "ssl.keystore.certificate.chain")):
                raise ConfigError(f"listener {spec.name}: {protocol} needs ssl.keystore.location (or "
                                  "ssl.keystore.certificate.chain and ssl.keystore.key)")
            if protocol.startswith("SASL_"):
                offered = self.listener_value(spec.name, "sasl.enabled.mechanisms") or []
                if not any(m.upper() in SASL_MECHANISMS for m in offered):
                    raise ConfigError(f"listener {spec.name}: sasl.enabled.mechanisms={','.join(offered)} has none "
                                      f"of {', '.join(SASL_MECHANISMS)}")
                if "OAUTHBEARER" in (m.upper() for m in offered):
                    self._check_oauthbearer(spec.name)
                if "GSSAPI" in (m.upper() for m in offered):
                    self._check_gssapi(spec.name)
        if self.listener_protocol(self.inter_broker_listener).startswith("SASL_"):
            mechanism = self["sasl.mechanism.inter.broker.protocol"].upper()
            if mechanism not in SASL_MECHANISMS:
                raise ConfigError(f"sasl.mechanism.inter.broker.protocol={mechanism}: logbus implements "
                                  f"{', '.join(SASL_MECHANISMS)}")
            offered = [m.upper() for m in self.listener_value(self.inter_broker_listener,
                                                              "sasl.enabled.mechanisms") or []]
            if mechanism not in offered:  # Kafka's own start-up check
                raise ConfigError(f"sasl.mechanism.inter.broker.protocol={mechanism} must be included in "
                                  f"sasl.enabled.mechanisms when SASL is used for inter-broker communication")

    def _check_gssapi(self, listener: str) -> None:
        """What Kafka checks when it builds a listener's GSSAPI server at start-up, and that the keytab gives
        the listener's principal (without reaching a KDC: accepting needs none)."""
        from broker.security import sasl

        try:
            sasl.gssapi_acceptor(self, listener)
        except (ValueError, OSError, ImportError) as exc:
            raise ConfigError(f"listener {listener}: GSSAPI: {exc}") from None

    def _check_oauthbearer(self, listener: str) -> None:
        """What Kafka checks when it builds a listener's OAUTHBEARER handlers at start-up."""
        from broker.security import sasl
        from settings import jaas

        handler = sasl.callback_handler(self, listener)
        if handler not in (None, OAUTHBEARER_VALIDATOR):
            raise ConfigError(f"listener {listener}: sasl.server.callback.handler.class={handler}: logbus "
                              f"implements Kafka's unsecured validator (unset) and {OAUTHBEARER_VALIDATOR}")
        url = self.mechanism_value(listener, "OAUTHBEARER", "sasl.oauthbearer.jwks.endpoint.url")
        if handler is not None and not url:
            raise ConfigError(f"listener {listener}: {OAUTHBEARER_VALIDATOR} needs "
                              "sasl.oauthbearer.jwks.endpoint.url")
        if url and not url.startswith(("http://", "https://", "file:")):
            raise ConfigError(f"sasl.oauthbearer.jwks.endpoint.url={url}: expected an http(s):// or file: URL")
        try:
            text = sasl.jaas_config(self, listener, "OAUTHBEARER")
            modules = jaas.parse(text) if text else []
        except jaas.JaasError as exc:
            raise ConfigError(f"listener {listener}: oauthbearer.sasl.jaas.config: {exc}") from None
        if handler is None and not any(m.name == sasl.OAUTHBEARER_MODULE for m in modules):
            raise ConfigError(f"listener {listener}: OAUTHBEARER needs listener.name.{listener.lower()}.oauthbearer."
                              f"sasl.jaas.config with {sasl.OAUTHBEARER_MODULE} (Kafka's unsecured validator reads its "
                              f"options; for signed tokens set listener.name.{listener.lower()}.oauthbearer."
                              f"sasl.server.callback.handler.class={OAUTHBEARER_VALIDATOR})")
        try:
            sasl.token_validator(self, listener)
        except ValueError as exc:
            raise ConfigError(f"listener {listener}: OAUTHBEARER: {exc}") from None
        if listener == self.inter_broker_listener and \
                self["sasl.mechanism.inter.broker.protocol"].upper() == "OAUTHBEARER":
            from broker.security import oidc_login
            try:
                login = oidc_login.tokens(self, listener)
            except ValueError as exc:
                raise ConfigError(f"listener {listener}: inter-broker OAUTHBEARER login: {exc}") from None
            if login is None and handler is not None:
                raise ConfigError(f"listener {listener}: brokers would authenticate to each other with Kafka's "
                                  "unsecured OAUTHBEARER login, which a JWKS-validated listener refuses: set "
                                  f"listener.name.{listener.lower()}.oauthbearer.sasl.login.callback.handler.class="
                                  f"{OAUTHBEARER_LOGIN_HANDLER} and sasl.oauthbearer.token.endpoint.url")
            if login is None:
                try:
                    sasl.client_exchange(self, listener, "OAUTHBEARER")
                except ConnectionError as exc:
                    raise ConfigError(str(exc)) from None

    def listener_protocol(self, name: str) -> str:
        """The security protocol of listener ``name`` (PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL)."""
        return self["listener.security.protocol.map"].get(name.upper(), name.upper())

    def listener_value(self, name: str, key: str):
        """``key`` as listener ``name`` sees it: ``listener.name.<name>.<key>`` if set, else ``key``."""
        scoped = f"listener.name.{name.lower()}.{key}"
        return self._values[scoped] if scoped in self._values else self._values.get(key)

    def mechanism_value(self, name: str, mechanism: str, key: str):
        """``key`` for SASL ``mechanism`` on listener ``name``: ``listener.name.<name>.<mechanism>.<key>``, else
        :meth:`listener_value` (Kafka's listener and mechanism prefixes)."""
        scoped = f"listener.name.{name.lower()}.{mechanism.lower()}.{key}"
        return self._values[scoped] if scoped in self._values else self.listener_value(name, key)

    @property
    def listener(self) -> tuple[str, int]:
        """(host, port) to bind of the inter-broker listener."""
        first = next(x for x in self.listeners if x.name == self.inter_broker_listener)
        return first.host, first.port
