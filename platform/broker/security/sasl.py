"""SASL exchanges of one connection (server side) and of this broker's own connections to other brokers
(client side): PLAIN, SCRAM-SHA-256/512, OAUTHBEARER and GSSAPI (:mod:`broker.security.kerberos`). SCRAM
credentials come from an async lookup (ZooKeeper or a file, see :mod:`broker.security.credentials`); PLAIN users
from the listener's JAAS config; OAUTHBEARER tokens are checked by Kafka's unsecured JWS validator or, with
``sasl.server.callback.handler.class`` set to Kafka's ``OAuthBearerValidatorCallbackHandler``, against a JWKS
(KIP-768; :mod:`broker.security.oauthbearer`).

Sessions (KIP-368): :func:`finish` records a completed authentication on the connection's session, with the
session's end: ``connections.max.reauth.ms`` and an OAUTHBEARER token's expiry, whichever comes first, as Kafka's
``SaslServerAuthenticator`` computes it. A re-authentication must keep the mechanism and the principal. No network
I/O here (a JWKS is fetched by :class:`~broker.security.oauthbearer.JwksKeys`, an OIDC token by
:mod:`broker.security.oidc_login`), except a GSSAPI :func:`client_exchange`, which asks the KDC for a ticket
(:mod:`broker.network.connect` calls it in a thread)."""

from __future__ import annotations

import logging
import os
import time
from typing import Awaitable, Callable

from broker.config import OAUTHBEARER_VALIDATOR, SASL_MECHANISMS as MECHANISMS  # noqa: F401  (re-exported)
from broker.security import kerberos, oauthbearer, scram
from settings import jaas

log = logging.getLogger(__name__)

OAUTHBEARER_MODULE = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"


class SaslFailure(Exception):
    """Authentication failed; the message is what the client is told."""


def jaas_config(config, listener: str, mechanism: str) -> str | None:
    """``listener.name.<listener>.<mechanism>.sasl.jaas.config``, else ``sasl.jaas.config``."""
    return config.listener_value(listener, f"{mechanism.lower()}.sasl.jaas.config") or \
        config.listener_value(listener, "sasl.jaas.config")


def enabled_mechanisms(config, listener: str) -> list[str]:
    offered = config.listener_value(listener, "sasl.enabled.mechanisms") or []
    return [m.upper() for m in offered if m.upper() in MECHANISMS]


