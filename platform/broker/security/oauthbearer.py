"""SASL/OAUTHBEARER (KIP-255, RFC 7628) on the broker side, as Apache Kafka does it: the client's initial response
(Kafka's ``OAuthBearerClientInitialResponse``) and ``OAuthBearerSaslServer``'s JSON error challenge; unsecured JWS
tokens (``OAuthBearerUnsecuredValidatorCallbackHandler`` and ``OAuthBearerUnsecuredLoginCallbackHandler``); signed
JWTs checked against a JWKS (KIP-768: ``OAuthBearerValidatorCallbackHandler``, i.e. ``BrokerJwtValidator`` over
jose4j), with ``cryptography``. A refused token raises :class:`TokenInvalid`: its ``status`` and ``scope`` go into
:func:`error_challenge`, its ``reason`` to logs only. The only I/O is :class:`JwksKeys`' fetch of a JWKS."""

from __future__ import annotations

import asyncio
import base64
import json
import math
import re
import time
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from typing import Any, Callable

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa
from cryptography.hazmat.primitives.asymmetric.utils import encode_dss_signature


class OAuthBearerError(Exception):
    """A malformed client message; the text is fit to send to the client."""


class TokenInvalid(Exception):
    """A refused token: ``status`` ("invalid_token" or "insufficient_scope") and ``scope`` for the client's error
    challenge, ``reason`` for logs."""

    def __init__(self, status: str = "invalid_token", scope: str | None = None, reason: str = ""):
        super().__init__(reason or status)
        self.status, self.scope, self.reason = status, scope, reason


class JwksError(Exception):
    """No JWKS is loaded: the first fetch failed (or failed again less than 10 s ago)."""


@dataclass(frozen=True)
class Token:
    value: str
    principal: str
    scope: frozenset[str]
    lifetime_ms: int  # exp, ms since the epoch
    start_ms: int | None  # iat, ms since the epoch
    claims: dict = field(hash=False)  # the claims as parsed from the JWT's JSON


@dataclass(frozen=True)
class ClientFirst:
    authzid: str
    token: str
    extensions: dict[str, str]


def _bad(reason: str) -> TokenInvalid:
    return TokenInvalid("invalid_token", None, reason)


_JAVA_WS = "".join(map(chr, range(33)))  # what Java's String.trim() strips


def _jtrim(s: str) -> str:
    return s.strip(_JAVA_WS)


def _is_num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _b64url(s: Any) -> bytes:
    """Strict base64url, its padding optional; ValueError."""
    body = s.rstrip("=") if isinstance(s, str) else "?"
    if not re.fullmatch(r"[A-Za-z0-9_-]*", body) or len(body) % 4 == 1 or len(s) - len(body) > 2:
        raise ValueError("malformed Base64 URL encoded value")
    return base64.urlsafe_b64decode(body + "=" * (-len(body) % 4))


def _finite(v: Any) -> bool:
    try:
        return _is_num(v) and math.isfinite(float(v))
    except OverflowError:
        return False


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _json(data: bytes) -> Any:
    """Strict JSON (no NaN or Infinity); ValueError."""
    return json.loads(data.decode("utf-8"), parse_constant=_no_constant)


# ---- the client's initial response (RFC 7628 section 3.1, Kafka's OAuthBearerClientInitialResponse)

_SEP = "\x01"
_INVALID_FIRST = "Invalid OAUTHBEARER client first message"
_SASLNAME = r"(?:[\x01-\x2B\x2D-\x3C\x3E-\x7F]|=2C|=3D)+"  # [\x01-\x7F] but "," and "=", which are =2C and =3D
_KEY, _VALUE = re.compile(r"[A-Za-z]+"), re.compile(r"[\x21-\x7E \t\r\n]+")
_CLIENT_FIRST = re.compile(
    rf"n,(?:a=(?P<authzid>{_SASLNAME}))?,\x01(?P<kvpairs>(?:{_KEY.pattern}={_VALUE.pattern}\x01)*)\x01")
_AUTH = re.compile(r"(?P<scheme>[A-Za-z0-9_]+) +(?P<token>[-_.A-Za-z0-9]+)")


