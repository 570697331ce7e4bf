"""broker.security.oauthbearer: the OAUTHBEARER client first message, Kafka's error challenge, unsecured JWS tokens
(validator and login) and signed JWTs checked against a JWKS (KIP-768), with keys made here by ``cryptography``."""

import asyncio
import base64
import hashlib
import hmac
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from broker.security import oauthbearer
from broker.security.oauthbearer import (JwksError, JwksKeys, JwksValidator, OAuthBearerError, TokenInvalid,
                                         UnsecuredValidator)
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature

pytestmark = [pytest.mark.unit, pytest.mark.timeout(30)]

NOW_MS = 1_700_000_000_000
NOW_S = NOW_MS // 1000
INVALID_FIRST = "Invalid OAUTHBEARER client first message"


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def enc(obj) -> str:
    return b64(json.dumps(obj).encode())


def unsecured(claims: dict, header: dict | None = None, signature: str = "") -> str:
    return f"{enc(header if header is not None else {'alg': 'none'})}.{enc(claims)}.{signature}"


def refused(call, status: str = "invalid_token") -> TokenInvalid:
    with pytest.raises(TokenInvalid) as info:
        result = call()
        if asyncio.iscoroutine(result):
            asyncio.run(result)
    assert info.value.status == status
    return info.value


# ---- the client first message

def test_parse_without_authzid_or_extensions():
    first = oauthbearer.parse_client_first(b"n,,\x01auth=Bearer abc.DEF-_.\x01\x01")
    assert (first.authzid, first.token, first.extensions) == ("", "abc.DEF-_.", {})


def test_parse_authzid_and_extensions():
    first = oauthbearer.parse_client_first(b"n,a=alice,\x01auth=Bearer tok\x01traceId=123\x01note=a=b c\x01\x01")
    assert first.authzid == "alice" and first.token == "tok"
    assert first.extensions == {"traceId": "123", "note": "a=b c"}  # "auth" is not an extension


def test_parse_repeated_key_keeps_the_last():
    first = oauthbearer.parse_client_first(b"n,,\x01x=1\x01auth=Bearer t\x01x=2\x01\x01")
    assert first.extensions == {"x": "2"}


def test_parse_decodes_the_escaped_authzid():
    assert oauthbearer.parse_client_first(b"n,a=a=2Cb=3Dc=3D2C,\x01auth=Bearer t\x01\x01").authzid == "a,b=c=2C"
    for bad in (b"n,a=a,b,\x01auth=Bearer t\x01\x01", b"n,a=a=b,\x01auth=Bearer t\x01\x01",
                b"n,a=a=2c,\x01auth=Bearer t\x01\x01", b"n,a=,\x01auth=Bearer t\x01\x01"):
        with pytest.raises(OAuthBearerError, match=f"^{INVALID_FIRST}$"):
            oauthbearer.parse_client_first(bad)


def test_parse_scheme_is_bearer_in_any_case():
    assert oauthbearer.parse_client_first(b"n,,\x01auth=bEaReR   tok\x01\x01").token == "tok"
    with pytest.raises(OAuthBearerError, match="^Invalid scheme in OAUTHBEARER client first message: Basic$"):
        oauthbearer.parse_client_first(b"n,,\x01auth=Basic tok\x01\x01")


def test_parse_needs_auth():
    with pytest.raises(OAuthBearerError, match=f"^{INVALID_FIRST}: 'auth' not specified$"):
        oauthbearer.parse_client_first(b"n,,\x01token=Bearer tok\x01\x01")
    with pytest.raises(OAuthBearerError, match=f"^{INVALID_FIRST}: 'auth' not specified$"):
        oauthbearer.parse_client_first(b"n,a=bob,\x01\x01")


@pytest.mark.parametrize("auth", [b"Bearer", b"Bearer ", b"Bearer a+b", b"Bearer a b", b"Be-arer tok"])
def test_parse_refuses_a_malformed_auth(auth):
    with pytest.raises(OAuthBearerError, match=f"^{INVALID_FIRST}: invalid 'auth' format$"):
        oauthbearer.parse_client_first(b"n,,\x01auth=" + auth + b"\x01\x01")


@pytest.mark.parametrize("message", [
    b"", b"garbage", b"n,,", b"y,,\x01auth=Bearer t\x01\x01", b"p=x,,\x01auth=Bearer t\x01\x01",
    b"n,,\x01auth=Bearer t\x01", b"n,,auth=Bearer t\x01\x01", b"n,,\x01auth=Bearer t\x01\x01\x01",
    b"n,,\x01k1=v\x01auth=Bearer t\x01\x01", b"n,,\x01k=\x01auth=Bearer t\x01\x01",
    b"n,,\x01k=v\x00\x01auth=Bearer t\x01\x01", "n,a=\u00e9,\x01auth=Bearer t\x01\x01".encode(),
    b"n,,\x01auth=Bearer t\xff\x01\x01"])
