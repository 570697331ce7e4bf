"""SASL/OAUTHBEARER (KIP-255) and OIDC tokens checked against a JWKS (KIP-768), judged by confluent-kafka
(librdkafka's unsecured JWT and its OIDC client-credentials login) and kafka-python (a token provider): tokens
accepted and refused with Kafka's JSON error, the token's expiry as the session's end, renewed by the client."""

import json
import time
import uuid

import pytest
import requests
from confluent_kafka import Consumer, KafkaError, Producer
from oidc_provider import OidcProvider, SigningKey
from rawclient import RawClient, request_module
from support import BrokerProcess, free_port, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

VALIDATOR = "org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler"


@pytest.fixture(scope="module")
def idp():
    provider = OidcProvider({"ingest": "ingest-secret", "brief": "brief-secret", "registry": "registry-secret"},
                            lifetimes={"brief": 10})
    yield provider
    provider.stop()


@pytest.fixture(scope="module")
def broker(tmp_path_factory, idp):
    b = BrokerProcess(tmp_path_factory.mktemp("oauthbearer"), num_partitions=1)
    b.unsecured, b.oidc, b.metrics_port = free_port(), free_port(), free_port()
    b.settings.update({
        "listeners": f"PLAINTEXT://127.0.0.1:{b.port},UNSECURED://127.0.0.1:{b.unsecured},"
                     f"OIDC://127.0.0.1:{b.oidc}",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,UNSECURED:SASL_PLAINTEXT,OIDC:SASL_PLAINTEXT",
        "metrics.listener": f"http://127.0.0.1:{b.metrics_port}",
        "sasl.enabled.mechanisms": "OAUTHBEARER",
        # Kafka's default validator of unsecured tokens, with a required scope
        "listener.name.unsecured.oauthbearer.sasl.jaas.config":
            "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required "
            'unsecuredValidatorRequiredScope="logbus";',
        # KIP-768: signed tokens, keys from the identity provider's JWKS
        "listener.name.oidc.oauthbearer.sasl.jaas.config":
            "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required;",
        "listener.name.oidc.oauthbearer.sasl.server.callback.handler.class": VALIDATOR,
        "listener.name.oidc.oauthbearer.sasl.oauthbearer.jwks.endpoint.url": idp.jwks_url,
        "listener.name.oidc.oauthbearer.sasl.oauthbearer.expected.audience": "logbus",
        "listener.name.oidc.oauthbearer.sasl.oauthbearer.expected.issuer": idp.issuer,
        "group.initial.rebalance.delay.ms": 0,
    })
    b.start()
    yield b
    b.stop()


def reauth_counters(broker, listener: str) -> dict[str, float]:
    body = requests.get(f"http://127.0.0.1:{broker.metrics_port}/metrics", timeout=10).text
    out = {}
    for line in body.splitlines():
        for name in ("successful_reauthentication", "expired_connections_killed", "failed_authentication"):
            if line.startswith(f"kafka_server_socketservermetrics_{name}_total") and f'"{listener}"' in line:
                out[name] = float(line.rsplit(" ", 1)[1])
    return out


