"""SASL sessions that end and are renewed (KIP-368, ``connections.max.reauth.ms``): the lifetime the broker tells
a client, a connection closed when it is used after its session ended, re-authentication on the same connection
(same mechanism and principal, or the connection closes), and confluent-kafka and kafka-python renewing their
sessions while they produce and consume."""

import os
import subprocess
import sys
import time
import uuid

import pytest
import requests
from confluent_kafka import Consumer, Producer
from rawclient import RawClient, request_module
from support import REPO, BrokerProcess, free_port, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

LIFETIME_MS = 3000
PLAIN_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
              'password="admin-pw" user_admin="admin-pw" user_carol="carol-pw";')


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    b = BrokerProcess(tmp_path_factory.mktemp("sasl-sessions"), num_partitions=1)
    b.sasl, b.metrics_port = free_port(), free_port()
    subprocess.run([sys.executable, "-m", "logbus.cli", "configs", "--log-dir", str(b.log_dir), "--alter",
                    "--entity-type", "users", "--entity-name", "alice", "--add-config",
                    "SCRAM-SHA-256=[password=alice-pw]"], check=True, timeout=60, capture_output=True,
                   env=dict(os.environ, PYTHONPATH=str(REPO / "platform")))
    b.settings.update({
        "listeners": f"PLAINTEXT://127.0.0.1:{b.port},SASL_PLAINTEXT://127.0.0.1:{b.sasl}",
        "metrics.listener": f"http://127.0.0.1:{b.metrics_port}",
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS,
        "listener.name.sasl_plaintext.plain.connections.max.reauth.ms": LIFETIME_MS,  # PLAIN only
        "group.initial.rebalance.delay.ms": 0,
    })
    b.start()
    yield b
    b.stop()


def counters(broker) -> dict[str, float]:
    """The SASL listener's KIP-368 counters from the broker's /metrics."""
    body = requests.get(f"http://127.0.0.1:{broker.metrics_port}/metrics", timeout=10).text
    out = {}
    for line in body.splitlines():
        for name in ("successful_reauthentication", "failed_reauthentication", "expired_connections_killed"):
            if line.startswith(f"kafka_server_socketservermetrics_{name}_total") and 'SASL_PLAINTEXT' in line:
                out[name] = float(line.rsplit(" ", 1)[1])
    return out


def _login(client: RawClient, user: str = "carol", password: str = "carol-pw", version: int = 2,
           mechanism: str = "PLAIN"):
    hs = client.request(17, 1, request_module(17, 1).SaslHandshakeRequest(mechanism=mechanism))
    assert int(hs.error_code) == 0, hs
    return client.request(36, version, request_module(36, version).SaslAuthenticateRequest(
        auth_bytes=f"\0{user}\0{password}".encode()))


def _metadata(client: RawClient):
    return client.request(3, 1, request_module(3, 1).MetadataRequest(topics=()))


def test_lifetime_told_and_a_late_request_closes_the_connection(broker):
    client = RawClient("127.0.0.1", broker.sasl)
    try:
        auth = _login(client)
        assert int(auth.error_code) == 0
        assert auth.session_lifetime.total_seconds() * 1000 == LIFETIME_MS
        assert _metadata(client).brokers
        before = counters(broker)["expired_connections_killed"]
        time.sleep(LIFETIME_MS / 1000 + 0.3)
        with pytest.raises((ConnectionError, OSError)):  # closed without an answer, as Kafka does
            _metadata(client)
        assert counters(broker)["expired_connections_killed"] == before + 1
    finally:
        client.close()


def test_a_mechanism_without_a_limit_has_no_lifetime(broker):
    """connections.max.reauth.ms is set for PLAIN only: a SCRAM session is told 0 and does not end."""
    from broker.security.scram import ScramClient

    client = RawClient("127.0.0.1", broker.sasl)
    try:
        hs = client.request(17, 1, request_module(17, 1).SaslHandshakeRequest(mechanism="SCRAM-SHA-256"))
        assert int(hs.error_code) == 0
        scram = ScramClient("SCRAM-SHA-256", "alice", "alice-pw")
        auth = request_module(36, 2).SaslAuthenticateRequest
        first = client.request(36, 2, auth(auth_bytes=scram.first()))
        final = client.request(36, 2, auth(auth_bytes=scram.final(first.auth_bytes)))
        assert int(final.error_code) == 0 and final.session_lifetime.total_seconds() == 0
        scram.verify(final.auth_bytes)
        time.sleep(LIFETIME_MS / 1000 + 0.3)
        assert _metadata(client).brokers
    finally:
        client.close()