def test_parse_refuses_garbage(message):
    with pytest.raises(OAuthBearerError, match=f"^{INVALID_FIRST}$"):
        oauthbearer.parse_client_first(message)


def test_client_first_bytes_and_round_trip():
    assert oauthbearer.client_first("tok") == b"n,,\x01auth=Bearer tok\x01\x01"
    message = oauthbearer.client_first("a.b.", "x,y=z", {"traceId": "1 2"})
    assert message == b"n,a=x=2Cy=3Dz,\x01auth=Bearer a.b.\x01traceId=1 2\x01\x01"
    first = oauthbearer.parse_client_first(message)
    assert (first.authzid, first.token, first.extensions) == ("x,y=z", "a.b.", {"traceId": "1 2"})


@pytest.mark.parametrize("extensions,message", [({"auth": "x"}, "Extension name auth is invalid"),
                                                ({"k1": "x"}, "Extension name k1 is invalid"),
                                                ({"k": "a\x01b"}, "Extension value")])
def test_client_first_refuses_bad_extensions(extensions, message):
    with pytest.raises(ValueError, match=message):
        oauthbearer.client_first("tok", extensions=extensions)


def test_error_challenge_is_kafkas_text():
    assert oauthbearer.error_challenge("invalid_token") == b'{"status":"invalid_token"}'
    assert oauthbearer.error_challenge("insufficient_scope", "[a, b]") == \
        b'{"status":"insufficient_scope", "scope":"[a, b]"}'
    assert oauthbearer.error_challenge("invalid_token", None, "https://idp/.well-known") == \
        b'{"status":"invalid_token", "openid-configuration":"https://idp/.well-known"}'


# ---- unsecured JWS

def good_claims(**changes) -> dict:
    claims = {"sub": "alice", "iat": NOW_S - 10, "exp": NOW_S + 300, "scope": ["read", "write"]}
    claims.update(changes)
    return {k: v for k, v in claims.items() if v is not None}


def test_unsecured_good_token():
    token = unsecured(good_claims(extra={"a": 1}))
    checked = UnsecuredValidator({}).validate(token, now_ms=NOW_MS)
    assert checked.value == token and checked.principal == "alice"
    assert checked.scope == frozenset({"read", "write"})
    assert checked.lifetime_ms == (NOW_S + 300) * 1000 and checked.start_ms == (NOW_S - 10) * 1000
    assert checked.claims["extra"] == {"a": 1}


def test_unsecured_fractional_seconds_round_to_ms():
    checked = UnsecuredValidator({}).validate(unsecured(good_claims(exp=NOW_S + 1.2346, iat=None)), now_ms=NOW_MS)
    assert checked.lifetime_ms == (NOW_S + 1) * 1000 + 235 and checked.start_ms is None


def test_unsecured_base64url_alphabet():  # "-" and "_" (KAFKA-17089: URL-safe decoding)
    token = unsecured(good_claims(data=">>>???~~~"))
    assert "-" in token or "_" in token
    assert UnsecuredValidator({}).validate(token, now_ms=NOW_MS).principal == "alice"


def test_unsecured_expired():
    validator = UnsecuredValidator({})
    assert "Expiration Time" in refused(lambda: validator.validate(unsecured(good_claims(exp=NOW_S)),
                                                                   now_ms=NOW_MS)).reason
    assert validator.validate(unsecured(good_claims(exp=NOW_S + 0.001)), now_ms=NOW_MS).principal == "alice"


def test_unsecured_issued_in_the_future():
    validator = UnsecuredValidator({})
    assert "Issued At" in refused(lambda: validator.validate(unsecured(good_claims(iat=NOW_S + 0.001)),
                                                             now_ms=NOW_MS)).reason
    assert validator.validate(unsecured(good_claims(iat=NOW_S)), now_ms=NOW_MS).start_ms == NOW_MS


def test_unsecured_clock_skew():
    lenient = UnsecuredValidator({"unsecuredValidatorAllowableClockSkewMs": " 5000 "})
    assert lenient.clock_skew_ms == 5000
    lenient.validate(unsecured(good_claims(exp=NOW_S - 4, iat=NOW_S - 10)), now_ms=NOW_MS)
    lenient.validate(unsecured(good_claims(iat=NOW_S + 4)), now_ms=NOW_MS)
    refused(lambda: lenient.validate(unsecured(good_claims(exp=NOW_S - 5, iat=NOW_S - 10)), now_ms=NOW_MS))
    refused(lambda: lenient.validate(unsecured(good_claims(iat=NOW_S + 6)), now_ms=NOW_MS))
    refused(lambda: UnsecuredValidator({}).validate(unsecured(good_claims(iat=NOW_S + 4)), now_ms=NOW_MS))