def parse_client_first(message: bytes) -> ClientFirst:
    """``n,[a=<authzid>],^Aauth=Bearer <token>^A[key=value^A...]^A``; OAuthBearerError with Kafka's messages.
    The authzid's =2C and =3D are decoded; ``auth`` is not an extension; a repeated key: the last one."""
    try:
        matched = _CLIENT_FIRST.fullmatch(bytes(message).decode("ascii"))
    except UnicodeDecodeError:
        matched = None
    if matched is None:
        raise OAuthBearerError(_INVALID_FIRST)
    properties = dict(pair.split("=", 1) for pair in matched["kvpairs"].split(_SEP)[:-1])
    auth = properties.pop("auth", None)
    if auth is None:
        raise OAuthBearerError(f"{_INVALID_FIRST}: 'auth' not specified")
    parts = _AUTH.fullmatch(auth)
    if parts is None:
        raise OAuthBearerError(f"{_INVALID_FIRST}: invalid 'auth' format")
    if parts["scheme"].lower() != "bearer":
        raise OAuthBearerError(f"Invalid scheme in OAUTHBEARER client first message: {parts['scheme']}")
    authzid = re.sub("=2C|=3D", lambda m: "," if m[0] == "=2C" else "=", matched["authzid"] or "")
    return ClientFirst(authzid, parts["token"], properties)


def client_first(token: str, authzid: str = "", extensions: dict[str, str] | None = None) -> bytes:
    """The client's initial response, as OAuthBearerClientInitialResponse.toBytes (the authzid escaped);
    ValueError with Kafka's messages for bad extensions."""
    extensions = dict(extensions or {})
    for name, value in extensions.items():
        if name == "auth" or not _KEY.fullmatch(name):
            raise ValueError(f"Extension name {name} is invalid")
        if not _VALUE.fullmatch(value):
            raise ValueError(f"Extension value ({value}) for extension {name} is invalid")
    escaped = authzid.replace("=", "=3D").replace(",", "=2C")
    if not re.fullmatch(r"[-_.A-Za-z0-9]+", token) or authzid and not re.fullmatch(_SASLNAME, escaped):
        raise ValueError("a token is made of [-_.a-zA-Z0-9], an authorization id of ASCII")
    pairs = "".join(f"{_SEP}{name}={value}" for name, value in extensions.items())
    return f"n,{'a=' + escaped if authzid else ''},{_SEP}auth=Bearer {token}{pairs}{_SEP}{_SEP}".encode("ascii")


def error_challenge(status: str, scope: str | None = None, openid_configuration: str | None = None) -> bytes:
    """OAuthBearerSaslServer.jsonErrorResponse to the byte (no JSON escaping, as Kafka)."""
    text = f'{{"status":"{status}"'
    if scope is not None:
        text += f', "scope":"{scope}"'
    if openid_configuration is not None:
        text += f', "openid-configuration":"{openid_configuration}"'
    return (text + "}").encode("utf-8")


# ---- unsecured JWS (Kafka's OAuthBearerUnsecuredJws and OAuthBearerUnsecuredValidatorCallbackHandler)

def _as_text(v: Any) -> str:
    """Jackson's JsonNode.asText."""
    if isinstance(v, bool) or v is None:
        return json.dumps(v)
    return "" if isinstance(v, (dict, list)) else v if isinstance(v, str) else str(v)


def _round_ms(seconds: int | float) -> int:
    """Java's Math.round(seconds * 1000), for a finite number."""
    return math.floor(min(max(float(seconds) * 1000.0, -9.2e18), 9.2e18) + 0.5)


