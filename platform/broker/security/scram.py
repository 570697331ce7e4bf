"""SCRAM (RFC 5802, RFC 7677) as Kafka uses it: SCRAM-SHA-256 and SCRAM-SHA-512, server and client sides, and
credentials in Kafka's stored form (``salt=...,stored_key=...,server_key=...,iterations=...``). No I/O."""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
from dataclasses import dataclass

HASHES = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
MIN_ITERATIONS = 4096  # Kafka's minimum (and its default)
MAX_ITERATIONS = 16384


class ScramError(ValueError):
    """The exchange failed: bad message, unknown user or wrong proof."""


@dataclass(frozen=True)
class ScramCredential:
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    def encode(self) -> str:
        """Kafka's form, as kept in ZooKeeper under /config/users/<user>."""
        b64 = lambda b: base64.b64encode(b).decode()  # noqa: E731
        return (f"salt={b64(self.salt)},stored_key={b64(self.stored_key)},server_key={b64(self.server_key)},"
                f"iterations={self.iterations}")

    @classmethod
    def decode(cls, text: str) -> "ScramCredential":
        fields = dict(part.split("=", 1) for part in text.split(",") if "=" in part)
        try:
            return cls(base64.b64decode(fields["salt"]), base64.b64decode(fields["stored_key"]),
                       base64.b64decode(fields["server_key"]), int(fields["iterations"]))
        except (KeyError, ValueError) as exc:
            raise ScramError(f"malformed SCRAM credential: {exc}") from None


def _h(mechanism: str) -> str:
    try:
        return HASHES[mechanism.upper()]
    except KeyError:
        raise ScramError(f"unknown SCRAM mechanism {mechanism}") from None


def salted_password(mechanism: str, password: str, salt: bytes, iterations: int) -> bytes:
    return hashlib.pbkdf2_hmac(_h(mechanism), password.encode(), salt, iterations)


def _hmac(mechanism: str, key: bytes, data: bytes) -> bytes:
    return hmac.new(key, data, _h(mechanism)).digest()


def make_credential(mechanism: str, password: str, iterations: int = MIN_ITERATIONS,
                    salt: bytes | None = None) -> ScramCredential:
    if not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
        raise ScramError(f"iterations must be within {MIN_ITERATIONS}..{MAX_ITERATIONS}")
    salt = salt if salt is not None else os.urandom(32)
    salted = salted_password(mechanism, password, salt, iterations)
    client_key = _hmac(mechanism, salted, b"Client Key")
    return ScramCredential(salt, hashlib.new(_h(mechanism), client_key).digest(),
                           _hmac(mechanism, salted, b"Server Key"), iterations)


def _attrs(message: str) -> dict[str, str]:
    out = {}
    for part in message.split(","):
        if len(part) < 2 or part[1] != "=":
            raise ScramError(f"malformed SCRAM message {message!r}")
        out.setdefault(part[0], part[2:])
    return out


def decode_saslname(name: str) -> str:
    if "=" in name.replace("=2C", "").replace("=3D", ""):
        raise ScramError("malformed user name")
    return name.replace("=2C", ",").replace("=3D", "=")


def encode_saslname(name: str) -> str:
    return name.replace("=", "=3D").replace(",", "=2C")


def _nonce() -> str:
    return base64.b64encode(os.urandom(24)).decode().replace(",", "-")