@pytest.mark.parametrize("skew", ["abc", "1.5", "99999999999", "-1"])
def test_unsecured_bad_clock_skew_option(skew):
    with pytest.raises(ValueError, match="unsecuredValidatorAllowableClockSkewMs|clock skew"):
        UnsecuredValidator({"unsecuredValidatorAllowableClockSkewMs": skew})


def test_unsecured_exp_must_follow_iat():
    lenient = UnsecuredValidator({"unsecuredValidatorAllowableClockSkewMs": "100000"})
    reason = refused(lambda: lenient.validate(unsecured(good_claims(iat=NOW_S + 50, exp=NOW_S + 50)),
                                              now_ms=NOW_MS)).reason
    assert "was not after the Issued At time" in reason
    lenient.validate(unsecured(good_claims(iat=NOW_S + 50, exp=NOW_S + 50.001)), now_ms=NOW_MS)


@pytest.mark.parametrize("changes,reason", [
    ({"exp": None}, "No expiration time in JWT"),
    ({"exp": "soon"}, "The 'exp' claim was not of type Number: String"),
    ({"iat": "then"}, "The 'iat' claim was not of type Number: String"),
    ({"sub": None}, "No principal name in JWT claim: sub"),
    ({"sub": ""}, "No principal name in JWT claim: sub"),
    ({"sub": "  "}, "No principal name in JWT claim: sub"),
    ({"sub": 7}, "The 'sub' claim was not of type String: Number"),
    ({"scope": 7}, "The 'scope' claim was not of type List: Number")])
def test_unsecured_bad_claims(changes, reason):
    assert refused(lambda: UnsecuredValidator({}).validate(unsecured(good_claims(**changes)), now_ms=NOW_MS)) \
        .reason == reason


@pytest.mark.parametrize("header", [{"alg": "HS256"}, {"alg": "RS256"}, {}, {"alg": None}, {"typ": "JWT"}])
def test_unsecured_alg_must_be_none(header):
    refused(lambda: UnsecuredValidator({}).validate(unsecured(good_claims(), header), now_ms=NOW_MS))


def test_unsecured_signature_must_be_empty():
    reason = refused(lambda: UnsecuredValidator({}).validate(unsecured(good_claims(), signature="c2ln"),
                                                             now_ms=NOW_MS)).reason
    assert reason == "Unsecured JWS must not contain a digital signature"


@pytest.mark.parametrize("token", [
    "e30.e30", "e30.e30..", "e30..", "a.b.c.d", "e30.!!!.", "e30.e30x.", f"{b64(b'not json')}.e30.",
    f"{enc({'alg': 'none'})}.{b64(b'[1')}.", enc({"alg": "none"}) + "." + b64(b'{"exp": NaN, "sub": "a"}') + "."])
def test_unsecured_malformed(token):
    refused(lambda: UnsecuredValidator({}).validate(token, now_ms=NOW_MS))


def test_unsecured_required_scope():
    validator = UnsecuredValidator({"unsecuredValidatorRequiredScope": " read  write "})
    assert validator.required_scope == ["read", "write"]
    assert validator.validate(unsecured(good_claims(scope=["write", "read", "x"])), now_ms=NOW_MS).principal == "alice"
    exc = refused(lambda: validator.validate(unsecured(good_claims(scope=["read"])), now_ms=NOW_MS),
                  "insufficient_scope")
    assert exc.scope == "[read, write]" and "(write)" in exc.reason
    assert oauthbearer.error_challenge(exc.status, exc.scope) == \
        b'{"status":"insufficient_scope", "scope":"[read, write]"}'
    refused(lambda: validator.validate(unsecured(good_claims(scope=None)), now_ms=NOW_MS), "insufficient_scope")


def test_unsecured_string_scope_claim_is_one_item():  # as Kafka: a string scope claim is not split
    one = UnsecuredValidator({"unsecuredValidatorRequiredScope": "read"})
    assert one.validate(unsecured(good_claims(scope=" read ")), now_ms=NOW_MS).scope == {"read"}
    checked = UnsecuredValidator({}).validate(unsecured(good_claims(scope="read write")), now_ms=NOW_MS)
    assert checked.scope == {"read write"}
    refused(lambda: one.validate(unsecured(good_claims(scope="read write")), now_ms=NOW_MS), "insufficient_scope")


def test_unsecured_list_scope_items_are_text():  # Jackson's asText for each item; blank items dropped
    checked = UnsecuredValidator({}).validate(unsecured(good_claims(scope=["a", 1, " ", True, " b "])), now_ms=NOW_MS)
    assert checked.scope == {"a", "1", "true", "b"}