class ServerExchange:
    """One SASL authentication on the server side. ``await respond(token)`` returns the reply token; raises
    :class:`SaslFailure`. Once :attr:`complete`, :attr:`principal` is ``User:<name>``."""

    def __init__(self, mechanism: str, plain_users: Callable[[], dict[str, str]],
                 scram_lookup: Callable[[str, str], Awaitable[scram.ScramCredential | None]],
                 validate_token: Callable[[str], Awaitable[oauthbearer.Token]] | None = None,
                 refused: str | None = None, reauthenticating: bool = False,
                 gssapi: Callable[[], "kerberos.Acceptor"] | None = None):
        self.mechanism = mechanism.upper()
        self._plain_users = plain_users
        self._lookup = scram_lookup
        self._validate_token = validate_token
        self.refused = refused  # a re-authentication with another mechanism: why it fails at the first token
        self._during = "re-authentication" if reauthenticating else "authentication"  # in Kafka's messages
        self._scram = scram.ScramServer(self.mechanism) if self.mechanism.startswith("SCRAM-") else None
        self._gssapi_acceptor = gssapi
        self._gssapi: kerberos.ServerContext | None = None
        self._step = 0
        self._oauth_error: bytes | None = None  # the error challenge sent; the client acknowledges it with 0x01
        self.complete = False
        self.principal: str | None = None
        self.credential_expiry_ms: int | None = None  # an OAUTHBEARER token's exp (ms since the epoch)

    async def respond(self, token: bytes) -> bytes:
        if self.refused is not None:
            raise SaslFailure(self.refused)
        if self.complete:
            raise SaslFailure("authentication already complete")
        if self.mechanism == "PLAIN":
            return self._plain(bytes(token))
        if self.mechanism == "OAUTHBEARER":
            return await self._oauthbearer(bytes(token))
        if self.mechanism == "GSSAPI":
            return self._gssapi_step(bytes(token))
        return await self._scram_step(bytes(token))

    def _gssapi_step(self, token: bytes) -> bytes:
        """Kafka's answer to a failed Kerberos exchange is its generic one; the reason goes to the log."""
        try:
            if self._gssapi is None:
                self._gssapi = self._gssapi_acceptor().exchange()
            reply = self._gssapi.step(token)
        except (kerberos.GssapiFailure, ValueError, OSError) as exc:
            log.info("GSSAPI authentication failed: %s", exc)
            raise SaslFailure(f"Authentication failed during {self._during} due to invalid credentials with SASL "
                              "mechanism GSSAPI") from None
        if self._gssapi.complete:
            self.complete, self.principal = True, self._gssapi.principal
            log.info("GSSAPI: %s authenticated as %s", self._gssapi.kerberos_name, self.principal)
        return reply

    async def _oauthbearer(self, token: bytes) -> bytes:
        """Kafka's OAuthBearerSaslServer: a refused token is answered with a JSON error challenge, which the
        client acknowledges with 0x01; then the authentication fails with that JSON as its message."""
        if token == b"\x01" and self._oauth_error is not None:
            raise SaslFailure(self._oauth_error.decode())
        self._oauth_error = None
        invalid = (f"Authentication failed during {self._during} due to invalid credentials with SASL mechanism "
                   "OAUTHBEARER")
        try:
            first = oauthbearer.parse_client_first(token)
        except oauthbearer.OAuthBearerError:
            raise SaslFailure(invalid) from None
        try:
            checked = await self._validate_token(first.token)
        except (oauthbearer.TokenInvalid, oauthbearer.JwksError) as exc:  # no key to check it with: invalid too,
            reason = getattr(exc, "reason", None) or str(exc)  # as Kafka's validator reports an unresolvable key
            log.info("OAUTHBEARER token refused: %s", reason)
            status, scope = getattr(exc, "status", "invalid_token"), getattr(exc, "scope", None)
            self._oauth_error = oauthbearer.error_challenge(status, scope)
            return self._oauth_error
        except Exception as exc:  # Kafka wraps its validator's other errors as invalid credentials
            log.warning("OAUTHBEARER token not checked: %s", exc)
            raise SaslFailure(invalid) from None
        if first.authzid and first.authzid != checked.principal:
            raise SaslFailure(f"Authentication failed: Client requested an authorization id ({first.authzid}) "
                              f"that is different from the token's principal name ({checked.principal})")
        self.complete, self.principal = True, f"User:{checked.principal}"
        self.credential_expiry_ms = checked.lifetime_ms
        return b""

    def _plain(self, token: bytes) -> bytes:
        parts = token.split(b"\0")
        if len(parts) != 3:
            raise SaslFailure("Authentication failed: invalid SASL/PLAIN request: expected 3 tokens")
        authzid, user, password = (p.decode("utf-8", "replace") for p in parts)
        if not user or not password:
            raise SaslFailure("Authentication failed: username or password not specified")
        if authzid and authzid != user:
            raise SaslFailure("Authentication failed: Client requested an authorization id that is different "
                              "from username")
        expected = self._plain_users().get(user)
        if expected is None or not _equal(expected, password):
            raise SaslFailure("Authentication failed: Invalid username or password")
        self.complete, self.principal = True, f"User:{user}"
        return b""

    async def _scram_step(self, token: bytes) -> bytes:
        failed = (f"Authentication failed during {self._during} due to invalid credentials with SASL mechanism "
                  f"{self.mechanism}")
        try:
            if self._step == 0:
                self._step = 1
                user = self._scram.client_first(token)
                credential = await self._lookup(user, self.mechanism)
                if credential is None:
                    raise SaslFailure(failed)
                return self._scram.server_first(credential)
            if self._step == 1:
                self._step = 2
                reply = self._scram.client_final(token)
                self.complete, self.principal = True, f"User:{self._scram.username}"
                return reply
        except (scram.ScramError, UnicodeDecodeError) as exc:
            raise SaslFailure(failed if "invalid credentials" in str(exc) else
                              f"Authentication failed: {exc}") from None
        raise SaslFailure("unexpected SASL token")


def session_lifetime_ms(max_reauth_ms: int, credential_expiry_ms: int | None, now_ms: int) -> int | None:
    """How long a session just authenticated lasts (ms), None: unbounded. Kafka's
    ``calcCompletionTimesAndReturnSessionLifetimeMs``: the smaller of ``connections.max.reauth.ms`` (when
    positive) and the credential's remaining lifetime, never negative."""
    if credential_expiry_ms is None and max_reauth_ms <= 0:
        return None
    if credential_expiry_ms is None:
        return max_reauth_ms
    left = max(0, credential_expiry_ms - now_ms)
    return left if max_reauth_ms <= 0 else min(left, max_reauth_ms)