def _parse_unsecured(token: str, principal_claim: str, scope_claim: str) -> tuple[Token, dict[str, Any]]:
    """OAuthBearerUnsecuredJws' constructor: the token, and its claims as Kafka sees them (numbers, lists of
    text, and text for everything else)."""
    if ".." in token:
        raise _bad("Malformed compact serialization contains '..'")
    splits = token.split(".")
    if len(splits) != 3:
        raise _bad("Unsecured JWS compact serializations must have 3 dot-separated Base64URL-encoded values")
    try:
        raw_header, raw_claims = (_json(_b64url(part)) for part in splits[:2])
    except ValueError as exc:
        raise _bad("malformed Base64 URL encoded value" if "Base64" in str(exc) else "malformed JSON") from None
    header, claims = ({k: [_as_text(e) for e in v] if isinstance(v, list) else v if _is_num(v) else _as_text(v)
                       for k, v in obj.items()} if isinstance(obj, dict) else {} for obj in (raw_header, raw_claims))
    if header.get("alg") != "none":
        raise _bad("Unsecured JWS must have 'none' for an algorithm")
    if splits[2]:
        raise _bad("Unsecured JWS must not contain a digital signature")

    def claim(name: str, kind: str) -> Any:
        value = claims.get(name)
        found = "List" if isinstance(value, list) else "Number" if _is_num(value) else "String"
        if value is not None and (found != kind or kind == "Number" and not _finite(value)):
            raise _bad(f"The '{name}' claim was not of type {kind}: {found}")
        return value

    if isinstance(claims.get(scope_claim), str):  # one scope item: Kafka does not split a string scope claim
        scope = frozenset([_jtrim(claims[scope_claim])]) - {""}
    else:
        scope = frozenset(_jtrim(s) for s in claim(scope_claim, "List") or ()) - {""}
    exp = claim("exp", "Number")
    if exp is None:
        raise _bad("No expiration time in JWT")
    principal = claim(principal_claim, "String")
    if principal is None or not _jtrim(principal):
        raise _bad(f"No principal name in JWT claim: {principal_claim}")
    iat = claim("iat", "Number")
    start = None if iat is None else _round_ms(iat)
    raw = raw_claims if isinstance(raw_claims, dict) else {}
    return Token(token, principal, scope, _round_ms(exp), start, raw), claims


def _claim_name(value: str | None, default: str) -> str:
    return _jtrim(value or "") or default


class UnsecuredValidator:
    """Kafka's OAuthBearerUnsecuredValidatorCallbackHandler, configured with the login module's options;
    ValueError for a bad option."""

    def __init__(self, options: dict[str, str]):
        options = {k: str(v) for k, v in (options or {}).items()}
        self.principal_claim = _claim_name(options.get("unsecuredValidatorPrincipalClaimName"), "sub")
        self.scope_claim = _claim_name(options.get("unsecuredValidatorScopeClaimName"), "scope")
        # OAuthBearerScopeUtils.parseScope: separated by spaces (a comma is a scope character, as in Kafka)
        self.required_scope = [s for s in _jtrim(options.get("unsecuredValidatorRequiredScope", "")).split(" ") if s]
        for item in self.required_scope:
            if not re.fullmatch(r"[\x21\x23-\x5B\x5D-\x7E]+", item):
                raise ValueError(f"Invalid scope value: {item}")
        skew = options.get("unsecuredValidatorAllowableClockSkewMs")
        text = _jtrim(skew or "")
        if text and (not re.fullmatch(r"[+-]?[0-9]+", text) or not -2 ** 31 <= int(text) < 2 ** 31):
            raise ValueError(f"unsecuredValidatorAllowableClockSkewMs is not an integer: {skew!r}")
        self.clock_skew_ms = int(text or 0)
        if self.clock_skew_ms < 0:
            raise ValueError(f"Allowable clock skew millis must not be negative: {skew}")

    def validate(self, token: str, now_ms: int | None = None) -> Token:
        now = time.time_ns() // 1_000_000 if now_ms is None else now_ms
        skew = self.clock_skew_ms
        checked, claims = _parse_unsecured(token, self.principal_claim, self.scope_claim)
        exp, iat = float(claims["exp"]), None if claims.get("iat") is None else float(claims["iat"])
        if iat is not None and 1000 * iat > now + skew:
            raise _bad(f"The Issued At value ({iat:f} seconds) was after the indicated time ({now} ms) plus "
                       f"allowable clock skew ({skew} ms)")
        if now - skew >= 1000 * exp:
            raise _bad(f"The indicated time ({now} ms) minus allowable clock skew ({skew} ms) was on or after the "
                       f"Expiration Time value ({exp:f} seconds)")
        if iat is not None and exp <= iat:
            raise _bad(f"The Expiration Time time ({exp:f} seconds) was not after the Issued At time ({iat:f} seconds)")
        missing = [item for item in self.required_scope if item not in checked.scope]
        if missing:
            required = "[" + ", ".join(self.required_scope) + "]"  # Java's List.toString
            raise TokenInvalid("insufficient_scope", required, f"The provided scope ({sorted(checked.scope)}) was "
                               f"missing a required scope ({missing[0]}).  All required scope elements: {required}")
        return checked


