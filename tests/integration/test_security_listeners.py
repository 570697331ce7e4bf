"""Secure listeners (issue 18, item 1): SSL with PEM key stores, confluent-kafka over TLS, and a 3-broker
cluster whose inter-broker listener is secured (replication over it: acks=all answered)."""

import socket
import uuid

import pytest
from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from security_certs import make_pki
from support import BrokerProcess, Cluster, free_port, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_pki(tmp_path_factory.mktemp("pki"), ["broker0", "broker1", "broker2", "client"])


@pytest.fixture(scope="module")
def ssl_broker(tmp_path_factory, pki):
    b = BrokerProcess(tmp_path_factory.mktemp("ssl-broker"), num_partitions=1)
    b.ssl_port = free_port()
    b.settings.update({
        "listeners": f"PLAINTEXT://127.0.0.1:{b.port},SSL://127.0.0.1:{b.ssl_port}",
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
        AdminClient(conf).list_topics(timeout=5)


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
    """Three brokers: PLAINTEXT for the harness, SECURE (inter-broker) with TLS."""
    from support import ZooKeeperProcess

    base = tmp_path_factory.mktemp("secure-cluster")
    zk = ZooKeeperProcess(base / "zk").start()
    brokers = []
    try:
        for i in range(3):
            b = BrokerProcess(base / f"b{i}", broker_id=i)
            b.secure = free_port()
            b.settings.update({
                "listeners": f"PLAINTEXT://127.0.0.1:{b.port},SECURE://127.0.0.1:{b.secure}",
                "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SECURE:SSL",
                "inter.broker.listener.name": "SECURE",
                "listener.name.secure.ssl.keystore.type": "PEM",
                "listener.name.secure.ssl.keystore.location": str(pki[f"broker{i}"]),
                "listener.name.secure.ssl.key.password": "keypass",
                "listener.name.secure.ssl.truststore.location": str(pki["ca"]),
                "zookeeper.connect": zk.connect + "/secure", "zookeeper.session.timeout.ms": 6000,
                "replica.fetch.wait.max.ms": 100, "replica.lag.time.max.ms": 5000,
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
    conf = {"bootstrap.servers": ",".join(f"127.0.0.1:{b.secure}" for b in brokers), "security.protocol": "SSL",
            "ssl.ca.location": str(pki["ca"])}
    admin = AdminClient(conf)
    wait_until(lambda: len(admin.list_topics(timeout=10).brokers) == 3, 30, what="three brokers")
    topic = f"sec-{uuid.uuid4().hex[:6]}"
    admin.create_topics([NewTopic(topic, 2, 3, config={"min.insync.replicas": "3"})])[topic].result(30)
    # min.insync.replicas=3 with acks=all: answered only once both followers fetched over the TLS listener
    assert _roundtrip({**conf, "message.timeout.ms": 20000}, topic, 50) and True
    parts = admin.list_topics(topic, timeout=10).topics[topic].partitions.values()
    assert all(sorted(p.isrs) == [0, 1, 2] for p in parts)