def finish(session, config, exchange: ServerExchange) -> int:
    """Record ``exchange``'s completed authentication on ``session``; the session lifetime to tell the client
    (ms, 0: none). Raises :class:`SaslFailure` when a re-authentication would change the principal."""
    if session.reauthenticating_as is not None and exchange.principal != session.reauthenticating_as:
        before, after = (p.partition(":")[::2] for p in (session.reauthenticating_as, exchange.principal))
        raise SaslFailure(f"Cannot change principals during re-authentication from {before[0]}.{before[1]}: "
                          f"{after[0]}.{after[1]}")
    max_reauth = config.mechanism_value(session.listener, exchange.mechanism, "connections.max.reauth.ms") or 0
    lifetime = session_lifetime_ms(max_reauth, exchange.credential_expiry_ms, int(time.time() * 1000))
    session.authenticated, session.principal, session.mechanism = True, exchange.principal, exchange.mechanism
    session.reauthenticating_as = None
    session.expires = None if lifetime is None else time.monotonic() + lifetime / 1000
    return lifetime or 0


_validators: dict[tuple[int, str], tuple[object, Callable]] = {}  # (id(config), listener) -> (config, validate)


def token_validator(config, listener: str) -> Callable[[str], Awaitable[oauthbearer.Token]]:
    """The OAUTHBEARER token check of a listener (one per listener, so a JWKS is fetched once and kept)."""
    cached = _validators.get((id(config), listener))
    if cached is not None and cached[0] is config:
        return cached[1]
    if callback_handler(config, listener) == OAUTHBEARER_VALIDATOR:
        value = lambda key: config.mechanism_value(listener, "OAUTHBEARER", key)  # noqa: E731
        keys = oauthbearer.JwksKeys(value("sasl.oauthbearer.jwks.endpoint.url"),
                                    value("sasl.oauthbearer.jwks.endpoint.refresh.ms"))
        checker = oauthbearer.JwksValidator(
            keys, expected_audience=value("sasl.oauthbearer.expected.audience") or None,
            expected_issuer=value("sasl.oauthbearer.expected.issuer"),
            sub_claim=value("sasl.oauthbearer.sub.claim.name"), scope_claim=value("sasl.oauthbearer.scope.claim.name"),
            clock_skew_s=value("sasl.oauthbearer.clock.skew.seconds"))
        validate = checker.validate
    else:
        unsecured = oauthbearer.UnsecuredValidator(oauthbearer_options(config, listener))

        async def validate(token: str) -> oauthbearer.Token:
            return unsecured.validate(token)
    _validators[(id(config), listener)] = (config, validate)
    return validate


_acceptors: dict[tuple[int, str], tuple[object, "kerberos.Acceptor"]] = {}  # (id(config), listener) -> acceptor


def gssapi_acceptor(config, listener: str) -> "kerberos.Acceptor":
    """A listener's Kerberos identity (its JAAS Krb5LoginModule keytab and principal), made once. ValueError
    names what is missing; ImportError: the gssapi package is not installed."""
    cached = _acceptors.get((id(config), listener))
    if cached is not None and cached[0] is config:
        return cached[1]
    try:
        import gssapi  # noqa: F401
    except ImportError:
        raise ImportError("the gssapi package is not installed (pip install 'logbus[kerberos]', with Debian's "
                          "libkrb5-dev to build it)") from None
    value = lambda key: config.mechanism_value(listener, "GSSAPI", key)  # noqa: E731
    service = value("sasl.kerberos.service.name")
    if not service:
        raise ValueError("No serviceName defined in either JAAS or Kafka config (sasl.kerberos.service.name)")
    text = jaas_config(config, listener, "GSSAPI")
    modules = [m for m in jaas.parse(text) if m.name == kerberos.KRB5_MODULE] if text else []
    if not modules:
        raise ValueError(f"needs listener.name.{listener.lower()}.gssapi.sasl.jaas.config with "
                         f"{kerberos.KRB5_MODULE} (useKeyTab=true keyTab=... principal=...)")
    principal, keytab = kerberos.jaas_identity(dict(modules[0].options))
    if principal.split("/")[0].split("@")[0] != service:
        raise ValueError(f"the principal {principal} is not of the service sasl.kerberos.service.name={service}")
    if not os.access(keytab, os.R_OK):
        raise ValueError(f"keyTab {keytab} cannot be read")
    rules = kerberos.parse_rules(value("sasl.kerberos.principal.to.local.rules") or ["DEFAULT"])
    try:
        acceptor = kerberos.Acceptor(principal, keytab, rules)
    except gssapi.exceptions.GSSError as exc:
        raise ValueError(f"no credentials for {principal} in {keytab}: {exc}") from None
    _acceptors[(id(config), listener)] = (config, acceptor)
    return acceptor