def _java_double(text: str) -> float:
    """Java's Double.valueOf, for decimal text."""
    body = _jtrim(text)
    if not re.fullmatch(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?[fFdD]?", body) or \
            not math.isfinite(float(body.rstrip("fFdD"))):
        raise ValueError(f'For input string: "{text}"')
    return float(body.rstrip("fFdD"))


def _list_claim(text: str) -> list[str]:
    """Kafka's listJsonText: the first character delimits; Java's split drops trailing empty items, and one empty
    item is added if any item was empty."""
    if len(text) <= 1:
        return []
    delimiter, body = text[0], text[1:]
    items = body.split(delimiter)
    while items and not items[-1]:
        items.pop()
    if not items:
        raise ValueError(f"Illegal JSON array for the list claim {text!r}")
    return items + [""] if body.startswith(delimiter) or body.endswith(delimiter) or delimiter * 2 in body else items


def unsecured_login_token(options: dict[str, str], now_ms: int | None = None) -> str:
    """Kafka's OAuthBearerUnsecuredLoginCallbackHandler: an unsecured JWS (header {"alg":"none"}) with exp, iat and
    the claims of the ``unsecuredLogin{String,Number,List}Claim_<name>`` options; ValueError."""
    options = {k: str(v) for k, v in (options or {}).items()}
    if not options:
        raise ValueError("no unsecuredLogin options: this login cannot make a token")
    if all(name.startswith("unsecuredLoginExtension_") for name in options):
        raise ValueError("Extensions provided in login context without a token")
    lifetime = options.get("unsecuredLoginLifetimeSeconds", "3600")
    if not re.fullmatch(r"[+-]?[0-9]+", lifetime) or not -2 ** 63 <= int(lifetime) < 2 ** 63:
        raise ValueError(f'For input string: "{lifetime}"')
    now = (time.time_ns() // 1_000_000 if now_ms is None else now_ms) / 1000.0
    claims: dict[str, Any] = {"exp": now + int(lifetime), "iat": now}
    kinds: dict[str, Callable[[str], Any]] = {"String": str, "Number": _java_double, "List": _list_claim}
    for name, value in options.items():
        matched = re.fullmatch(r"unsecuredLogin(String|Number|List)Claim_(.+)", name, re.DOTALL)
        if matched and matched[2] in ("iat", "exp"):
            raise ValueError(f"Cannot explicitly set the '{matched[2]}' claim")
        if matched:
            claims[matched[2]] = kinds[matched[1]](value)
    token = ".".join(base64.urlsafe_b64encode(json.dumps(obj, separators=(",", ":")).encode()).rstrip(b"=").decode()
                     for obj in ({"alg": "none"}, claims)) + "."
    try:  # as Kafka: the token must have a principal (and well-typed claims)
        _parse_unsecured(token, _claim_name(options.get("unsecuredLoginPrincipalClaimName"), "sub"),
                         _claim_name(options.get("unsecuredLoginScopeClaimName"), "scope"))
    except TokenInvalid as exc:
        raise ValueError(exc.reason) from None
    return token


# ---- signed JWTs checked against a JWKS (KIP-768)

_CURVES = {"P-256": (ec.SECP256R1, 32), "P-384": (ec.SECP384R1, 48), "P-521": (ec.SECP521R1, 66)}
_HASHES = {"256": hashes.SHA256, "384": hashes.SHA384, "512": hashes.SHA512}
_ALGS: dict[str, tuple[str, type[hashes.HashAlgorithm], str | None]] = {  # alg: (kty, hash, EC curve)
    **{f"{p}{n}": ("RSA", h, None) for p in ("RS", "PS") for n, h in _HASHES.items()},
    **{f"ES{n}": ("EC", h, c) for (n, h), c in zip(_HASHES.items(), _CURVES)}}
_RETRY_S = 10.0  # fetches of a JWKS are at least this far apart
_MAX_KID_LENGTH = 1000  # as RefreshingHttpsJwks: a longer kid does not cause a fetch
_MAX_JWKS_BYTES = 1 << 20


def _parse_jwk(jwk: Any) -> tuple[str | None, str, str | None, str | None, Any] | None:
    """(kid, kty, alg, crv, public key), or None for a key jose4j's selector would never pick or cannot read."""
    if not isinstance(jwk, dict) or jwk.get("use", "sig") != "sig" or not isinstance(jwk.get("kid", ""), str):
        return None
    ops, alg = jwk.get("key_ops"), jwk.get("alg") if isinstance(jwk.get("alg"), str) else None
    if ops is not None and (not isinstance(ops, list) or "verify" not in ops):
        return None
    number = lambda name: int.from_bytes(_b64url(jwk[name]), "big")  # noqa: E731
    try:
        if jwk.get("kty") == "RSA":
            return jwk.get("kid"), "RSA", alg, None, rsa.RSAPublicNumbers(number("e"), number("n")).public_key()
        if jwk.get("kty") == "EC" and jwk.get("crv") in _CURVES:
            curve = _CURVES[jwk["crv"]][0]()
            key = ec.EllipticCurvePublicNumbers(number("x"), number("y"), curve).public_key()
            return jwk.get("kid"), "EC", alg, jwk["crv"], key
    except (KeyError, ValueError, TypeError):
        pass
    return None


def _parse_jwks(doc: Any) -> list[tuple]:
    if not isinstance(doc, dict) or not isinstance(doc.get("keys"), list):
        raise JwksError("The JSON JWKS content does not include the keys member.")
    return [k for k in map(_parse_jwk, doc["keys"]) if k is not None]


def _select(keys: list[tuple], kid: str | None, alg: str) -> Any:
    """jose4j's VerificationJwkSelector: the header's kid (if any) and the key type; while more than one key is
    left, the key's alg (or none) and an EC key's curve; then the first key left."""
    kty, _, crv = _ALGS[alg]
    found = [k for k in keys if k[1] == kty and (kid is None or k[0] == kid)]
    if len(found) > 1:
        found = [k for k in found if k[2] in (None, alg)]
    if len(found) > 1 and kty == "EC":
        found = [k for k in found if k[3] == crv]
    return found[0][4] if found else None


def _http_get(url: str) -> bytes:
    with urllib.request.urlopen(urllib.request.Request(url, headers={"Accept": "application/json"}),
                                timeout=10) as response:
        data = response.read(_MAX_JWKS_BYTES + 1)
    if len(data) > _MAX_JWKS_BYTES:
        raise ValueError(f"JWKS larger than {_MAX_JWKS_BYTES} bytes")
    return data


class JwksKeys:
    """The public keys of a JWKS (RSA; EC on P-256, P-384, P-521; keys whose use is not sig skipped): loaded on
    first use, reloaded when older than ``refresh_ms`` or for an unknown kid; fetches at least 10 s apart, a failed
    reload keeps the keys. ``clock``: monotonic seconds (tests)."""

    def __init__(self, url: str, refresh_ms: int = 3_600_000, *, clock: Callable[[], float] = time.monotonic):
        if urllib.parse.urlsplit(url or "").scheme.lower() not in ("file", "http", "https"):
            raise ValueError(f"the JWKS URL must be file://, http:// or https://: {url!r}")
        if refresh_ms <= 0:
            raise ValueError(f"the JWKS refresh interval must be positive: {refresh_ms}")
        self.url: str | None = url
        self.refresh_ms, self._clock = refresh_ms, clock
        self._keys: list[tuple] | None = None
        self._loaded_at = self._tried_at = -math.inf
        self._lock = asyncio.Lock()
        self.last_error: str | None = None  # of the last fetch, for logs

    @staticmethod
    def from_document(doc: dict) -> JwksKeys:
        """A fixed set of keys, never fetched."""
        keys = JwksKeys("file:///dev/null")
        keys.url, keys._keys = None, _parse_jwks(doc)
        return keys

    async def key(self, kid: str | None, alg: str) -> Any:
        """The public key for a JWS header's kid and alg, or None; JwksError when no JWKS could be loaded."""
        if alg not in _ALGS:
            return None
        if self.url is not None and (self._keys is None or self._clock() - self._loaded_at >= self.refresh_ms / 1e3):
            await self._fetch()
        if self._keys is None:
            raise JwksError(f"no JWKS loaded from {self.url}: {self.last_error}")
        found = _select(self._keys, kid, alg)
        if found is None and self.url is not None and kid is not None and len(kid) <= _MAX_KID_LENGTH:
            await self._fetch()
            found = _select(self._keys, kid, alg)
        return found

    async def _fetch(self) -> None:
        """Fetch, unless a fetch was tried less than 10 s ago (by this task or one it waited for)."""
        async with self._lock:
            if self._clock() - self._tried_at < _RETRY_S:
                return
            now = self._tried_at = self._clock()
            try:
                parts = urllib.parse.urlsplit(self.url)
                if parts.scheme.lower() == "file":
                    with open(urllib.request.url2pathname(parts.path), "rb") as f:
                        data = f.read(_MAX_JWKS_BYTES)
                else:
                    data = await asyncio.to_thread(_http_get, self.url)
                keys = _parse_jwks(_json(data))
            except (OSError, ValueError, JwksError) as exc:
                self.last_error = f"{type(exc).__name__}: {exc}"
                if self._keys is None:
                    raise JwksError(f"could not load the JWKS from {self.url}: {self.last_error}") from exc
                return
            self._keys, self._loaded_at, self.last_error = keys, now, None


def _verify(alg: str, key: Any, signed: bytes, signature: bytes) -> None:
    kty, hash_type, crv = _ALGS[alg]
    try:
        if kty == "RSA":
            if not isinstance(key, rsa.RSAPublicKey):
                raise _bad(f"{alg} needs an RSA key")
            if key.key_size < 2048:  # jose4j's rule
                raise _bad("An RSA key of size 2048 bits or larger MUST be used with the all JOSE RSA algorithms "
                           f"(given key was only {key.key_size} bits).")
            pad = padding.PKCS1v15() if alg.startswith("RS") else \
                padding.PSS(mgf=padding.MGF1(hash_type()), salt_length=hash_type.digest_size)
            key.verify(signature, signed, pad, hash_type())
        else:
            curve, size = _CURVES[crv]
            if not isinstance(key, ec.EllipticCurvePublicKey) or key.curve.name != curve.name:
                raise _bad(f"{alg} needs an EC key on {crv}")
            if len(signature) != 2 * size:  # R and S, each of the curve's size
                raise _bad("JWS signature is invalid")
            r, s = int.from_bytes(signature[:size], "big"), int.from_bytes(signature[size:], "big")
            key.verify(encode_dss_signature(r, s), signed, ec.ECDSA(hash_type()))
    except InvalidSignature:
        raise _bad("JWS signature is invalid") from None


def _checked_string(name: str, value: str | None) -> str:
    """ClaimValidationUtils.validateString: non-null, non-empty, not only whitespace; trimmed."""
    if value is None or not value:
        raise _bad(f"{name} value must be {'non-null' if value is None else 'non-empty'}")
    if not _jtrim(value):
        raise _bad(f"{name} value must not contain only whitespace")
    return _jtrim(value)


class JwksValidator:
    """Kafka's OAuthBearerValidatorCallbackHandler: signed JWTs whose key is in a JWKS. As Kafka (jose4j): exp and
    iat required (``require_iat``); a token with an aud claim is refused when no audience is expected; time in
    whole seconds."""

    def __init__(self, keys: JwksKeys, expected_audience: list[str] | None = None,
                 expected_issuer: str | None = None, sub_claim: str = "sub", scope_claim: str = "scope",
                 clock_skew_s: int = 30, *, require_iat: bool = True):
        if not _jtrim(sub_claim or "") or not _jtrim(scope_claim or ""):
            raise ValueError("the sub and scope claim names must not be blank")
        self.keys, self.expected_issuer, self.require_iat = keys, expected_issuer, require_iat
        self.expected_audience = frozenset(expected_audience or ())
        self.sub_claim, self.scope_claim, self.clock_skew_s = _jtrim(sub_claim), _jtrim(scope_claim), clock_skew_s

    async def validate(self, token: str, now_ms: int | None = None) -> Token:
        """Raises TokenInvalid (status invalid_token), or JwksError when no JWKS could be loaded."""
        now = (time.time_ns() // 1_000_000 if now_ms is None else now_ms) // 1000  # jose4j's NumericDate
        parts = _jtrim(token or "").split(".")
        if len(parts) != 3 or not all(map(_jtrim, parts)):
            raise _bad("Malformed JWT provided; expected three sections (header, payload, and signature)")
        try:
            header, signature = _json(_b64url(parts[0])), _b64url(parts[2])
        except ValueError as exc:
            raise _bad(f"Could not parse the JWS: {exc}") from None
        alg = header.get("alg") if isinstance(header, dict) else None
        if not isinstance(alg, str) or alg not in _ALGS:
            raise _bad(f"JWS algorithm {alg!r} is not allowed (RS*, PS* or ES* only)")
        if "crit" in header or not isinstance(header.get("kid", ""), str):
            raise _bad("Unrecognized critical header parameter, or a kid that is not a string")
        key = await self.keys.key(header.get("kid"), alg)
        if key is None:
            raise _bad(f"Unable to find a suitable verification key for JWS w/ header {json.dumps(header)}")
        _verify(alg, key, f"{parts[0]}.{parts[1]}".encode("ascii"), signature)
        try:
            claims = _json(_b64url(parts[1]))
        except ValueError as exc:
            raise _bad(f"Could not parse the JWT claims: {exc}") from None
        if not isinstance(claims, dict):
            raise _bad("The JWT claims are not a JSON object")
        return self._check_claims(token, claims, now)

    def _check_claims(self, token: str, claims: dict, now: int) -> Token:
        for name in ("iss", "sub", "jti", "exp", "iat", "nbf"):  # jose4j reads these: a wrong type is malformed
            value = claims.get(name)
            if value is not None and not (isinstance(value, str) if name in ("iss", "sub", "jti") else _finite(value)):
                raise _bad(f"The value of the '{name}' claim is not the expected type ({value!r})")
        exp, iat, nbf = (None if claims.get(n) is None else int(claims[n]) for n in ("exp", "iat", "nbf"))
        aud, skew = claims.get("aud"), self.clock_skew_s
        audiences = [aud] if isinstance(aud, str) else aud
        if aud is not None and (not isinstance(audiences, list) or not all(isinstance(a, str) for a in audiences)):
            raise _bad(f"The value of the 'aud' claim is not the expected type ({aud!r})")
        if aud is None and self.expected_audience:
            raise _bad("No Audience (aud) claim present.")
        if aud is not None and not self.expected_audience.intersection(audiences):
            raise _bad(f"Audience (aud) claim {audiences} " + ("doesn't contain an acceptable identifier." if
                       self.expected_audience else "present in the JWT but no expected audience value(s) were "
                       "provided to the JWT Consumer.") + f" Expected one of {sorted(self.expected_audience)}.")
        if self.expected_issuer is not None and claims.get("iss") != self.expected_issuer:
            raise _bad(f"Issuer (iss) claim value ({claims.get('iss')}) doesn't match expected value of "
                       f"{self.expected_issuer}")
        if exp is None or iat is None and self.require_iat:
            raise _bad(f"No {'Expiration Time (exp)' if exp is None else 'Issued At (iat)'} claim present.")
        if now - skew >= exp:
            raise _bad(f"The JWT is no longer valid - the evaluation time {now} is on or after the Expiration Time "
                       f"(exp={exp}) claim value (clock skew {skew} s).")
        if iat is not None and exp < iat or nbf is not None and exp < nbf:
            raise _bad(f"The Expiration Time (exp={exp}) claim value cannot be before the Issued At (iat={iat}) or "
                       f"Not Before (nbf={nbf}) claim value.")
        if nbf is not None and now + skew < nbf:
            raise _bad(f"The JWT is not yet valid as the evaluation time {now} is before the Not Before (nbf={nbf}) "
                       f"claim time (clock skew {skew} s).")
        sub = claims.get(self.sub_claim)
        if sub is not None and not isinstance(sub, str):
            raise _bad(f"Could not extract the '{self.sub_claim}' claim from the access token")
        raw_scope = claims.get(self.scope_claim)  # a string is one scope item, as in Kafka
        items = [raw_scope] if isinstance(raw_scope, str) else raw_scope if isinstance(raw_scope, list) else []
        scope: set[str] = set()
        for item in items:
            item = _checked_string(self.scope_claim, item if isinstance(item, str) else None)
            if item in scope:
                raise _bad(f"{self.scope_claim} value must not contain duplicates - {item} already present")
            scope.add(item)
        return Token(token, _checked_string(self.sub_claim, sub), frozenset(scope), exp * 1000,
                     None if iat is None else iat * 1000, claims)
