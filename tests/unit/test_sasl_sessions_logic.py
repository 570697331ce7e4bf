"""KIP-368 session lifetimes, re-authentication rules and OAUTHBEARER's SASL exchange, without a network."""

import asyncio
import time

import pytest

from broker.config import BrokerConfig, ConfigError
from broker.network.session import Session
from broker.security import oauthbearer, sasl

pytestmark = [pytest.mark.unit, pytest.mark.timeout(30)]


@pytest.mark.parametrize("max_reauth, expiry, expected", [
    (0, None, None),            # nothing limits the session
    (5000, None, 5000),         # connections.max.reauth.ms alone
    (0, 13_000, 3000),          # a token's remaining life alone (now = 10,000)
    (5000, 13_000, 3000),       # the smaller of both
    (2000, 13_000, 2000),
    (5000, 9_000, 0),           # an expired credential: 0, never negative
])
def test_session_lifetime_is_kafkas(max_reauth, expiry, expected):
    assert sasl.session_lifetime_ms(max_reauth, expiry, 10_000) == expected


UNSECURED_JAAS = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required;"


def _config(**extra) -> BrokerConfig:
    return BrokerConfig.from_strings({
        "listeners": "PLAINTEXT://127.0.0.1:9092,SASL_PLAINTEXT://127.0.0.1:9093",
        "sasl.enabled.mechanisms": "PLAIN,OAUTHBEARER",
        "listener.name.sasl_plaintext.oauthbearer.sasl.jaas.config": UNSECURED_JAAS, **extra})


class _Done:
    def __init__(self, principal: str, mechanism: str = "PLAIN", expiry: int | None = None):
        self.principal, self.mechanism, self.credential_expiry_ms = principal, mechanism, expiry


def test_finish_sets_the_session_end_from_the_listener_and_mechanism_setting():
    config = _config(**{"connections.max.reauth.ms": "60000",
                        "listener.name.sasl_plaintext.plain.connections.max.reauth.ms": "2000"})
    session = Session("SASL_PLAINTEXT", "SASL_PLAINTEXT")
    assert sasl.finish(session, config, _Done("User:carol")) == 2000  # the listener's PLAIN value wins
    assert session.authenticated and session.principal == "User:carol" and session.mechanism == "PLAIN"
    assert 1.9 < session.expires - time.monotonic() <= 2.0
    other = Session("SASL_PLAINTEXT", "SASL_PLAINTEXT")
    assert sasl.finish(other, config, _Done("User:carol", "OAUTHBEARER")) == 60000  # the broker-wide value


def test_finish_refuses_a_new_principal_on_reauthentication():
    session = Session("SASL_PLAINTEXT", "SASL_PLAINTEXT")
    session.reauthenticating_as = "User:carol"
    with pytest.raises(sasl.SaslFailure, match="from User.carol: User.admin"):
        sasl.finish(session, _config(), _Done("User:admin"))
    assert not session.authenticated
    assert sasl.finish(session, _config(), _Done("User:carol")) == 0 and session.expires is None


def test_oauthbearer_exchange_between_a_broker_and_another():
    """The client side a broker uses towards another (Kafka's unsecured login) against the server side."""
    config = _config(**{"listener.name.sasl_plaintext.oauthbearer.sasl.jaas.config":
                        "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required "
                        'unsecuredLoginStringClaim_sub="broker" unsecuredLoginLifetimeSeconds="60";',
                        "inter.broker.listener.name": "SASL_PLAINTEXT",
                        "sasl.mechanism.inter.broker.protocol": "OAUTHBEARER"})
    client = sasl.client_exchange(config, "SASL_PLAINTEXT", "OAUTHBEARER")
    server = sasl.ServerExchange("OAUTHBEARER", dict, None, sasl.token_validator(config, "SASL_PLAINTEXT"))
    reply = asyncio.run(server.respond(client.first()))
    assert reply == b"" and client.respond(reply) is None
    assert server.complete and server.principal == "User:broker"
    assert 59_000 < server.credential_expiry_ms - time.time() * 1000 <= 60_000


