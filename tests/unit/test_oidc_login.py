"""A broker's OIDC client-credentials login towards other brokers (Kafka's OAuthBearerLoginCallbackHandler):
its settings checked at start-up, the token fetched from a test identity provider over HTTP (in-process) and
accepted by the JWKS validator of another broker's listener."""

import asyncio

import pytest
from oidc_provider import OidcProvider

from broker.config import OAUTHBEARER_LOGIN_HANDLER, BrokerConfig, ConfigError
from broker.network import connect
from broker.security import sasl

pytestmark = [pytest.mark.unit, pytest.mark.timeout(30)]

LISTENER = "SASL_PLAINTEXT"
PREFIX = "listener.name.sasl_plaintext.oauthbearer."


@pytest.fixture(scope="module")
def idp():
    provider = OidcProvider({"broker": "broker-secret"}, lifetimes={"broker": 30})
    yield provider
    provider.stop()


def _config(idp=None, jaas: str = 'clientId="broker" clientSecret="broker-secret" scope="logbus"', login=True,
            **extra):
    url = idp.token_url if idp else "http://127.0.0.1:1/token"
    jwks = idp.jwks_url if idp else "file:///jwks.json"
    settings = {
        "listeners": f"PLAINTEXT://127.0.0.1:9092,{LISTENER}://127.0.0.1:9093",
        "inter.broker.listener.name": LISTENER, "sasl.enabled.mechanisms": "OAUTHBEARER",
        "sasl.mechanism.inter.broker.protocol": "OAUTHBEARER",
        PREFIX + "sasl.jaas.config": f"org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required "
                                     f"{jaas};",
        PREFIX + "sasl.server.callback.handler.class": sasl.OAUTHBEARER_VALIDATOR,
        PREFIX + "sasl.oauthbearer.jwks.endpoint.url": jwks, PREFIX + "sasl.oauthbearer.expected.audience": "logbus",
        PREFIX + "sasl.login.callback.handler.class": OAUTHBEARER_LOGIN_HANDLER,
        PREFIX + "sasl.oauthbearer.token.endpoint.url": url, **extra}
    if not login:
        del settings[PREFIX + "sasl.login.callback.handler.class"]
    return BrokerConfig.from_strings(settings)


def test_a_complete_oidc_login_passes_the_start_up_checks():
    _config().check_security()
    # Kafka 3.1-3.3's class name of the same handler
    _config(**{PREFIX + "sasl.login.callback.handler.class":
               "org.apache.kafka.common.security.oauthbearer.secured.OAuthBearerLoginCallbackHandler"}).check_security()


@pytest.mark.parametrize("extra, jaas, message", [
    ({PREFIX + "sasl.login.callback.handler.class": "com.example.Login"}, None, "com.example.Login is not supported"),
    ({PREFIX + "sasl.oauthbearer.token.endpoint.url": "ftp://idp/token"}, None, "http:// or https://"),
    ({}, 'clientId="broker"', "needs clientSecret"),
    ({}, "", "needs clientId and clientSecret"),
])
def test_oidc_login_settings_are_checked_at_start_up(extra, jaas, message):
    kwargs = {} if jaas is None else {"jaas": jaas}
    with pytest.raises(ConfigError, match=message):
        _config(**kwargs, **extra).check_security()


def test_without_a_login_handler_a_jwks_listener_refuses_the_unsecured_login():
    with pytest.raises(ConfigError, match="sasl.login.callback.handler.class=" + OAUTHBEARER_LOGIN_HANDLER):
        _config(login=False).check_security()


def _exchange(config) -> str:
    """This broker's login against the server side of another broker with the same settings: the principal."""
    token = asyncio.run(connect._oidc_token(config, LISTENER, "OAUTHBEARER"))
    client = sasl.client_exchange(config, LISTENER, "OAUTHBEARER", token)
    server = sasl.ServerExchange("OAUTHBEARER", dict, None, sasl.token_validator(config, LISTENER))
    reply = asyncio.run(server.respond(client.first()))
    assert reply == b"" and client.respond(reply) is None and server.complete
    return server.principal


def test_the_broker_logs_in_with_a_token_from_the_endpoint_and_reuses_it(idp):
    config = _config(idp)
    before = idp.issued
    assert _exchange(config) == "User:broker"
    assert _exchange(config) == "User:broker"
    assert idp.issued == before + 1  # reused until 80% of its 30 s


def test_a_refused_client_secret_is_a_connection_error_naming_the_endpoint(idp):
    config = _config(idp, jaas='clientId="broker" clientSecret="wrong"')
    with pytest.raises(ConnectionError, match=r"OAUTHBEARER login on listener SASL_PLAINTEXT: no token from "
                                              r"http://127\.0\.0\.1:\d+/token: HTTP Error 401"):
        asyncio.run(connect._oidc_token(config, LISTENER, "OAUTHBEARER"))


def test_other_mechanisms_and_the_unsecured_login_fetch_nothing():
    config = BrokerConfig.from_strings({"listeners": f"{LISTENER}://127.0.0.1:9093",
                                        "sasl.enabled.mechanisms": "PLAIN", "sasl.mechanism.inter.broker.protocol": "PLAIN"})
    assert asyncio.run(connect._oidc_token(config, LISTENER, "SCRAM-SHA-512")) is None
    assert asyncio.run(connect._oidc_token(config, LISTENER, "OAUTHBEARER")) is None
