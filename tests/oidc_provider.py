"""A small OpenID Connect token endpoint and JWKS for tests (KIP-768): client-credentials grants answered with
RS256 JWTs signed by a key made here, with ``cryptography``, independently of the broker's code. Serves
``/token`` (HTTP Basic client id and secret) and ``/jwks`` on 127.0.0.1, in a thread; ``stop()`` closes it."""

from __future__ import annotations

import base64
import json
import math
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import padding, rsa


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


class SigningKey:
    def __init__(self, kid: str):
        self.kid = kid
        self.key = rsa.generate_private_key(public_exponent=65537, key_size=2048)

    def jwk(self) -> dict:
        numbers = self.key.public_key().public_numbers()
        as_bytes = lambda n: n.to_bytes((n.bit_length() + 7) // 8, "big")  # noqa: E731
        return {"kty": "RSA", "kid": self.kid, "use": "sig", "alg": "RS256", "n": _b64(as_bytes(numbers.n)),
                "e": _b64(as_bytes(numbers.e))}

    def sign(self, claims: dict) -> str:
        head = _b64(json.dumps({"alg": "RS256", "typ": "JWT", "kid": self.kid}).encode())
        body = _b64(json.dumps(claims).encode())
        signature = self.key.sign(f"{head}.{body}".encode(), padding.PKCS1v15(), hashes.SHA256())
        return f"{head}.{body}.{_b64(signature)}"


class OidcProvider:
    def __init__(self, clients: dict[str, str], audience: str = "logbus", lifetime_s: int = 3600,
                 scope: str = "logbus", lifetimes: dict[str, int] | None = None):
        self.clients, self.audience, self.lifetime_s, self.scope = clients, audience, lifetime_s, scope
        self.lifetimes = lifetimes or {}  # a client's own token lifetime (s)
        self.key = SigningKey("key-1")
        self.issued = 0
        provider = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _send(self, code: int, body: dict):
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                if self.path == "/jwks":
                    self._send(200, {"keys": [provider.key.jwk()]})
                else:
                    self._send(404, {"error": "not_found"})

            def do_POST(self):
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                auth = self.headers.get("Authorization", "")
                try:
                    client_id, _, secret = base64.b64decode(auth.split(" ", 1)[1]).decode().partition(":")
                except (IndexError, ValueError):
                    client_id, secret = "", None
                if self.path != "/token" or provider.clients.get(client_id) != secret:
                    self._send(401, {"error": "invalid_client"})
                    return
                provider.issued += 1
                lifetime = provider.lifetimes.get(client_id, provider.lifetime_s)
                self._send(200, {"access_token": provider.token(client_id, lifetime_s=lifetime),
                                 "token_type": "Bearer", "expires_in": lifetime})

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.issuer = f"http://127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._thread.start()

    @property
    def token_url(self) -> str:
        return f"{self.issuer}/token"

    @property
    def jwks_url(self) -> str:
        return f"{self.issuer}/jwks"

    def token(self, subject: str, key: SigningKey | None = None, lifetime_s: int | None = None, **claims) -> str:
        now = time.time()  # whole seconds in the token (jose4j's NumericDate): iat down, exp up, so a token lives
        # at least its lifetime from now
        body = {"sub": subject, "iss": self.issuer, "aud": self.audience, "iat": int(now),
                "exp": math.ceil(now) + (lifetime_s or self.lifetime_s), "scope": self.scope, **claims}
        return (key or self.key).sign(body)

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
