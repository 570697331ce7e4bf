"""Connections from this broker to another one on the inter-broker listener (replica fetcher, transaction
markers): TLS when that listener's protocol is SSL or SASL_SSL, then SASL authentication when it is
SASL_PLAINTEXT or SASL_SSL, with this broker's own credentials (``sasl.mechanism.inter.broker.protocol`` and
``listener.name.<listener>.<mechanism>.sasl.jaas.config``; for OAUTHBEARER, Kafka's unsecured login or an OIDC
client-credentials login, :mod:`broker.security.oidc_login`; for GSSAPI, the listener's keytab and a ticket for
``<sasl.kerberos.service.name>/<host>``).

A session with a lifetime (KIP-368: the other broker's ``connections.max.reauth.ms``, or a token's expiry) is
renewed by reconnecting: :func:`renewal_due` turns true at a random point between 85% and 95% of the lifetime,
as Kafka's clients time their re-authentication, and the caller then closes the connection between requests."""

from __future__ import annotations

import asyncio
import random
import struct
import time
import weakref

from broker.protocol import codec
from broker.security import tls

_contexts: dict[int, tuple[object, object]] = {}  # id(config) -> (config, its client context)
_renew_at: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # writer -> time.monotonic() to renew


def renewal_due(writer: asyncio.StreamWriter) -> bool:
    """Whether the session of a connection opened by :func:`open_broker_connection` should be renewed now."""
    at = _renew_at.get(writer)
    return at is not None and time.monotonic() >= at


def _client_context(config, listener: str):
    cached = _contexts.get(id(config))
    if cached is None or cached[0] is not config:
        cached = _contexts[id(config)] = (config, tls.client_context(lambda key: config.listener_value(listener, key)))
    return cached[1]


async def open_broker_connection(config, host: str, port: int, client_id: str, limit: int = 1 << 20):
    """(reader, writer) of an authenticated connection to a broker's inter-broker listener. Raises OSError,
    ConnectionError (authentication refused) or TimeoutError."""
    listener = config.inter_broker_listener
    protocol = config.listener_protocol(listener) if hasattr(config, "listener_protocol") else "PLAINTEXT"
    context = _client_context(config, listener) if protocol in ("SSL", "SASL_SSL") else None
    reader, writer = await asyncio.open_connection(host, port, limit=limit, ssl=context,
                                                   server_hostname=host if context is not None else None)
    if protocol.startswith("SASL_"):
        try:
            lifetime_ms = await _authenticate(config, listener, reader, writer, client_id, host)
        except BaseException:
            writer.transport.abort()
            raise
        if lifetime_ms > 0:
            _renew_at[writer] = time.monotonic() + lifetime_ms / 1000 * random.uniform(0.85, 0.95)
    return reader, writer


async def _call(reader, writer, api_key: int, version: int, correlation: int, client_id: str, body):
    writer.write(codec.encode_request(api_key, version, correlation, client_id, body))
    await writer.drain()
    size = struct.unpack(">i", await reader.readexactly(4))[0]
    got, response = codec.decode_response(api_key, version, await reader.readexactly(size))
    if got != correlation:
        raise ConnectionError("correlation id mismatch")
    return response


async def _oidc_token(config, listener: str, mechanism: str) -> str | None:
    """This broker's access token from its OIDC login, off the event loop (None: no OIDC login configured)."""
    from broker.security import oidc_login
    from settings.oidc import OidcError

    if mechanism != "OAUTHBEARER":
        return None
    try:
        tokens = oidc_login.tokens(config, listener)
        return await asyncio.to_thread(tokens.token) if tokens is not None else None
    except (OidcError, ValueError) as exc:
        raise ConnectionError(f"OAUTHBEARER login on listener {listener}: {exc}") from None


async def _authenticate(config, listener: str, reader, writer, client_id: str, host: str) -> int:
    """SASL on a new connection; the session lifetime the broker gave (ms, 0: none)."""
    from broker.protocol.codec import request_type
    from broker.security.sasl import client_exchange

    mechanism = config["sasl.mechanism.inter.broker.protocol"].upper()
    token = await _oidc_token(config, listener, mechanism)
    if mechanism == "GSSAPI":  # the first token needs a service ticket from the KDC: off the event loop
        exchange = await asyncio.to_thread(client_exchange, config, listener, mechanism, None, host)
    else:
        exchange = client_exchange(config, listener, mechanism, token)
    handshake = await _call(reader, writer, 17, 1, 1, client_id, request_type(17, 1)(mechanism=mechanism))
    if int(handshake.error_code) != 0:
        raise ConnectionError(f"SaslHandshake {mechanism}: error {int(handshake.error_code)} "
                              f"(the broker offers {', '.join(handshake.mechanisms)})")
    token, correlation = exchange.first(), 2
    while True:
        response = await _call(reader, writer, 36, 1, correlation, client_id, request_type(36, 1)(auth_bytes=token))
        if int(response.error_code) != 0:
            raise ConnectionError(f"SASL {mechanism} authentication failed: {response.error_message}")
        token = exchange.respond(response.auth_bytes)
        if token is None:
            return round(response.session_lifetime.total_seconds() * 1000)
        correlation += 1
