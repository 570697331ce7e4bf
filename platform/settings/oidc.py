"""OAuth access tokens for logbus's own Kafka clients (SASL/OAUTHBEARER, KIP-768's client side): the
client-credentials grant against an OpenID Connect token endpoint, as librdkafka's ``sasl.oauthbearer.method=oidc``
and Kafka's ``OAuthBearerLoginCallbackHandler`` do it. confluent-kafka clients do this themselves (librdkafka's
settings, :meth:`settings.security.ClientSecurity.librdkafka`); :class:`OidcTokens` serves the registry's aiokafka
client. A token is reused until 80% of its lifetime has passed (librdkafka's refresh point)."""

from __future__ import annotations

import asyncio
import base64
import json
import ssl
import threading
import time
import urllib.parse
import urllib.request


class OidcError(RuntimeError):
    pass


class OidcTokens:
    def __init__(self, token_url: str, client_id: str, client_secret: str, scope: str | None = None,
                 context: ssl.SSLContext | None = None, timeout: float = 10.0):
        self.token_url, self.client_id, self.client_secret, self.scope = token_url, client_id, client_secret, scope
        self.context, self.timeout = context, timeout
        self._token: str | None = None
        self._renew_at = 0.0
        self._lock = threading.Lock()

    def token(self) -> str:
        """A valid access token (fetched when none is held or 80% of its lifetime has passed). OidcError."""
        with self._lock:
            now = time.monotonic()
            if self._token is None or now >= self._renew_at:
                self._token, lifetime = self._fetch()
                self._renew_at = now + 0.8 * lifetime
            return self._token

    def _fetch(self) -> tuple[str, float]:
        form = {"grant_type": "client_credentials", **({"scope": self.scope} if self.scope else {})}
        credentials = base64.b64encode(f"{self.client_id}:{self.client_secret}".encode()).decode()
        request = urllib.request.Request(self.token_url, data=urllib.parse.urlencode(form).encode(), method="POST",
                                         headers={"Authorization": f"Basic {credentials}",
                                                  "Content-Type": "application/x-www-form-urlencoded",
                                                  "Accept": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=self.timeout, context=self.context) as answer:
                body = json.loads(answer.read(1 << 20))
        except (OSError, ValueError) as exc:  # urllib's HTTPError and URLError are OSErrors
            raise OidcError(f"no token from {self.token_url}: {exc}") from None
        token = body.get("access_token") if isinstance(body, dict) else None
        if not isinstance(token, str) or not token:
            raise OidcError(f"no access_token in the answer of {self.token_url}")
        lifetime = body.get("expires_in")
        return token, float(lifetime) if isinstance(lifetime, (int, float)) and lifetime > 0 else 3600.0

    def aiokafka_provider(self):
        """An ``aiokafka.abc.AbstractTokenProvider`` giving these tokens (fetched off the event loop)."""
        from aiokafka.abc import AbstractTokenProvider

        tokens = self

        class Provider(AbstractTokenProvider):
            async def token(self) -> str:
                return await asyncio.to_thread(tokens.token)

        return Provider()
