"""Secure listeners (issue 18, item 1): SSL with PEM key stores, SASL (PLAIN, SCRAM-SHA-256/512) on
SASL_PLAINTEXT and SASL_SSL with real clients, wrong passwords refused quickly, and a 3-broker cluster whose
inter-broker listener is SASL_SSL with SCRAM (replication over it: acks=all answered)."""

import logging
import os
import socket
import subprocess
import sys
import time
import uuid

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from security_certs import make_pki
from rawclient import RawClient, request_module
from support import REPO, BrokerProcess, free_port, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_pki(tmp_path_factory.mktemp("pki"), ["broker0", "broker1", "broker2", "client"])


@pytest.fixture(scope="module")
def ssl_broker(tmp_path_factory, pki):
    b = BrokerProcess(tmp_path_factory.mktemp("ssl-broker"), num_partitions=1)
    b.ssl_port, b.mtls_port = free_port(), free_port()
    b.settings.update({
        "listeners": f"PLAINTEXT://127.0.0.1:{b.port},SSL://127.0.0.1:{b.ssl_port},MTLS://127.0.0.1:{b.mtls_port}",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SSL:SSL,MTLS:SSL",
        "listener.name.mtls.ssl.client.auth": "required",  # this listener only
        "ssl.keystore.type": "PEM", "ssl.keystore.location": str(pki["broker0"]), "ssl.key.password": "keypass",
        "ssl.truststore.type": "PEM", "ssl.truststore.location": str(pki["ca"]),
        "group.initial.rebalance.delay.ms": 0,
    })
    b.start()
    yield b
    b.stop()