def callback_handler(config, listener: str) -> str | None:
    """The OAUTHBEARER server callback handler class of a listener: as Kafka, only
    ``listener.name.<listener>.oauthbearer.sasl.server.callback.handler.class`` counts."""
    return config.listener_value(listener, "oauthbearer.sasl.server.callback.handler.class")


def oauthbearer_options(config, listener: str) -> dict[str, str]:
    """The options of the listener's OAuthBearerLoginModule (unsecured validator and login settings)."""
    text = jaas_config(config, listener, "OAUTHBEARER")
    for module in jaas.parse(text) if text else []:
        if module.name == OAUTHBEARER_MODULE:
            return dict(module.options)
    return {}


def _equal(a: str, b: str) -> bool:
    import hmac
    return hmac.compare_digest(a.encode(), b.encode())


def plain_users(config, listener: str) -> dict[str, str]:
    text = jaas_config(config, listener, "PLAIN")
    if not text:
        return {}
    users: dict[str, str] = {}
    for module in jaas.parse(text):
        if module.name == jaas.PLAIN_MODULE:
            users.update(module.users)
    return users


class ClientExchange:
    """This broker authenticating to another: :meth:`first` is the first token, ``respond(server token)`` the
    next one, None when done. Raises scram.ScramError on a bad server answer."""

    def __init__(self, mechanism: str, username: str, password: str, first: bytes | None = None):
        self.mechanism = mechanism.upper()
        if first is None and self.mechanism == "PLAIN":
            first = b"\0" + username.encode() + b"\0" + password.encode()
        self._single = first  # PLAIN's or OAUTHBEARER's one token
        self._scram = None if self._single is not None else scram.ScramClient(self.mechanism, username, password)
        self._step = 0

    def first(self) -> bytes:
        return self._single if self._single is not None else self._scram.first()

    def respond(self, token: bytes) -> bytes | None:
        if self._single is not None:
            if token:  # OAUTHBEARER's error challenge
                raise ConnectionError(f"{self.mechanism} token refused: {bytes(token).decode(errors='replace')}")
            return None
        self._step += 1
        if self._step == 1:
            return self._scram.final(bytes(token))
        self._scram.verify(bytes(token))
        return None


def client_exchange(config, listener: str, mechanism: str, token: str | None = None,
                    host: str = "localhost") -> "ClientExchange | kerberos.ClientContext":
    """``token``: OAUTHBEARER's access token from an OIDC login (:mod:`broker.security.oidc_login`); without one,
    Kafka's unsecured login makes a token from the listener's OAuthBearerLoginModule options. GSSAPI: a ticket for
    ``<sasl.kerberos.service.name>/<host>`` is asked from the KDC here (call it off the event loop)."""
    text = jaas_config(config, listener, mechanism)
    if not text:
        raise ConnectionError(f"no sasl.jaas.config for {mechanism} on listener {listener} "
                              f"(listener.name.{listener.lower()}.{mechanism.lower()}.sasl.jaas.config)")
    module = jaas.parse(text)[0]
    if mechanism.upper() == "GSSAPI":
        principal, keytab = kerberos.jaas_identity(dict(module.options))
        service = config.mechanism_value(listener, "GSSAPI", "sasl.kerberos.service.name")
        return kerberos.ClientContext(principal, keytab, service, host, f"MEMORY:logbus-broker-{id(config)}")
    if mechanism.upper() == "OAUTHBEARER":
        if token is None:
            try:
                token = oauthbearer.unsecured_login_token(dict(module.options))
            except ValueError as exc:
                raise ConnectionError(f"OAUTHBEARER login on listener {listener}: {exc}") from None
        return ClientExchange(mechanism, "", "", first=oauthbearer.client_first(token))
    username, password = module.options.get("username"), module.options.get("password")
    if username is None or password is None:
        raise ConnectionError(f"sasl.jaas.config of {mechanism} on listener {listener}: username and password "
                              "are needed for inter-broker authentication")
    return ClientExchange(mechanism, username, password)