def _roundtrip(conf: dict, topic: str, n: int = 20, seconds: float = 0.0, broker=None) -> list[bytes]:
    """Produce ``n`` records (spread over ``seconds``), then consume them from the start."""
    errors = []
    producer = Producer({**conf, "acks": "all", "error_cb": errors.append})
    for i in range(n):
        producer.produce(topic, value=f"m{i}".encode())
        producer.poll(0)
        time.sleep(seconds / n)
    assert producer.flush(30) == 0, errors
    consumer = Consumer({**conf, "group.id": f"g-{uuid.uuid4().hex[:6]}", "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    got = []

    def poll():
        msg = consumer.poll(0.2)
        if msg is not None and msg.error() is None:
            got.append(msg.value())
        return len(got) >= n
    try:
        wait_until(poll, 30, interval=0, what=f"{n} records")
    finally:
        consumer.close()
    assert not errors, (errors, [line for line in (broker.log_text() if broker else "").splitlines() if "OAUTHBEARER" in line][-5:])
    return got


def _unsecured(broker, config: str) -> dict:
    return {"bootstrap.servers": f"127.0.0.1:{broker.unsecured}", "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "OAUTHBEARER", "enable.sasl.oauthbearer.unsecure.jwt": True,
            "sasl.oauthbearer.config": config}


def test_confluent_kafka_unsecured_token(broker):
    conf = _unsecured(broker, "principal=alice scope=logbus")
    topic = f"ob-{uuid.uuid4().hex[:6]}"
    assert _roundtrip(conf, topic) == [f"m{i}".encode() for i in range(20)]


def _auth_error(conf: dict) -> str:
    errors = []
    producer = Producer({**conf, "error_cb": errors.append})
    wait_until(lambda: producer.poll(0.1) is not None or any(e.code() == KafkaError._AUTHENTICATION
                                                              for e in errors), 15, interval=0,
               what="an authentication error")
    return next(e.str() for e in errors if e.code() == KafkaError._AUTHENTICATION)


def test_a_token_without_the_required_scope_is_refused_with_kafkas_error(broker):
    message = _auth_error(_unsecured(broker, "principal=alice scope=other"))
    assert '{"status":"insufficient_scope", "scope":"[logbus]"}' in message, message  # Kafka's JSON, verbatim


def _oidc(broker, idp, client: str = "ingest") -> dict:
    return {"bootstrap.servers": f"127.0.0.1:{broker.oidc}", "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "OAUTHBEARER", "sasl.oauthbearer.method": "oidc",
            "sasl.oauthbearer.client.id": client, "sasl.oauthbearer.client.secret": f"{client}-secret",
            "sasl.oauthbearer.token.endpoint.url": idp.token_url, "sasl.oauthbearer.scope": "logbus"}


def test_the_token_expiry_ends_the_session_and_librdkafka_renews_it(broker, idp):
    """Tokens living 10 s: the broker tells the client its session ends with the token; librdkafka fetches a
    new token (at 80% of its life) and re-authenticates with it (at 90% of the session), so a producer spread
    over more than one token's life loses nothing and no connection is closed for an expired session. (Much
    shorter tokens leave librdkafka too little time to fetch the next one before it re-authenticates, and a
    re-authentication less than a second after the last one is refused, as Kafka refuses it.)"""
    before = reauth_counters(broker, "OIDC")
    issued = idp.issued
    topic = f"ob-life-{uuid.uuid4().hex[:6]}"
    got = _roundtrip(_oidc(broker, idp, "brief"), topic, n=60, seconds=12, broker=broker)
    assert got == [f"m{i}".encode() for i in range(60)]
    after = reauth_counters(broker, "OIDC")
    assert idp.issued >= issued + 2  # a new token, not the first one again
    assert after["successful_reauthentication"] >= before["successful_reauthentication"] + 1
    assert after["expired_connections_killed"] == before["expired_connections_killed"], broker.log_text()[-2000:]


def test_an_expired_token_closes_the_connection_of_a_client_that_keeps_it(broker, idp):
    """A raw client that authenticates with a signed token living 2 s and never re-authenticates: told the
    token's remaining life, served until then, closed at its first request after."""
    client = RawClient("127.0.0.1", broker.oidc)
    try:
        assert int(client.request(17, 1, request_module(17, 1).SaslHandshakeRequest(mechanism="OAUTHBEARER"))
                   .error_code) == 0
        token = idp.token("ingest", lifetime_s=2)
        auth = client.request(36, 1, request_module(36, 1).SaslAuthenticateRequest(
            auth_bytes=f"n,,\x01auth=Bearer {token}\x01\x01".encode()))
        assert int(auth.error_code) == 0 and auth.auth_bytes == b""
        lifetime = auth.session_lifetime.total_seconds()
        assert 1 < lifetime <= 3  # the token's exp is a whole second, 2 to 3 s away
        assert client.request(3, 1, request_module(3, 1).MetadataRequest(topics=())).brokers
        time.sleep(lifetime + 0.3)
        with pytest.raises((ConnectionError, OSError)):
            client.request(3, 1, request_module(3, 1).MetadataRequest(topics=()))
    finally:
        client.close()


def test_librdkafka_oidc_login_with_a_signed_token(broker, idp):
    issued = idp.issued
    topic = f"oidc-{uuid.uuid4().hex[:6]}"
    assert _roundtrip(_oidc(broker, idp), topic) == [f"m{i}".encode() for i in range(20)]
    assert idp.issued > issued  # the client fetched its token from the provider


def test_a_token_signed_by_another_key_is_refused(broker, idp):
    """Kafka's exchange: the refusal is a JSON challenge, the client acknowledges it with 0x01, then
    SASL_AUTHENTICATION_FAILED carries that JSON and the connection closes."""
    forged = idp.token("ingest", key=SigningKey("key-1"))  # the provider's key id, another key
    client = RawClient("127.0.0.1", broker.oidc)
    try:
        client.request(17, 1, request_module(17, 1).SaslHandshakeRequest(mechanism="OAUTHBEARER"))
        auth = request_module(36, 2).SaslAuthenticateRequest
        challenge = client.request(36, 2, auth(auth_bytes=f"n,,\x01auth=Bearer {forged}\x01\x01".encode()))
        assert int(challenge.error_code) == 0 and challenge.auth_bytes == b'{"status":"invalid_token"}'
        final = client.request(36, 2, auth(auth_bytes=b"\x01"))
        assert int(final.error_code) == 58 and final.error_message == '{"status":"invalid_token"}'
        with pytest.raises((ConnectionError, OSError)):
            client.request(3, 1, request_module(3, 1).MetadataRequest(topics=()))
    finally:
        client.close()


@pytest.mark.parametrize("claims", [{"aud": "another-service"}, {"iss": "http://elsewhere"}],
                         ids=["audience", "issuer"])
def test_tokens_for_another_audience_or_issuer_are_refused(broker, idp, claims):
    from kafka import KafkaProducer
    from kafka.errors import KafkaError as KafkaPythonError
    from kafka.net.sasl.oauth import AbstractTokenProvider

    class Provider(AbstractTokenProvider):
        def token(self):
            return idp.token("ingest", **claims)

    with pytest.raises(KafkaPythonError):
        KafkaProducer(bootstrap_servers=f"127.0.0.1:{broker.oidc}", security_protocol="SASL_PLAINTEXT",
                      sasl_mechanism="OAUTHBEARER", sasl_oauth_token_provider=Provider(),
                      request_timeout_ms=5000, max_block_ms=5000).partitions_for(f"x-{uuid.uuid4().hex[:6]}")


def test_kafka_python_token_provider_with_a_signed_token(broker, idp):
    from kafka import KafkaConsumer, KafkaProducer
    from kafka.net.sasl.oauth import AbstractTokenProvider

    class Provider(AbstractTokenProvider):
        def token(self):
            return idp.token("ingest")

    conf = {"bootstrap_servers": f"127.0.0.1:{broker.oidc}", "security_protocol": "SASL_PLAINTEXT",
            "sasl_mechanism": "OAUTHBEARER", "sasl_oauth_token_provider": Provider()}
    topic = f"oidc-kp-{uuid.uuid4().hex[:6]}"
    producer = KafkaProducer(acks="all", **conf)
    futures = [producer.send(topic, f"k{i}".encode()) for i in range(10)]
    producer.flush(30)
    assert [f.get(timeout=30).offset for f in futures] == list(range(10))
    producer.close()
    consumer = KafkaConsumer(topic, auto_offset_reset="earliest", consumer_timeout_ms=30000, **conf)
    got = []
    for message in consumer:
        got.append(message.value)
        if len(got) == 10:
            break
    consumer.close()
    assert got == [f"k{i}".encode() for i in range(10)]


def test_the_schema_registry_logs_in_with_oidc(broker, idp, tmp_path):
    """logbus's own clients take an OIDC login (settings.security): the registry's store (confluent-kafka) and its
    leader election (aiokafka, settings.oidc's token provider) both authenticate with tokens from the provider,
    so a schema is registered and read back."""
    from support import RegistryProcess

    issued = idp.issued
    registry = RegistryProcess(
        tmp_path / "registry", f"127.0.0.1:{broker.oidc}", kafkastore_topic="_schemas_oidc",
        kafkastore_topic_replication_factor="1", kafkastore_security_protocol="SASL_PLAINTEXT",
        kafkastore_sasl_mechanism="OAUTHBEARER", kafkastore_sasl_oauthbearer_client_id="registry",
        kafkastore_sasl_oauthbearer_client_secret="registry-secret", kafkastore_sasl_oauthbearer_scope="logbus",
        kafkastore_sasl_oauthbearer_token_endpoint_url=idp.token_url)
    registry.start()
    try:
        schema = '{"type":"record","name":"Page","fields":[{"name":"url","type":"string"}]}'
        answer = requests.post(f"{registry.url}/subjects/page-value/versions", json={"schema": schema}, timeout=60)
        # a write waits for the election's first assignment: both clients authenticated
        assert answer.status_code == 200, (answer.text, registry.log_text()[-2000:])
        got = requests.get(f"{registry.url}/schemas/ids/{answer.json()['id']}", timeout=10).json()
        assert json.loads(got["schema"]) == json.loads(schema)
        assert idp.issued > issued
    finally:
        registry.stop()