def test_oauthbearer_refusal_is_a_challenge_then_a_failure():
    config = _config()
    server = sasl.ServerExchange("OAUTHBEARER", dict, None, sasl.token_validator(config, "SASL_PLAINTEXT"))
    expired = oauthbearer.unsecured_login_token({"unsecuredLoginStringClaim_sub": "carol"},
                                                now_ms=int(time.time() * 1000) - 7_200_000)
    challenge = asyncio.run(server.respond(oauthbearer.client_first(expired)))
    assert challenge == b'{"status":"invalid_token"}' and not server.complete
    with pytest.raises(sasl.SaslFailure, match='^{"status":"invalid_token"}$'):
        asyncio.run(server.respond(b"\x01"))
    garbage = sasl.ServerExchange("OAUTHBEARER", dict, None, sasl.token_validator(config, "SASL_PLAINTEXT"))
    with pytest.raises(sasl.SaslFailure, match="invalid credentials with SASL mechanism OAUTHBEARER"):
        asyncio.run(garbage.respond(b"not a client first message"))


def test_oauthbearer_authorization_id_must_be_the_tokens_principal():
    config = _config()
    token = oauthbearer.unsecured_login_token({"unsecuredLoginStringClaim_sub": "carol"})
    server = sasl.ServerExchange("OAUTHBEARER", dict, None, sasl.token_validator(config, "SASL_PLAINTEXT"))
    with pytest.raises(sasl.SaslFailure, match=r"authorization id \(admin\) that is different .* \(carol\)"):
        asyncio.run(server.respond(oauthbearer.client_first(token, authzid="admin")))


@pytest.mark.parametrize("extra, message", [
    ({"listener.name.sasl_plaintext.oauthbearer.sasl.server.callback.handler.class": "com.example.Mine"},
     "implements Kafka's unsecured validator"),
    ({"listener.name.sasl_plaintext.oauthbearer.sasl.server.callback.handler.class": sasl.OAUTHBEARER_VALIDATOR},
     "needs sasl.oauthbearer.jwks.endpoint.url"),
    ({"listener.name.sasl_plaintext.oauthbearer.sasl.server.callback.handler.class": sasl.OAUTHBEARER_VALIDATOR,
      "sasl.oauthbearer.jwks.endpoint.url": "ftp://idp/jwks"}, "expected an http"),
])
def test_oauthbearer_configuration_errors(extra, message):
    with pytest.raises(ConfigError, match=message):
        _config(**extra).check_security()


def test_who_may_reauthenticate():
    session = Session("SASL_PLAINTEXT", "SASL_PLAINTEXT")
    assert not session.may_reauthenticate(100.0)  # not authenticated
    session.authenticated = True
    assert not session.may_reauthenticate(100.0)  # a session that never ends
    session.expires = 200.0
    assert session.may_reauthenticate(100.0)
    session.reauth_started = 99.5
    assert not session.may_reauthenticate(100.0)  # less than a second after the last one began
    assert session.may_reauthenticate(100.5)


def test_inter_broker_oauthbearer_needs_the_unsecured_validator_and_a_login():
    base = {"inter.broker.listener.name": "SASL_PLAINTEXT", "sasl.mechanism.inter.broker.protocol": "OAUTHBEARER"}
    with pytest.raises(ConfigError, match="cannot make a token"):  # the broker's login has nothing to claim
        _config(**base).check_security()
    with pytest.raises(ConfigError, match="JWKS-validated listener refuses"):
        _config(**base, **{
            "listener.name.sasl_plaintext.oauthbearer.sasl.server.callback.handler.class": sasl.OAUTHBEARER_VALIDATOR,
            "listener.name.sasl_plaintext.oauthbearer.sasl.oauthbearer.jwks.endpoint.url": "file:///jwks.json",
        }).check_security()


def test_oauthbearer_without_a_login_module_is_refused_and_mechanism_keys_are_lower_case():
    with pytest.raises(ConfigError, match="needs listener.name.sasl_plaintext.oauthbearer.sasl.jaas.config"):
        BrokerConfig.from_strings({"listeners": "SASL_PLAINTEXT://127.0.0.1:9093",
                                   "sasl.enabled.mechanisms": "OAUTHBEARER"}).check_security()
    with pytest.raises(ConfigError):
        _config(**{"listener.name.sasl_plaintext.PLAIN.connections.max.reauth.ms": "1000"})