class ScramServer:
    """Server side: :meth:`client_first` parses the first message (the user to look up), :meth:`server_first`
    answers it with that user's credential, :meth:`client_final` checks the proof and returns the last message."""

    def __init__(self, mechanism: str, nonce: str | None = None):
        self.mechanism = mechanism.upper()
        _h(self.mechanism)
        self._server_nonce = nonce or _nonce()
        self.username: str | None = None
        self._gs2 = self._client_first_bare = self._server_first = ""
        self._credential: ScramCredential | None = None

    def client_first(self, message: bytes) -> str:
        text = message.decode("utf-8", "strict") if isinstance(message, (bytes, bytearray)) else message
        parts = text.split(",", 2)
        if len(parts) != 3 or parts[0] not in ("n", "y") or (parts[1] and not parts[1].startswith("a=")):
            raise ScramError("malformed client-first message (channel binding is not supported)")
        self._gs2 = parts[0] + "," + parts[1] + ","
        self._client_first_bare = parts[2]
        attrs = _attrs(parts[2])
        if "n" not in attrs or "r" not in attrs or not attrs["r"]:
            raise ScramError("client-first message without user name or nonce")
        self.username = decode_saslname(attrs["n"])
        self._client_nonce = attrs["r"]
        return self.username

    def server_first(self, credential: ScramCredential) -> bytes:
        self._credential = credential
        self._server_first = (f"r={self._client_nonce}{self._server_nonce},"
                              f"s={base64.b64encode(credential.salt).decode()},i={credential.iterations}")
        return self._server_first.encode()

    def client_final(self, message: bytes) -> bytes:
        text = message.decode("utf-8", "strict") if isinstance(message, (bytes, bytearray)) else message
        without_proof, sep, proof = text.rpartition(",p=")
        if not sep:
            raise ScramError("client-final message without proof")
        attrs = _attrs(without_proof)
        if attrs.get("r") != self._client_nonce + self._server_nonce:
            raise ScramError("Invalid client nonce in the final client message.")  # Kafka 4.x: exact match
        if attrs.get("c") != base64.b64encode(self._gs2.encode()).decode():
            raise ScramError("channel binding mismatch")
        auth_message = f"{self._client_first_bare},{self._server_first},{without_proof}".encode()
        signature = _hmac(self.mechanism, self._credential.stored_key, auth_message)
        try:
            client_proof = base64.b64decode(proof, validate=True)
        except ValueError:
            raise ScramError("malformed proof") from None
        if len(client_proof) != len(signature):
            raise ScramError("invalid credentials")
        client_key = bytes(a ^ b for a, b in zip(client_proof, signature))
        if not hmac.compare_digest(hashlib.new(_h(self.mechanism), client_key).digest(), self._credential.stored_key):
            raise ScramError("invalid credentials")
        server_signature = _hmac(self.mechanism, self._credential.server_key, auth_message)
        return b"v=" + base64.b64encode(server_signature)


class ScramClient:
    """Client side (a broker authenticating to another one)."""

    def __init__(self, mechanism: str, username: str, password: str, nonce: str | None = None):
        self.mechanism = mechanism.upper()
        _h(self.mechanism)
        self.username, self.password = username, password
        self._nonce = nonce or _nonce()
        self._client_first_bare = f"n={encode_saslname(username)},r={self._nonce}"
        self._server_signature = b""

    def first(self) -> bytes:
        return b"n,," + self._client_first_bare.encode()

    def final(self, server_first: bytes) -> bytes:
        text = server_first.decode()
        attrs = _attrs(text)
        if "e" in attrs:
            raise ScramError(f"server error: {attrs['e']}")
        nonce, salt, iterations = attrs.get("r", ""), base64.b64decode(attrs.get("s", "")), int(attrs.get("i", 0))
        if not nonce.startswith(self._nonce) or iterations < 1:
            raise ScramError("bad server-first message")
        salted = salted_password(self.mechanism, self.password, salt, iterations)
        client_key = _hmac(self.mechanism, salted, b"Client Key")
        stored_key = hashlib.new(_h(self.mechanism), client_key).digest()
        without_proof = f"c=biws,r={nonce}"
        auth_message = f"{self._client_first_bare},{text},{without_proof}".encode()
        signature = _hmac(self.mechanism, stored_key, auth_message)
        proof = bytes(a ^ b for a, b in zip(client_key, signature))
        self._server_signature = _hmac(self.mechanism, _hmac(self.mechanism, salted, b"Server Key"), auth_message)
        return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()

    def verify(self, server_final: bytes) -> None:
        attrs = _attrs(server_final.decode())
        if "e" in attrs:
            raise ScramError(f"server error: {attrs['e']}")
        if not hmac.compare_digest(base64.b64decode(attrs.get("v", "")), self._server_signature):
            raise ScramError("the server's signature does not match")


def credential_from_salted(mechanism: str, salted: bytes, salt: bytes, iterations: int) -> ScramCredential:
    """The stored form from a salted password (what AlterUserScramCredentials sends)."""
    client_key = _hmac(mechanism, salted, b"Client Key")
    return ScramCredential(salt, hashlib.new(_h(mechanism), client_key).digest(),
                           _hmac(mechanism, salted, b"Server Key"), iterations)