def _roundtrip(conf: dict, topic: str, n: int = 20) -> list[bytes]:
    producer = Producer({**conf, "acks": "all"})
    for i in range(n):
        producer.produce(topic, value=f"m{i}".encode())
    assert producer.flush(20) == 0
    consumer = Consumer({**conf, "group.id": f"g-{uuid.uuid4().hex[:6]}", "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    got = []
    try:
        wait_until(lambda: _poll_into(consumer, got) >= n, 30, interval=0, what=f"{n} records consumed")
    finally:
        consumer.close()
    return got


def _poll_into(consumer, got) -> int:
    msg = consumer.poll(0.5)
    if msg is not None and msg.error() is None:
        got.append(msg.value())
    return len(got)


def test_confluent_kafka_over_ssl(ssl_broker, pki):
    conf = {"bootstrap.servers": f"127.0.0.1:{ssl_broker.ssl_port}", "security.protocol": "SSL",
            "ssl.ca.location": str(pki["ca"])}
    topic = f"ssl-{uuid.uuid4().hex[:6]}"
    admin = AdminClient(conf)
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(20)
    meta = admin.list_topics(timeout=10)
    assert {b.port for b in meta.brokers.values()} == {ssl_broker.ssl_port}  # the SSL listener's address
    assert _roundtrip(conf, topic) == [f"m{i}".encode() for i in range(20)]


def test_ssl_client_that_does_not_trust_the_ca_fails(ssl_broker, pki):
    conf = {"bootstrap.servers": f"127.0.0.1:{ssl_broker.ssl_port}", "security.protocol": "SSL",
            "ssl.ca.location": str(pki["client-cert"])}  # not the CA
    with pytest.raises(KafkaException):
        AdminClient(conf).list_topics(timeout=3)


def _configs(*args: str) -> None:
    env = dict(os.environ, PYTHONPATH=str(REPO / "platform"))
    subprocess.run([sys.executable, "-m", "logbus.cli", "configs", *args], check=True, env=env, timeout=60,
                   capture_output=True)


PLAIN_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
              'password="admin-pw" user_admin="admin-pw" user_carol="carol-pw";')


@pytest.fixture(scope="module")
def sasl_broker(tmp_path_factory, pki):
    b = BrokerProcess(tmp_path_factory.mktemp("sasl-broker"), num_partitions=1)
    b.sasl_ssl, b.sasl_plain = free_port(), free_port()
    # standalone: SCRAM credentials in the first log dir, written before the broker starts
    _configs("--log-dir", str(b.log_dir), "--alter", "--entity-type", "users", "--entity-name", "alice",
             "--add-config", "SCRAM-SHA-512=[password=alice-pw],SCRAM-SHA-256=[password=alice-pw]")
    b.settings.update({
        "listeners": f"PLAINTEXT://127.0.0.1:{b.port},SASL_SSL://127.0.0.1:{b.sasl_ssl},"
                     f"SASL_PLAINTEXT://127.0.0.1:{b.sasl_plain}",
        "ssl.keystore.type": "PEM", "ssl.keystore.location": str(pki["broker0"]), "ssl.key.password": "keypass",
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
        "listener.name.sasl_ssl.plain.sasl.jaas.config": PLAIN_JAAS,
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS,
        "group.initial.rebalance.delay.ms": 0,
    })
    b.start()
    yield b
    b.stop()


@pytest.mark.parametrize("mechanism, user, password", [("SCRAM-SHA-512", "alice", "alice-pw"),
                                                       ("PLAIN", "carol", "carol-pw")])
def test_confluent_kafka_over_sasl_ssl(sasl_broker, pki, mechanism, user, password):
    conf = {"bootstrap.servers": f"127.0.0.1:{sasl_broker.sasl_ssl}", "security.protocol": "SASL_SSL",
            "ssl.ca.location": str(pki["ca"]), "sasl.mechanism": mechanism, "sasl.username": user,
            "sasl.password": password}
    topic = f"sasl-{uuid.uuid4().hex[:6]}"
    admin = AdminClient(conf)
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(20)
    assert _roundtrip(conf, topic) == [f"m{i}".encode() for i in range(20)]


def test_kafka_python_over_sasl_plaintext_with_scram(sasl_broker):
    from kafka import KafkaConsumer, KafkaProducer

    conf = {"bootstrap_servers": f"127.0.0.1:{sasl_broker.sasl_plain}", "security_protocol": "SASL_PLAINTEXT",
            "sasl_mechanism": "SCRAM-SHA-256", "sasl_plain_username": "alice", "sasl_plain_password": "alice-pw"}
    topic = f"kp-{uuid.uuid4().hex[:6]}"
    producer = KafkaProducer(acks="all", **conf)
    sent = [producer.send(topic, f"k{i}".encode()) for i in range(10)]
    producer.flush(30)
    offsets = [future.get(timeout=30).offset for future in sent]  # a refused send raises here, with its error
    producer.close()
    assert offsets == list(range(10))
    # CI saw this consumer get nothing within 10 s once, on a machine loaded by the whole-topology tests (not
    # reproduced since, also beside four busy loops): the group's join and first fetch get 30 s
    # It failed so twice more in this session's clean-clone CI runs (early in the suite, beside other tests; the
    # broker's log showed no request of note), never locally: the client's own log is kept for the next time.
    seen: list[str] = []
    handler = logging.Handler(logging.DEBUG)
    handler.emit = lambda record: seen.append(f"{record.name} {record.levelname} {record.getMessage()}"[:300])
    client_log = logging.getLogger("kafka")
    level = client_log.level
    client_log.addHandler(handler)
    client_log.setLevel(logging.DEBUG)
    try:
        consumer = KafkaConsumer(topic, auto_offset_reset="earliest", consumer_timeout_ms=30000, **conf)
        got = []
        for message in consumer:  # consumer_timeout_ms ends the loop if records are missing
            got.append(message.value)
            if len(got) == 10:
                break
        consumer.close()
    finally:
        client_log.removeHandler(handler)
        client_log.setLevel(level)
    assert got == [f"k{i}".encode() for i in range(10)], (
        sasl_broker.log_text()[-3000:] + "\n--- kafka-python ---\n" + "\n".join(seen[-80:]))


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-512", "PLAIN"])
def test_wrong_password_fails_quickly(sasl_broker, pki, mechanism):
    conf = {"bootstrap.servers": f"127.0.0.1:{sasl_broker.sasl_ssl}", "security.protocol": "SASL_SSL",
            "ssl.ca.location": str(pki["ca"]), "sasl.mechanism": mechanism, "sasl.username": "alice",
            "sasl.password": "wrong"}
    errors = []
    start = time.monotonic()
    producer = Producer({**conf, "error_cb": errors.append})
    # the client's error callback reports the authentication failure, with the broker's message, at once
    wait_until(lambda: producer.poll(0.1) is not None and any(e.code() == KafkaError._AUTHENTICATION
                                                              for e in errors), 5, interval=0,
               what="an authentication error")
    assert time.monotonic() - start < 5
    message = next(e.str() for e in errors if e.code() == KafkaError._AUTHENTICATION)
    assert "Invalid username or password" in message or "invalid credentials" in message


def test_sasl_authentication_failed_error_then_close(sasl_broker):
    client = RawClient("127.0.0.1", sasl_broker.sasl_plain)
    try:
        hs = client.request(17, 1, request_module(17, 1).SaslHandshakeRequest(mechanism="PLAIN"))
        assert int(hs.error_code) == 0 and set(hs.mechanisms) == {"PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"}
        auth = client.request(36, 2, request_module(36, 2).SaslAuthenticateRequest(auth_bytes=b"\0carol\0bad"))
        assert int(auth.error_code) == 58 and "Invalid username or password" in auth.error_message
        with pytest.raises((ConnectionError, OSError)):
            client.request(18, 0, request_module(18, 0).ApiVersionsRequest())
    finally:
        client.close()


def test_requests_before_authentication_close_the_connection(sasl_broker):
    client = RawClient("127.0.0.1", sasl_broker.sasl_plain)
    try:
        versions = client.request(18, 0, request_module(18, 0).ApiVersionsRequest())  # allowed
        assert {17, 36} <= {k.api_key for k in versions.api_keys}
        with pytest.raises((ConnectionError, OSError)):
            client.request(3, 1, request_module(3, 1).MetadataRequest(topics=()))
    finally:
        client.close()
    unknown = RawClient("127.0.0.1", sasl_broker.sasl_plain)
    try:
        hs = unknown.request(17, 1, request_module(17, 1).SaslHandshakeRequest(mechanism="GSSAPI"))
        assert int(hs.error_code) == 33  # UNSUPPORTED_SASL_MECHANISM
    finally:
        unknown.close()


def test_ssl_client_auth_required_on_one_listener(ssl_broker, pki):
    base = {"bootstrap.servers": f"127.0.0.1:{ssl_broker.mtls_port}", "security.protocol": "SSL",
            "ssl.ca.location": str(pki["ca"])}
    with pytest.raises(KafkaException):  # no client certificate: the handshake fails
        AdminClient(base).list_topics(timeout=4)
    meta = AdminClient({**base, "ssl.certificate.location": str(pki["client-cert"]),
                        "ssl.key.location": str(pki["client-key"])}).list_topics(timeout=10)
    assert {b.port for b in meta.brokers.values()} == {ssl_broker.mtls_port}
    # the other SSL listener does not ask for a certificate
    assert AdminClient({**base, "bootstrap.servers": f"127.0.0.1:{ssl_broker.ssl_port}"}).list_topics(timeout=10)


def test_plaintext_bytes_on_the_ssl_port_get_no_kafka_answer(ssl_broker):
    with socket.create_connection(("127.0.0.1", ssl_broker.ssl_port), timeout=5) as sock:
        # an ApiVersions v0 request in the clear
        sock.sendall(bytes.fromhex("0000000e00120000000000010004746573747465"[:36]))
        sock.settimeout(5)
        data = b""
        try:
            while chunk := sock.recv(4096):
                data += chunk
        except (ConnectionError, socket.timeout):
            pass
    assert not data.startswith(b"\x00\x00")  # a TLS alert or nothing, never a Kafka frame


@pytest.fixture(scope="module")
def secure_cluster(tmp_path_factory, pki):
    """Three brokers: PLAINTEXT for the harness, SECURE (inter-broker) with SASL_SSL and SCRAM-SHA-512; the
    brokers' user is created in ZooKeeper before any broker runs (how Kafka bootstraps its first users)."""
    from support import ZooKeeperProcess

    base = tmp_path_factory.mktemp("secure-cluster")
    zk = ZooKeeperProcess(base / "zk").start()
    for user, password in [("broker", "broker-pw"), ("alice", "alice-pw")]:
        _configs("--zookeeper", zk.connect + "/secure", "--alter", "--entity-type", "users", "--entity-name", user,
                 "--add-config", f"SCRAM-SHA-512=[password={password}]")
    brokers = []
    try:
        for i in range(3):
            b = BrokerProcess(base / f"b{i}", broker_id=i)
            b.secure, b.metrics_port = free_port(), free_port()
            b.settings.update({
                "listeners": f"PLAINTEXT://127.0.0.1:{b.port},SECURE://127.0.0.1:{b.secure}",
                "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SECURE:SASL_SSL",
                "inter.broker.listener.name": "SECURE",
                "sasl.enabled.mechanisms": "SCRAM-SHA-512",
                "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
                "listener.name.secure.scram-sha-512.sasl.jaas.config":
                    'org.apache.kafka.common.security.scram.ScramLoginModule required username="broker" '
                    'password="broker-pw";',
                "listener.name.secure.ssl.keystore.type": "PEM",
                "listener.name.secure.ssl.keystore.location": str(pki[f"broker{i}"]),
                "listener.name.secure.ssl.key.password": "keypass",
                "listener.name.secure.ssl.truststore.location": str(pki["ca"]),
                "zookeeper.connect": zk.connect + "/secure", "zookeeper.session.timeout.ms": 6000,
                "replica.fetch.wait.max.ms": 100, "replica.lag.time.max.ms": 5000,
                # KIP-368: sessions of 4 s, renewed by the brokers' own connections and by the clients
                "listener.name.secure.scram-sha-512.connections.max.reauth.ms": 4000,
                "metrics.listener": f"http://127.0.0.1:{b.metrics_port}",
                "group.initial.rebalance.delay.ms": 0,
            })
            brokers.append(b.start())
        yield brokers
    finally:
        for b in brokers:
            b.stop()
        zk.stop()


def test_cluster_replicates_over_the_secure_inter_broker_listener(secure_cluster, pki):
    brokers = secure_cluster
    conf = {"bootstrap.servers": ",".join(f"127.0.0.1:{b.secure}" for b in brokers),
            "security.protocol": "SASL_SSL", "ssl.ca.location": str(pki["ca"]), "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.username": "alice", "sasl.password": "alice-pw"}
    admin = AdminClient(conf)
    wait_until(lambda: len(admin.list_topics(timeout=10).brokers) == 3, 30, what="three brokers")
    topic = f"sec-{uuid.uuid4().hex[:6]}"
    admin.create_topics([NewTopic(topic, 2, 3, config={"min.insync.replicas": "3"})])[topic].result(30)
    # min.insync.replicas=3 with acks=all: answered only once both followers fetched over SASL_SSL
    assert _roundtrip({**conf, "message.timeout.ms": 20000}, topic, 50) and True
    parts = admin.list_topics(topic, timeout=10).topics[topic].partitions.values()
    assert all(sorted(p.isrs) == [0, 1, 2] for p in parts)

    # credentials altered through one broker (AlterUserScramCredentials -> ZooKeeper) work on every broker
    from confluent_kafka.admin import ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion
    admin.alter_user_scram_credentials([UserScramCredentialUpsertion(
        "erin", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), b"erin-pw")])["erin"].result(10)
    for b in brokers:
        erin = {**conf, "bootstrap.servers": f"127.0.0.1:{b.secure}", "sasl.username": "erin",
                "sasl.password": "erin-pw"}
        assert AdminClient(erin).list_topics(timeout=10).brokers


