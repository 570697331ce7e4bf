"""SASL exchanges of one connection (server side) and of this broker's own connections to other brokers
(client side): PLAIN and SCRAM-SHA-256/512. SCRAM credentials come from an async lookup (ZooKeeper or a file,
see :mod:`broker.security.credentials`); PLAIN users from the listener's JAAS config. No network I/O."""

from __future__ import annotations

from typing import Awaitable, Callable

from broker.security import scram
from settings import jaas

MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")


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
                 scram_lookup: Callable[[str, str], Awaitable[scram.ScramCredential | None]]):
        self.mechanism = mechanism.upper()
        self._plain_users = plain_users
        self._lookup = scram_lookup
        self._scram = scram.ScramServer(self.mechanism) if self.mechanism.startswith("SCRAM-") else None
        self._step = 0
        self.complete = False
        self.principal: str | None = None

    async def respond(self, token: bytes) -> bytes:
        if self.complete:
            raise SaslFailure("authentication already complete")
        if self.mechanism == "PLAIN":
            return self._plain(bytes(token))
        return await self._scram_step(bytes(token))

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
        failed = (f"Authentication failed during authentication due to invalid credentials with SASL mechanism "
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

    def __init__(self, mechanism: str, username: str, password: str):
        self.mechanism = mechanism.upper()
        self._plain = (b"\0" + username.encode() + b"\0" + password.encode()) if self.mechanism == "PLAIN" else None
        self._scram = None if self._plain is not None else scram.ScramClient(self.mechanism, username, password)
        self._step = 0

    def first(self) -> bytes:
        return self._plain if self._plain is not None else self._scram.first()

    def respond(self, token: bytes) -> bytes | None:
        if self._plain is not None:
            return None
        self._step += 1
        if self._step == 1:
            return self._scram.final(bytes(token))
        self._scram.verify(bytes(token))
        return None


def client_exchange(config, listener: str, mechanism: str) -> ClientExchange:
    text = jaas_config(config, listener, mechanism)
    if not text:
        raise ConnectionError(f"no sasl.jaas.config for {mechanism} on listener {listener} "
                              f"(listener.name.{listener.lower()}.{mechanism.lower()}.sasl.jaas.config)")
    module = jaas.parse(text)[0]
    username, password = module.options.get("username"), module.options.get("password")
    if username is None or password is None:
        raise ConnectionError(f"sasl.jaas.config of {mechanism} on listener {listener}: username and password "
                              "are needed for inter-broker authentication")
    return ClientExchange(mechanism, username, password)