def test_reauthentication_on_the_same_connection(broker):
    client = RawClient("127.0.0.1", broker.sasl)
    try:
        assert int(_login(client).error_code) == 0
        before = counters(broker)
        time.sleep(1.0)
        again = _login(client)  # KIP-368: handshake and authenticate again, same mechanism and user
        assert int(again.error_code) == 0 and again.session_lifetime.total_seconds() * 1000 == LIFETIME_MS
        time.sleep(LIFETIME_MS / 1000 - 0.5)  # past the first session's end, within the second's
        assert _metadata(client).brokers
        time.sleep(1.0)  # past the second's end: re-authentication is still allowed after a session ended
        assert int(_login(client).error_code) == 0
        assert _metadata(client).brokers
        after = counters(broker)
        assert after["successful_reauthentication"] == before["successful_reauthentication"] + 2
        assert after["expired_connections_killed"] == before["expired_connections_killed"]
    finally:
        client.close()


def test_reauthentication_cannot_change_the_principal(broker):
    client = RawClient("127.0.0.1", broker.sasl)
    try:
        assert int(_login(client).error_code) == 0
        failed = counters(broker)["failed_reauthentication"]
        other = _login(client, "admin", "admin-pw")
        assert int(other.error_code) == 58
        assert other.error_message == "Cannot change principals during re-authentication from User.carol: User.admin"
        with pytest.raises((ConnectionError, OSError)):
            _metadata(client)
        assert counters(broker)["failed_reauthentication"] == failed + 1
    finally:
        client.close()


def test_reauthentication_cannot_change_the_mechanism(broker):
    client = RawClient("127.0.0.1", broker.sasl)
    try:
        assert int(_login(client).error_code) == 0
        hs = client.request(17, 1, request_module(17, 1).SaslHandshakeRequest(mechanism="SCRAM-SHA-256"))
        assert int(hs.error_code) == 0  # Kafka accepts the handshake, then closes at the first token, unanswered
        with pytest.raises((ConnectionError, OSError)):
            client.request(36, 2, request_module(36, 2).SaslAuthenticateRequest(auth_bytes=b"n,,n=carol,r=abc"))
    finally:
        client.close()


def test_requests_during_reauthentication_close_the_connection(broker):
    client = RawClient("127.0.0.1", broker.sasl)
    try:
        assert int(_login(client).error_code) == 0
        assert int(client.request(17, 1, request_module(17, 1).SaslHandshakeRequest(mechanism="PLAIN")).error_code) == 0
        with pytest.raises((ConnectionError, OSError)):
            _metadata(client)  # between the handshake and the token: refused, as before the first login
    finally:
        client.close()


def test_when_a_second_handshake_is_refused(broker):
    """Kafka's KafkaChannel.maybeBeginServerReauthentication: a session that never ends, or one whose last
    re-authentication began less than a second ago, is not re-authenticated: ILLEGAL_SASL_STATE, and the
    connection serves on (until its session ends). The SaslAuthenticate version plays no part."""
    from broker.security.scram import ScramClient

    client = RawClient("127.0.0.1", broker.sasl)
    try:
        assert int(_login(client, version=0).error_code) == 0  # v0: re-authentication works all the same
        assert int(_login(client, version=0).error_code) == 0
        hs = client.request(17, 1, request_module(17, 1).SaslHandshakeRequest(mechanism="PLAIN"))
        assert int(hs.error_code) == 34  # within a second of the last re-authentication's start
        assert _metadata(client).brokers
        time.sleep(LIFETIME_MS / 1000 + 0.3)
        with pytest.raises((ConnectionError, OSError)):
            _metadata(client)
    finally:
        client.close()
    scram_client = RawClient("127.0.0.1", broker.sasl)  # SCRAM: no limit set, a session that never ends
    try:
        scram_client.request(17, 1, request_module(17, 1).SaslHandshakeRequest(mechanism="SCRAM-SHA-256"))
        scram = ScramClient("SCRAM-SHA-256", "alice", "alice-pw")
        auth = request_module(36, 2).SaslAuthenticateRequest
        first = scram_client.request(36, 2, auth(auth_bytes=scram.first()))
        assert int(scram_client.request(36, 2, auth(auth_bytes=scram.final(first.auth_bytes))).error_code) == 0
        hs = scram_client.request(17, 1, request_module(17, 1).SaslHandshakeRequest(mechanism="SCRAM-SHA-256"))
        assert int(hs.error_code) == 34
        assert _metadata(scram_client).brokers
    finally:
        scram_client.close()


