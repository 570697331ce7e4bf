"""SCRAM (RFC 5802/7677), JAAS parsing and the SASL exchanges, without a network."""

import asyncio
import base64

import pytest

from broker.security import sasl, scram
from settings import jaas

pytestmark = [pytest.mark.unit, pytest.mark.timeout(30)]

# RFC 7677, section 3
CLIENT_NONCE = "rOprNGfwEbeRWgbNEkqO"
SERVER_NONCE = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
CLIENT_FIRST = b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
SERVER_FIRST = b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
CLIENT_FINAL = (b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
SERVER_FINAL = b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
SALT = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")


def test_rfc7677_client_side():
    client = scram.ScramClient("SCRAM-SHA-256", "user", "pencil", nonce=CLIENT_NONCE)
    assert client.first() == CLIENT_FIRST
    assert client.final(SERVER_FIRST) == CLIENT_FINAL
    client.verify(SERVER_FINAL)
    with pytest.raises(scram.ScramError):
        client.verify(b"v=" + base64.b64encode(b"x" * 32))


def test_rfc7677_server_side():
    credential = scram.make_credential("SCRAM-SHA-256", "pencil", 4096, SALT)
    server = scram.ScramServer("SCRAM-SHA-256", nonce=SERVER_NONCE)
    assert server.client_first(CLIENT_FIRST) == "user"
    assert server.server_first(credential) == SERVER_FIRST
    assert server.client_final(CLIENT_FINAL) == SERVER_FINAL


def test_wrong_password_is_refused_by_the_server():
    credential = scram.make_credential("SCRAM-SHA-512", "right")
    server = scram.ScramServer("SCRAM-SHA-512")
    client = scram.ScramClient("SCRAM-SHA-512", "alice", "wrong")
    assert server.client_first(client.first()) == "alice"
    final = client.final(server.server_first(credential))
    with pytest.raises(scram.ScramError, match="invalid credentials"):
        server.client_final(final)


def test_tampered_nonce_is_refused():
    credential = scram.make_credential("SCRAM-SHA-256", "pencil", 4096, SALT)
    server = scram.ScramServer("SCRAM-SHA-256", nonce=SERVER_NONCE)
    server.client_first(CLIENT_FIRST)
    server.server_first(credential)
    with pytest.raises(scram.ScramError, match="nonce"):
        server.client_final(CLIENT_FINAL.replace(b"k0,", b"k1,"))


def test_credential_round_trips_in_kafkas_form():
    credential = scram.make_credential("SCRAM-SHA-512", "secret", 4096)
    text = credential.encode()
    assert text.startswith("salt=") and ",stored_key=" in text and text.endswith(",iterations=4096")
    assert scram.ScramCredential.decode(text) == credential
    with pytest.raises(scram.ScramError):
        scram.make_credential("SCRAM-SHA-512", "secret", 100)


def test_saslname_escaping():
    assert scram.decode_saslname(scram.encode_saslname("a=b,c")) == "a=b,c"
    with pytest.raises(scram.ScramError):
        scram.decode_saslname("a=b")


def test_jaas_plain_users_and_own_credentials():
    modules = jaas.parse('org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
                         'password="admin-secret" user_admin="admin-secret" user_alice="al\\"ice";')
    assert len(modules) == 1 and modules[0].name == jaas.PLAIN_MODULE and modules[0].flag == "required"
    assert modules[0].options["username"] == "admin"
    assert modules[0].users == {"admin": "admin-secret", "alice": 'al"ice'}


@pytest.mark.parametrize("text", ["", "org.x.Module required username=\"a\"",
                                  'username="a";', "org.x.Module required user name=\"a\";"])
def test_jaas_malformed(text):
    with pytest.raises(jaas.JaasError):
        jaas.parse(text)


def _exchange(mechanism, users=None, stored=None):
    async def lookup(user, mech):
        return (stored or {}).get((user, mech))
    return sasl.ServerExchange(mechanism, lambda: users or {}, lookup)


def test_plain_exchange():
    ok = _exchange("PLAIN", {"alice": "pw"})
    assert asyncio.run(ok.respond(b"\0alice\0pw")) == b"" and ok.complete and ok.principal == "User:alice"
    bad = _exchange("PLAIN", {"alice": "pw"})
    with pytest.raises(sasl.SaslFailure, match="Invalid username or password"):
        asyncio.run(bad.respond(b"\0alice\0nope"))
    with pytest.raises(sasl.SaslFailure):
        asyncio.run(_exchange("PLAIN", {"alice": "pw"}).respond(b"bob\0alice\0pw"))


def test_scram_exchange_against_the_client():
    stored = {("bob", "SCRAM-SHA-512"): scram.make_credential("SCRAM-SHA-512", "pw")}

    async def run(password):
        server = _exchange("SCRAM-SHA-512", stored=stored)
        client = sasl.ClientExchange("SCRAM-SHA-512", "bob", password)
        token = client.first()
        while token is not None:
            token = client.respond(await server.respond(token))
        return server

    server = asyncio.run(run("pw"))
    assert server.complete and server.principal == "User:bob"
    with pytest.raises(sasl.SaslFailure, match="invalid credentials with SASL mechanism SCRAM-SHA-512"):
        asyncio.run(run("wrong"))
    with pytest.raises(sasl.SaslFailure):
        asyncio.run(_exchange("SCRAM-SHA-256", stored=stored).respond(b"n,,n=bob,r=abc"))  # no 256 credential