def test_unsecured_required_scope_is_space_separated():
    assert UnsecuredValidator({"unsecuredValidatorRequiredScope": "a,b c"}).required_scope == ["a,b", "c"]
    with pytest.raises(ValueError, match="Invalid scope value"):
        UnsecuredValidator({"unsecuredValidatorRequiredScope": 'a "b"'})


def test_unsecured_custom_claim_names():
    validator = UnsecuredValidator({"unsecuredValidatorPrincipalClaimName": " user ",
                                    "unsecuredValidatorScopeClaimName": "roles"})
    checked = validator.validate(unsecured(good_claims(sub=None, user="bob", roles=["admin"])), now_ms=NOW_MS)
    assert checked.principal == "bob" and checked.scope == {"admin"}
    assert refused(lambda: validator.validate(unsecured(good_claims()), now_ms=NOW_MS)).reason == \
        "No principal name in JWT claim: user"


# ---- the unsecured login

LOGIN = {"unsecuredLoginStringClaim_sub": "broker-1", "unsecuredLoginListClaim_scope": "|kafka|admin",
         "unsecuredLoginNumberClaim_level": "7", "unsecuredLoginLifetimeSeconds": "60",
         "unsecuredLoginExtension_traceId": "42"}


def test_unsecured_login_token_round_trip():
    token = oauthbearer.unsecured_login_token(LOGIN, now_ms=NOW_MS)
    header = json.loads(base64.urlsafe_b64decode(token.split(".")[0] + "=="))
    assert header == {"alg": "none"} and token.endswith(".")
    checked = UnsecuredValidator({"unsecuredValidatorRequiredScope": "kafka"}).validate(token, now_ms=NOW_MS)
    assert checked.principal == "broker-1" and checked.scope == {"kafka", "admin"}
    assert checked.lifetime_ms == NOW_MS + 60_000 and checked.start_ms == NOW_MS
    assert checked.claims["level"] == 7.0 and "traceId" not in checked.claims
    refused(lambda: UnsecuredValidator({}).validate(token, now_ms=NOW_MS + 60_000))
    first = oauthbearer.parse_client_first(oauthbearer.client_first(token))
    assert first.token == token


def test_unsecured_login_default_lifetime_and_custom_principal():
    options = {"unsecuredLoginStringClaim_user": "bob", "unsecuredLoginPrincipalClaimName": "user"}
    token = oauthbearer.unsecured_login_token(options, now_ms=NOW_MS)
    checked = UnsecuredValidator({"unsecuredValidatorPrincipalClaimName": "user"}).validate(token, now_ms=NOW_MS)
    assert checked.principal == "bob" and checked.lifetime_ms == NOW_MS + 3_600_000
    refused(lambda: UnsecuredValidator({}).validate(token, now_ms=NOW_MS))  # no sub


def test_unsecured_login_list_claims_as_kafka_splits_them():
    options = {"unsecuredLoginStringClaim_sub": "b", "unsecuredLoginListClaim_a": ",x,,y",
               "unsecuredLoginListClaim_b": "|", "unsecuredLoginListClaim_c": ";x;"}
    token = oauthbearer.unsecured_login_token(options, now_ms=NOW_MS)
    claims = UnsecuredValidator({}).validate(token, now_ms=NOW_MS).claims
    assert claims["a"] == ["x", "", "y", ""] and claims["b"] == [] and claims["c"] == ["x", ""]


@pytest.mark.parametrize("options,message", [
    ({}, "no unsecuredLogin options"),
    ({"unsecuredLoginExtension_x": "1"}, "Extensions provided in login context without a token"),
    ({"unsecuredLoginStringClaim_user": "bob"}, "No principal name in JWT claim: sub"),
    ({"unsecuredLoginStringClaim_sub": "b", "unsecuredLoginNumberClaim_exp": "1"}, "Cannot explicitly set the 'exp'"),
    ({"unsecuredLoginStringClaim_sub": "b", "unsecuredLoginLifetimeSeconds": "1h"}, 'For input string: "1h"'),
    ({"unsecuredLoginStringClaim_sub": "b", "unsecuredLoginNumberClaim_n": "seven"}, 'For input string: "seven"'),
    ({"unsecuredLoginStringClaim_sub": "b", "unsecuredLoginNumberClaim_n": "1e999"}, 'For input string: "1e999"')])
def test_unsecured_login_errors(options, message):
    with pytest.raises(ValueError, match=message):
        oauthbearer.unsecured_login_token(options, now_ms=NOW_MS)


# ---- signed JWTs and a JWKS

@pytest.fixture(scope="module")
def keys():
    return {"rsa": rsa.generate_private_key(public_exponent=65537, key_size=2048),
            "rsa2": rsa.generate_private_key(public_exponent=65537, key_size=2048),
            "P-256": ec.generate_private_key(ec.SECP256R1()), "P-384": ec.generate_private_key(ec.SECP384R1()),
            "P-521": ec.generate_private_key(ec.SECP521R1())}