def _sent_over_sessions(produce_one, seconds: float) -> int:
    """Call ``produce_one(i)`` every 50 ms for ``seconds``; how many were called."""
    count, end = 0, time.monotonic() + seconds
    while time.monotonic() < end:
        produce_one(count)
        count += 1
        time.sleep(0.05)
    return count


def test_confluent_kafka_renews_its_sessions(broker):
    conf = {"bootstrap.servers": f"127.0.0.1:{broker.sasl}", "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN", "sasl.username": "carol", "sasl.password": "carol-pw"}
    topic = f"reauth-ck-{uuid.uuid4().hex[:6]}"
    before = counters(broker)
    errors, delivered = [], []
    producer = Producer({**conf, "acks": "all", "linger.ms": 0, "error_cb": errors.append})

    def produce(i):
        producer.produce(topic, value=f"m{i}".encode(),
                         on_delivery=lambda err, msg: delivered.append(err or msg.offset()))
        producer.poll(0)
    sent = _sent_over_sessions(produce, 3 * LIFETIME_MS / 1000)  # three sessions' worth
    assert producer.flush(30) == 0
    assert delivered == list(range(sent)) and not errors, (errors, delivered[-5:], broker.log_text()[-2000:])
    consumer = Consumer({**conf, "group.id": f"g-{uuid.uuid4().hex[:6]}", "auto.offset.reset": "earliest",
                         "error_cb": errors.append})
    consumer.subscribe([topic])
    got = []
    try:
        def poll():
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None:
                got.append(msg.value())
            return len(got) >= sent
        wait_until(poll, 30, interval=0, what="every record")
        for _ in range(6):  # an idle consumer renews its sessions too (the expired-connection count below)
            assert consumer.poll(0.75) is None
    finally:
        consumer.close()
    assert got == [f"m{i}".encode() for i in range(sent)] and not errors, errors
    after = counters(broker)
    assert after["successful_reauthentication"] >= before["successful_reauthentication"] + 2
    assert after["expired_connections_killed"] == before["expired_connections_killed"], broker.log_text()[-2000:]


def test_kafka_python_renews_its_sessions(broker):
    from kafka import KafkaConsumer, KafkaProducer

    conf = {"bootstrap_servers": f"127.0.0.1:{broker.sasl}", "security_protocol": "SASL_PLAINTEXT",
            "sasl_mechanism": "PLAIN", "sasl_plain_username": "carol", "sasl_plain_password": "carol-pw"}
    topic = f"reauth-kp-{uuid.uuid4().hex[:6]}"
    before = counters(broker)
    producer = KafkaProducer(acks="all", **conf)
    futures = []
    sent = _sent_over_sessions(lambda i: futures.append(producer.send(topic, f"k{i}".encode())),
                               2.5 * LIFETIME_MS / 1000)
    producer.flush(30)
    assert [f.get(timeout=30).offset for f in futures] == list(range(sent))
    producer.close()
    consumer = KafkaConsumer(topic, auto_offset_reset="earliest", consumer_timeout_ms=30000, **conf)
    got = []
    for message in consumer:
        got.append(message.value)
        if len(got) == sent:
            break
    consumer.close()
    assert got == [f"k{i}".encode() for i in range(sent)]
    after = counters(broker)
    assert after["successful_reauthentication"] >= before["successful_reauthentication"] + 2
    assert after["expired_connections_killed"] == before["expired_connections_killed"], broker.log_text()[-2000:]
