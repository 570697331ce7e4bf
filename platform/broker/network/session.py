"""One connection's security state, reachable from any handler through the context variable
:data:`current_session` (set by the listener for the task that serves the connection; ``None`` outside one)."""

from __future__ import annotations

import contextvars

ANONYMOUS = "User:ANONYMOUS"


class Session:
    """Who is on the other end of a connection: listener, principal, peer host, the SASL exchange's state."""

    def __init__(self, listener: str, protocol: str, principal: str = ANONYMOUS, host: str = ""):
        self.listener, self.protocol, self.principal, self.host = listener, protocol, principal, host
        self.authenticated = not protocol.startswith("SASL_")
        self.sasl = None  # the SASL exchange in progress (broker.security.sasl.ServerExchange)
        self.raw_tokens = False  # after SaslHandshake v0: the next frames are bare SASL tokens
        self.close_after_response = False  # a failed SASL step: answer, then close (as Kafka)
        # KIP-368: the mechanism authenticated with, when the session ends (time.monotonic(); None: never),
        # when the last re-authentication began, and during one the principal it must keep
        self.mechanism: str | None = None
        self.expires: float | None = None
        self.reauth_started: float | None = None
        self.reauthenticating_as: str | None = None
        self.muted_until = 0.0  # a throttled client's connection is read again from then (time.monotonic())

    def expired(self, now: float) -> bool:
        return self.expires is not None and now >= self.expires

    def may_reauthenticate(self, now: float) -> bool:
        """Kafka's ``KafkaChannel.maybeBeginServerReauthentication``: an authenticated session that ends, at
        least one second after the last re-authentication began."""
        return (self.authenticated and self.expires is not None
                and (self.reauth_started is None or now - self.reauth_started >= 1.0))


current_session: contextvars.ContextVar[Session | None] = contextvars.ContextVar("logbus_session", default=None)