CURVE_NAMES = {"secp256r1": "P-256", "secp384r1": "P-384", "secp521r1": "P-521"}


def jwk(private, kid: str | None, **extra) -> dict:
    public = private.public_key()
    as_bytes = lambda n, size=None: n.to_bytes(size or (n.bit_length() + 7) // 8, "big")  # noqa: E731
    if isinstance(public, rsa.RSAPublicKey):
        numbers = public.public_numbers()
        doc = {"kty": "RSA", "n": b64(as_bytes(numbers.n)), "e": b64(as_bytes(numbers.e))}
    else:
        numbers, size = public.public_numbers(), (public.curve.key_size + 7) // 8
        doc = {"kty": "EC", "crv": CURVE_NAMES[public.curve.name], "x": b64(as_bytes(numbers.x, size)),
               "y": b64(as_bytes(numbers.y, size))}
    return {**doc, **({"kid": kid} if kid is not None else {}), **extra}


def sign(private, alg: str, claims, kid: str | None = "k1", header: dict | None = None) -> str:
    """A JWS of the claims (bytes: the payload as is), signed with alg (header: more header parameters)."""
    head = {"alg": alg, "typ": "JWT", **({"kid": kid} if kid is not None else {}), **(header or {})}
    signed = f"{enc(head)}.{b64(claims) if isinstance(claims, bytes) else enc(claims)}".encode()
    digest = {"256": hashes.SHA256, "384": hashes.SHA384, "512": hashes.SHA512}[alg[2:]]()
    if alg.startswith("RS"):
        signature = private.sign(signed, padding.PKCS1v15(), digest)
    elif alg.startswith("PS"):
        signature = private.sign(signed, padding.PSS(mgf=padding.MGF1(digest), salt_length=digest.digest_size),
                                 digest)
    elif alg.startswith("ES"):
        r, s = decode_dss_signature(private.sign(signed, ec.ECDSA(digest)))
        size = (private.curve.key_size + 7) // 8
        signature = r.to_bytes(size, "big") + s.to_bytes(size, "big")
    else:
        signature = hmac.new(private, signed, hashlib.sha256).digest()
    return f"{signed.decode()}.{b64(signature)}"


def jwt_claims(**changes) -> dict:
    claims = {"sub": "alice", "iss": "https://idp", "aud": "logbus", "iat": NOW_S - 10, "exp": NOW_S + 300,
              "scope": "logbus"}
    claims.update(changes)
    return {k: v for k, v in claims.items() if v is not None}


def checker(*jwks: dict, **kwargs) -> JwksValidator:
    kwargs.setdefault("expected_audience", ["logbus"])
    return JwksValidator(JwksKeys.from_document({"keys": list(jwks)}), **kwargs)


def check(validator: JwksValidator, token: str, now_ms: int = NOW_MS):
    return asyncio.run(validator.validate(token, now_ms=now_ms))


@pytest.mark.parametrize("alg,name", [("RS256", "rsa"), ("RS384", "rsa"), ("RS512", "rsa"), ("PS256", "rsa"),
                                      ("PS384", "rsa"), ("PS512", "rsa"), ("ES256", "P-256"), ("ES384", "P-384"),
                                      ("ES512", "P-521")])
def test_jwks_good_token(keys, alg, name):
    token = sign(keys[name], alg, jwt_claims(scope=["a", " b "]))
    checked = check(checker(jwk(keys["rsa2"], "k0"), jwk(keys[name], "k1"), expected_issuer="https://idp"), token)
    assert checked.value == token and checked.principal == "alice" and checked.scope == {"a", "b"}
    assert checked.lifetime_ms == (NOW_S + 300) * 1000 and checked.start_ms == (NOW_S - 10) * 1000
    assert checked.claims["iss"] == "https://idp"


def test_jwks_wrong_key(keys):
    assert "signature" in refused(lambda: check(checker(jwk(keys["rsa"], "k1")),
                                                sign(keys["rsa2"], "RS256", jwt_claims()))).reason
    refused(lambda: check(checker(jwk(keys["P-256"], "k1")), sign(keys["P-384"], "ES256", jwt_claims())))


def test_jwks_tampered_payload(keys):
    validator = checker(jwk(keys["rsa"], "k1"))
    head, _, signature = sign(keys["rsa"], "RS256", jwt_claims()).split(".")
    check(validator, f"{head}.{enc(jwt_claims())}.{signature}")  # the same claims, the same bytes: accepted
    assert "signature" in refused(lambda: check(validator, f"{head}.{enc(jwt_claims(sub='mallory'))}."
                                                           f"{signature}")).reason
    es = sign(keys["P-256"], "ES256", jwt_claims())
    refused(lambda: check(checker(jwk(keys["P-256"], "k1")), es[:-4] + ("AAAA" if es[-4:] != "AAAA" else "BBBB")))


def test_jwks_expiry_and_clock_skew(keys):
    validator = checker(jwk(keys["rsa"], "k1"))
    check(validator, sign(keys["rsa"], "RS256", jwt_claims(exp=NOW_S - 29, iat=NOW_S - 100)))
    expired = sign(keys["rsa"], "RS256", jwt_claims(exp=NOW_S - 30, iat=NOW_S - 100))
    assert "no longer valid" in refused(lambda: check(validator, expired)).reason
    strict = checker(jwk(keys["rsa"], "k1"), clock_skew_s=0)
    check(strict, sign(keys["rsa"], "RS256", jwt_claims(exp=NOW_S + 1)), now_ms=NOW_MS + 999)  # whole seconds
    refused(lambda: check(strict, sign(keys["rsa"], "RS256", jwt_claims(exp=NOW_S + 1)), now_ms=NOW_MS + 1000))


def test_jwks_not_before_and_issued_at(keys):
    validator = checker(jwk(keys["rsa"], "k1"))
    check(validator, sign(keys["rsa"], "RS256", jwt_claims(nbf=NOW_S + 30)))
    assert "not yet valid" in refused(lambda: check(validator, sign(keys["rsa"], "RS256",
                                                                    jwt_claims(nbf=NOW_S + 31)))).reason
    check(validator, sign(keys["rsa"], "RS256", jwt_claims(iat=NOW_S + 100)))  # jose4j: a future iat is accepted
    refused(lambda: check(validator, sign(keys["rsa"], "RS256", jwt_claims(iat=NOW_S + 400))))  # but not after exp
    assert "(iat)" in refused(lambda: check(validator, sign(keys["rsa"], "RS256", jwt_claims(iat=None)))).reason
    assert check(checker(jwk(keys["rsa"], "k1"), require_iat=False),
                 sign(keys["rsa"], "RS256", jwt_claims(iat=None))).start_ms is None


def test_jwks_required_claims(keys):
    validator = checker(jwk(keys["rsa"], "k1"))
    for changes, reason in [({"exp": None}, "(exp)"), ({"exp": "later"}, "'exp'"), ({"sub": None}, "non-null"),
                            ({"sub": ""}, "non-empty"), ({"sub": " "}, "whitespace"), ({"sub": 3}, "'sub'"),
                            ({"scope": ["a", "a "]}, "duplicates"), ({"scope": ""}, "non-empty")]:
        assert reason in refused(lambda: check(validator, sign(keys["rsa"], "RS256", jwt_claims(**changes)))).reason
    assert check(validator, sign(keys["rsa"], "RS256", jwt_claims(sub=" bob "))).principal == "bob"
    assert check(validator, sign(keys["rsa"], "RS256", jwt_claims(scope="a b"))).scope == {"a b"}  # one item
    assert check(validator, sign(keys["rsa"], "RS256", jwt_claims(scope=None))).scope == frozenset()
    custom = checker(jwk(keys["rsa"], "k1"), sub_claim="client_id", scope_claim="scp")
    checked = check(custom, sign(keys["rsa"], "RS256", jwt_claims(client_id="svc", scp=["x"])))
    assert checked.principal == "svc" and checked.scope == {"x"}


def test_jwks_audience(keys):
    validator = checker(jwk(keys["rsa"], "k1"), expected_audience=["logbus", "other"])
    check(validator, sign(keys["rsa"], "RS256", jwt_claims(aud=["x", "logbus"])))
    for aud, reason in [("nope", "doesn't contain"), (["x"], "doesn't contain"), (None, "No Audience"),
                        (7, "'aud'")]:
        assert reason in refused(lambda: check(validator, sign(keys["rsa"], "RS256", jwt_claims(aud=aud)))).reason
    anyone = checker(jwk(keys["rsa"], "k1"), expected_audience=None)
    check(anyone, sign(keys["rsa"], "RS256", jwt_claims(aud=None)))
    # as Kafka (jose4j's default audience check): with no expected audience, a token naming one is refused
    assert "no expected audience" in refused(lambda: check(anyone, sign(keys["rsa"], "RS256", jwt_claims()))).reason


def test_jwks_issuer(keys):
    validator = checker(jwk(keys["rsa"], "k1"), expected_issuer="https://idp")
    check(validator, sign(keys["rsa"], "RS256", jwt_claims()))
    refused(lambda: check(validator, sign(keys["rsa"], "RS256", jwt_claims(iss="https://evil"))))
    refused(lambda: check(validator, sign(keys["rsa"], "RS256", jwt_claims(iss=None))))
    check(checker(jwk(keys["rsa"], "k1")), sign(keys["rsa"], "RS256", jwt_claims(iss="https://any")))


def test_jwks_unknown_kid(keys):
    reason = refused(lambda: check(checker(jwk(keys["rsa"], "k1")),
                                   sign(keys["rsa"], "RS256", jwt_claims(), kid="k2"))).reason
    assert "Unable to find a suitable verification key" in reason


def test_jwks_refuses_alg_none_and_hmac(keys):
    validator = checker(jwk(keys["rsa"], "k1"), {"kty": "oct", "kid": "k1", "k": b64(b"secret")})
    head = enc({"alg": "none", "kid": "k1"})
    for token in (f"{head}.{enc(jwt_claims())}.", f"{head}.{enc(jwt_claims())}.c2ln",
                  sign(b"secret", "HS256", jwt_claims()),
                  sign(keys["rsa"], "RS256", jwt_claims(), header={"alg": "RS1"})):
        refused(lambda: check(validator, token))


def test_jwks_malformed(keys):
    validator = checker(jwk(keys["rsa"], "k1"))
    good = sign(keys["rsa"], "RS256", jwt_claims())
    for token in ("", "  ", "a.b", good + ".x", good.split(".", 1)[1], "!!." + good.split(".", 1)[1],
                  sign(keys["rsa"], "RS256", jwt_claims(), header={"crit": ["exp"]}),
                  sign(keys["rsa"], "RS256", jwt_claims(), kid=7)):
        refused(lambda: check(validator, token))
    assert "not a JSON object" in refused(lambda: check(validator, sign(keys["rsa"], "RS256", [1]))).reason
    assert "Could not parse the JWT claims" in refused(lambda: check(validator, sign(keys["rsa"], "RS256",
                                                                                   b"{oops"))).reason


def test_jwks_key_selection_without_kid(keys):  # jose4j: by key type, then the first key left
    mixed = checker(jwk(keys["P-256"], None), jwk(keys["rsa"], None))
    check(mixed, sign(keys["rsa"], "RS256", jwt_claims(), kid=None))
    check(mixed, sign(keys["P-256"], "ES256", jwt_claims(), kid=None))
    two = checker(jwk(keys["rsa"], "a"), jwk(keys["rsa2"], "b"))
    check(two, sign(keys["rsa"], "RS256", jwt_claims(), kid=None))
    refused(lambda: check(two, sign(keys["rsa2"], "RS256", jwt_claims(), kid=None)))  # not tried: the first is used
    by_alg = checker(jwk(keys["rsa"], None, alg="RS384"), jwk(keys["rsa2"], None, alg="RS256"))
    check(by_alg, sign(keys["rsa2"], "RS256", jwt_claims(), kid=None))
    curves = checker(jwk(keys["P-384"], None), jwk(keys["P-256"], None))
    check(curves, sign(keys["P-256"], "ES256", jwt_claims(), kid=None))


def test_jwks_skips_keys_not_for_signatures(keys):
    for extra in ({"use": "enc"}, {"key_ops": ["encrypt"]}):
        refused(lambda: check(checker(jwk(keys["rsa"], "k1", **extra)), sign(keys["rsa"], "RS256", jwt_claims())))
    check(checker(jwk(keys["rsa"], "k1", use="sig", key_ops=["verify"])), sign(keys["rsa"], "RS256", jwt_claims()))
    check(checker({"kty": "RSA", "kid": "k1", "n": "!!", "e": "AQAB"}, {"kty": "OKP", "kid": "k1"},
                  jwk(keys["rsa"], "k1")), sign(keys["rsa"], "RS256", jwt_claims()))


def test_jwks_key_must_fit_the_alg(keys):
    refused(lambda: check(checker(jwk(keys["P-256"], "k1")), sign(keys["rsa"], "RS256", jwt_claims())))
    refused(lambda: check(checker(jwk(keys["P-256"], "k1")), sign(keys["P-384"], "ES384", jwt_claims())))
    head = enc({"alg": "ES384", "kid": "k1"})  # a P-256 signature over SHA-384, R and S padded to P-384's size
    r, s = decode_dss_signature(keys["P-256"].sign(f"{head}.{enc(jwt_claims())}".encode(), ec.ECDSA(hashes.SHA384())))
    token = f"{head}.{enc(jwt_claims())}.{b64(r.to_bytes(48, 'big') + s.to_bytes(48, 'big'))}"
    assert "P-384" in refused(lambda: check(checker(jwk(keys["P-256"], "k1")), token)).reason
    small = rsa.generate_private_key(public_exponent=65537, key_size=1024)
    assert "2048 bits" in refused(lambda: check(checker(jwk(small, "k1")), sign(small, "RS256", jwt_claims()))).reason


# ---- JwksKeys: loading and reloading

class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def write_jwks(path, *jwks):
    path.write_text(json.dumps({"keys": list(jwks)}))


def test_jwks_keys_from_a_file_reload_for_a_new_kid(tmp_path, keys):
    path, clock = tmp_path / "jwks.json", Clock()
    write_jwks(path, jwk(keys["rsa"], "k1"))
    store = JwksKeys(path.as_uri(), clock=clock)
    validator = JwksValidator(store, ["logbus"])

    async def run():
        assert (await validator.validate(sign(keys["rsa"], "RS256", jwt_claims()), now_ms=NOW_MS)).principal == "alice"
        write_jwks(path, jwk(keys["rsa"], "k1"), jwk(keys["P-256"], "k2"))
        clock.now += 5  # a fetch less than 10 s ago: no reload for an unknown kid yet
        assert await store.key("k2", "ES256") is None
        clock.now += 6
        assert await store.key("k2", "ES256") is not None
        assert (await validator.validate(sign(keys["P-256"], "ES256", jwt_claims(), kid="k2"),
                                         now_ms=NOW_MS)).principal == "alice"
        write_jwks(path, jwk(keys["rsa2"], "k3"))
        assert await store.key("k3", "RS256") is None  # the last fetch was just now
        clock.now += 10
        assert await store.key("k3", "RS256") is not None
        assert await store.key("k" * 1001, "RS256") is None and await store.key("k1", "RS256") is None
    asyncio.run(run())


def test_jwks_keys_periodic_reload_and_failures(tmp_path, keys):
    path, clock = tmp_path / "jwks.json", Clock()
    write_jwks(path, jwk(keys["rsa"], "k1"))
    store = JwksKeys(path.as_uri(), refresh_ms=60_000, clock=clock)

    async def run():
        assert await store.key("k1", "RS256") is not None
        write_jwks(path, jwk(keys["rsa2"], "k2"))
        clock.now += 30
        assert await store.key("k1", "RS256") is not None  # not reloaded yet
        clock.now += 31
        assert await store.key("k1", "RS256") is None  # reloaded: k1 is gone
        path.write_text("{not json")
        clock.now += 61
        assert await store.key("k2", "RS256") is not None and "JSONDecodeError" in store.last_error  # kept
        path.write_text(json.dumps({"no": "keys"}))
        clock.now += 61
        assert await store.key("k2", "RS256") is not None and "keys member" in store.last_error
    asyncio.run(run())


def test_jwks_keys_unavailable(tmp_path, keys):
    clock = Clock()
    store = JwksKeys((tmp_path / "missing.json").as_uri(), clock=clock)
    validator = JwksValidator(store, ["logbus"])
    token = sign(keys["rsa"], "RS256", jwt_claims())
    with pytest.raises(JwksError, match="could not load"):
        asyncio.run(validator.validate(token, now_ms=NOW_MS))
    write_jwks(tmp_path / "missing.json", jwk(keys["rsa"], "k1"))
    with pytest.raises(JwksError, match="no JWKS loaded"):  # retried no sooner than 10 s later
        asyncio.run(validator.validate(token, now_ms=NOW_MS))
    clock.now += 10
    assert asyncio.run(validator.validate(token, now_ms=NOW_MS)).principal == "alice"


def test_jwks_keys_arguments():
    for url in ("ftp://host/jwks", "/etc/jwks.json", ""):
        with pytest.raises(ValueError, match="file://, http:// or https://"):
            JwksKeys(url)
    with pytest.raises(ValueError, match="positive"):
        JwksKeys("https://idp/jwks", refresh_ms=0)


def test_jwks_keys_over_http_one_fetch_at_a_time(keys):
    served = {"doc": {"keys": [jwk(keys["rsa"], "k1")]}, "hits": 0}

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_GET(self):
            served["hits"] += 1
            body = json.dumps(served["doc"]).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    clock = Clock()
    store = JwksKeys(f"http://127.0.0.1:{server.server_address[1]}/jwks", clock=clock)

    async def run():
        assert await store.key("k1", "RS256") is not None and served["hits"] == 1
        served["doc"] = {"keys": [jwk(keys["rsa"], "k1"), jwk(keys["rsa2"], "k2")]}
        clock.now += 11
        found = await asyncio.gather(*(store.key("k2", "RS256") for _ in range(20)))
        assert all(k is not None for k in found) and served["hits"] == 2  # one fetch for the whole flood
        await asyncio.gather(*(store.key(f"bad{i}", "RS256") for i in range(20)))
        assert served["hits"] == 2  # unknown kids within 10 s of the last fetch
    try:
        asyncio.run(run())
    finally:
        server.shutdown()
        server.server_close()