def _expired_connections_killed(broker) -> float:
    import requests

    body = requests.get(f"http://127.0.0.1:{broker.metrics_port}/metrics", timeout=10).text
    return sum(float(line.rsplit(" ", 1)[1]) for line in body.splitlines()
               if line.startswith("kafka_server_socketservermetrics_expired_connections_killed_total"))


def test_inter_broker_sessions_are_renewed(secure_cluster, pki):
    """Sessions on the inter-broker listener last 4 s (connections.max.reauth.ms): the followers' fetchers
    renew theirs before they end, so replication with min.insync.replicas=3 goes on over three lifetimes and no
    broker closes a connection for an expired session."""
    brokers = secure_cluster
    conf = {"bootstrap.servers": ",".join(f"127.0.0.1:{b.secure}" for b in brokers),
            "security.protocol": "SASL_SSL", "ssl.ca.location": str(pki["ca"]), "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.username": "alice", "sasl.password": "alice-pw"}
    topic = f"sec-renew-{uuid.uuid4().hex[:6]}"
    admin = AdminClient(conf)
    admin.create_topics([NewTopic(topic, 1, 3, config={"min.insync.replicas": "3"})])[topic].result(30)
    killed = [_expired_connections_killed(b) for b in brokers]
    producer = Producer({**conf, "acks": "all", "message.timeout.ms": 20000})
    acked = []
    end = time.monotonic() + 12
    while time.monotonic() < end:
        producer.produce(topic, value=b"x", on_delivery=lambda err, msg: acked.append(err))
        producer.poll(0.2)
    assert producer.flush(30) == 0
    assert acked and all(err is None for err in acked), acked[:5]
    parts = admin.list_topics(topic, timeout=10).topics[topic].partitions.values()
    assert all(sorted(p.isrs) == [0, 1, 2] for p in parts)
    assert [_expired_connections_killed(b) for b in brokers] == killed, [b.log_text()[-1500:] for b in brokers]


def test_sasl_requests_on_a_plaintext_listener_are_errors_not_disconnects(sasl_broker):
    client = RawClient("127.0.0.1", sasl_broker.port)
    try:
        hs = client.request(17, 1, request_module(17, 1).SaslHandshakeRequest(mechanism="PLAIN"))
        assert int(hs.error_code) == 34  # ILLEGAL_SASL_STATE
        auth = client.request(36, 2, request_module(36, 2).SaslAuthenticateRequest(auth_bytes=b"\0a\0b"))
        assert int(auth.error_code) == 34
        assert client.request(3, 1, request_module(3, 1).MetadataRequest(topics=())).brokers  # still served
    finally:
        client.close()


def test_scram_credentials_managed_through_the_admin_api(sasl_broker, pki):
    from confluent_kafka.admin import (ScramCredentialInfo, ScramMechanism, UserScramCredentialDeletion,
                                       UserScramCredentialUpsertion)

    admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{sasl_broker.sasl_ssl}", "security.protocol": "SASL_SSL",
                         "ssl.ca.location": str(pki["ca"]), "sasl.mechanism": "SCRAM-SHA-512",
                         "sasl.username": "alice", "sasl.password": "alice-pw"})
    info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192)
    admin.alter_user_scram_credentials([UserScramCredentialUpsertion("dave", info, b"dave-pw")])["dave"].result(10)
    described = admin.describe_user_scram_credentials(["dave"])["dave"].result(10)
    assert [(c.mechanism, c.iterations) for c in described.scram_credential_infos] == \
        [(ScramMechanism.SCRAM_SHA_512, 8192)]
    with pytest.raises(KafkaException):  # unknown user: RESOURCE_NOT_FOUND
        admin.describe_user_scram_credentials(["nobody"])["nobody"].result(10)
    # the new user logs in with the password whose salted form the client sent
    dave = {"bootstrap.servers": f"127.0.0.1:{sasl_broker.sasl_plain}", "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "dave", "sasl.password": "dave-pw"}
    assert AdminClient(dave).list_topics(timeout=10).brokers
    admin.alter_user_scram_credentials([UserScramCredentialDeletion("dave", ScramMechanism.SCRAM_SHA_512)])[
        "dave"].result(10)
    errors = []
    producer = Producer({**dave, "error_cb": errors.append})
    wait_until(lambda: producer.poll(0.1) is not None and any(e.code() == KafkaError._AUTHENTICATION
                                                              for e in errors), 5, interval=0,
               what="dave refused after the deletion")


def test_logbus_configs_through_a_broker(sasl_broker, pki, tmp_path):
    props = tmp_path / "client.properties"
    props.write_text("security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-512\n"
                     "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required "
                     "username=\"alice\" password=\"alice-pw\";\n"
                     f"ssl.truststore.type=PEM\nssl.truststore.location={pki['ca']}\n")
    common = ["--bootstrap-server", f"127.0.0.1:{sasl_broker.sasl_ssl}", "--command-config", str(props),
              "--entity-type", "users", "--entity-name", "frank"]
    _configs(*common, "--alter", "--add-config", "SCRAM-SHA-256=[iterations=4096,password=frank-pw]")
    env = dict(os.environ, PYTHONPATH=str(REPO / "platform"))
    out = subprocess.run([sys.executable, "-m", "logbus.cli", "configs", *common, "--describe"], env=env,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and "SCRAM-SHA-256=iterations=4096" in out.stdout, out.stderr
    frank = {"bootstrap.servers": f"127.0.0.1:{sasl_broker.sasl_plain}", "security.protocol": "SASL_PLAINTEXT",
             "sasl.mechanism": "SCRAM-SHA-256", "sasl.username": "frank", "sasl.password": "frank-pw"}
    assert AdminClient(frank).list_topics(timeout=10).brokers


def test_sasl_handshake_v0_bare_tokens(sasl_broker):
    """SaslHandshake v0 (old clients): the tokens follow as bare size-prefixed frames, no Kafka header."""
    import struct

    client = RawClient("127.0.0.1", sasl_broker.sasl_plain)
    try:
        assert int(client.request(17, 0, request_module(17, 0).SaslHandshakeRequest(mechanism="PLAIN")).error_code) == 0
        token = b"\0carol\0carol-pw"
        client.send_bytes(struct.pack(">i", len(token)) + token)
        assert client.recv_frame() == b""  # PLAIN's empty challenge: authenticated
        assert client.request(3, 1, request_module(3, 1).MetadataRequest(topics=())).brokers
    finally:
        client.close()
    bad = RawClient("127.0.0.1", sasl_broker.sasl_plain)
    try:
        bad.request(17, 0, request_module(17, 0).SaslHandshakeRequest(mechanism="PLAIN"))
        token = b"\0carol\0wrong"
        bad.send_bytes(struct.pack(">i", len(token)) + token)
        with pytest.raises((ConnectionError, OSError)):  # v0 has no error frame: the connection closes
            bad.recv_frame()
    finally:
        bad.close()


def test_describe_configs_hides_passwords(sasl_broker):
    from confluent_kafka.admin import ConfigResource

    admin = AdminClient({"bootstrap.servers": sasl_broker.bootstrap})
    resource = ConfigResource(ConfigResource.Type.BROKER, "0")
    entries = admin.describe_configs([resource])[resource].result(10)
    assert entries["ssl.key.password"].is_sensitive and entries["ssl.key.password"].value is None
    assert entries["ssl.keystore.location"].value is not None and not entries["ssl.keystore.location"].is_sensitive
    assert "keypass" not in repr({k: e.value for k, e in entries.items()})


@pytest.fixture(scope="module")
def jks_broker(tmp_path_factory, pki):
    """An SSL listener with Kafka's default store type (JKS, left unset): a JKS key store made by keytool from
    broker0's PEM (through PKCS12) and a JKS trust store holding the test CA; client certificates required."""
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.serialization import load_pem_private_key, pkcs12

    d = tmp_path_factory.mktemp("jks")
    key = load_pem_private_key(pki["broker0-key"].read_bytes(), None)
    chain = [x509.load_pem_x509_certificate(pki[n].read_bytes()) for n in ("broker0-cert", "ca")]
    (d / "broker.p12").write_bytes(pkcs12.serialize_key_and_certificates(
        b"broker", key, chain[0], chain[1:], serialization.BestAvailableEncryption(b"p12-pw")))
    for args in (["-importkeystore", "-srckeystore", "broker.p12", "-srcstoretype", "PKCS12", "-srcstorepass",
                  "p12-pw", "-srcalias", "broker", "-destkeystore", "broker.jks", "-deststoretype", "JKS",
                  "-deststorepass", "store-pw", "-destkeypass", "key-pw", "-destalias", "broker"],
                 ["-importcert", "-noprompt", "-storetype", "JKS", "-alias", "ca", "-file", str(pki["ca"]),
                  "-keystore", "trust.jks", "-storepass", "trust-pw"]):
        subprocess.run(["keytool", *args], cwd=d, check=True, capture_output=True, timeout=60)
    b = BrokerProcess(tmp_path_factory.mktemp("jks-broker"), num_partitions=1)
    b.ssl_port = free_port()
    b.settings.update({
        "listeners": f"PLAINTEXT://127.0.0.1:{b.port},SSL://127.0.0.1:{b.ssl_port}",
        "ssl.keystore.location": str(d / "broker.jks"), "ssl.keystore.password": "store-pw",
        "ssl.key.password": "key-pw",
        "ssl.truststore.location": str(d / "trust.jks"), "ssl.truststore.password": "trust-pw",
        "ssl.client.auth": "required",
        "group.initial.rebalance.delay.ms": 0,
    })
    b.start()
    yield b
    b.stop()


def test_confluent_kafka_over_ssl_with_jks_stores(jks_broker, pki):
    base = {"bootstrap.servers": f"127.0.0.1:{jks_broker.ssl_port}", "security.protocol": "SSL",
            "ssl.ca.location": str(pki["ca"])}
    with pytest.raises(KafkaException):  # no client certificate: refused by the required client auth
        AdminClient(base).list_topics(timeout=4)
    conf = {**base, "ssl.certificate.location": str(pki["client-cert"]), "ssl.key.location": str(pki["client-key"])}
    topic = f"jks-{uuid.uuid4().hex[:6]}"
    admin = AdminClient(conf)
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(20)
    assert {b.port for b in admin.list_topics(timeout=10).brokers.values()} == {jks_broker.ssl_port}
    assert _roundtrip(conf, topic) == [f"m{i}".encode() for i in range(20)]
