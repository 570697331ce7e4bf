"""Brokers that log in to each other with OIDC client credentials (Kafka's OAuthBearerLoginCallbackHandler) on an
inter-broker listener whose tokens are checked against the identity provider's JWKS (KIP-768): two brokers
replicate with min.insync.replicas=2 while their 5-s tokens expire and are renewed (a new token, a new
connection), and a broker whose client secret is refused stays up, out of the ISR, and says why in its log."""

import time
import uuid

import pytest
import requests
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from oidc_provider import OidcProvider
from support import BrokerProcess, ZooKeeperProcess, free_port, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

VALIDATOR = "org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler"
LOGIN = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginCallbackHandler"


def _broker(base, i: int, zk, idp, secret: str) -> BrokerProcess:
    b = BrokerProcess(base / f"b{i}", broker_id=i)
    b.secure, b.metrics_port = free_port(), free_port()
    b.settings.update({
        "listeners": f"PLAINTEXT://127.0.0.1:{b.port},SECURE://127.0.0.1:{b.secure}",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SECURE:SASL_PLAINTEXT",
        "inter.broker.listener.name": "SECURE",
        "sasl.enabled.mechanisms": "OAUTHBEARER",
        "sasl.mechanism.inter.broker.protocol": "OAUTHBEARER",
        "listener.name.secure.oauthbearer.sasl.jaas.config":
            "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required "
            f'clientId="broker" clientSecret="{secret}" scope="logbus";',
        "listener.name.secure.oauthbearer.sasl.server.callback.handler.class": VALIDATOR,
        "listener.name.secure.oauthbearer.sasl.oauthbearer.jwks.endpoint.url": idp.jwks_url,
        "listener.name.secure.oauthbearer.sasl.oauthbearer.expected.audience": "logbus",
        "listener.name.secure.oauthbearer.sasl.oauthbearer.expected.issuer": idp.issuer,
        "listener.name.secure.oauthbearer.sasl.login.callback.handler.class": LOGIN,
        "listener.name.secure.oauthbearer.sasl.oauthbearer.token.endpoint.url": idp.token_url,
        "zookeeper.connect": zk.connect + "/oidc", "zookeeper.session.timeout.ms": 6000,
        "replica.fetch.wait.max.ms": 100, "replica.lag.time.max.ms": 5000,
        "metrics.listener": f"http://127.0.0.1:{b.metrics_port}",
    })
    return b


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    base = tmp_path_factory.mktemp("oidc-cluster")
    idp = OidcProvider({"broker": "broker-secret"}, lifetimes={"broker": 5})
    zk = ZooKeeperProcess(base / "zk").start()
    brokers = []
    try:
        for i in range(2):
            brokers.append(_broker(base, i, zk, idp, "broker-secret").start())
        yield idp, zk, base, brokers
    finally:
        for b in brokers:
            b.stop()
        zk.stop()
        idp.stop()


def _metric(broker, name: str) -> float:
    body = requests.get(f"http://127.0.0.1:{broker.metrics_port}/metrics", timeout=10).text
    return sum(float(line.rsplit(" ", 1)[1]) for line in body.splitlines() if line.startswith(name))


def test_brokers_replicate_with_oidc_tokens_renewed_before_they_expire(cluster):
    idp, _, _, brokers = cluster
    conf = {"bootstrap.servers": ",".join(b.bootstrap for b in brokers)}
    admin = AdminClient(conf)
    wait_until(lambda: len(admin.list_topics(timeout=10).brokers) == 2, 30, what="two brokers")
    topic = f"oidc-{uuid.uuid4().hex[:6]}"
    admin.create_topics([NewTopic(topic, 2, 2, config={"min.insync.replicas": "2"})])[topic].result(30)
    issued = idp.issued
    killed = sum(_metric(b, "kafka_server_socketservermetrics_expired_connections_killed_total") for b in brokers)
    producer = Producer({**conf, "acks": "all", "message.timeout.ms": 20000})
    acked = []
    end = time.monotonic() + 14  # nearly three lifetimes of the brokers' 5-s tokens
    while time.monotonic() < end:
        producer.produce(topic, value=b"x", on_delivery=lambda err, msg: acked.append(err))
        producer.poll(0.2)
    assert producer.flush(30) == 0
    # min.insync.replicas=2 with acks=all: each one answered only once the follower fetched it over SECURE
    assert len(acked) > 40 and all(err is None for err in acked), acked[:5]
    parts = admin.list_topics(topic, timeout=10).topics[topic].partitions.values()
    assert all(sorted(p.isrs) == [0, 1] for p in parts)
    assert idp.issued - issued >= 4, idp.issued - issued  # each broker took new tokens as the old ones aged
    after = sum(_metric(b, "kafka_server_socketservermetrics_expired_connections_killed_total") for b in brokers)
    assert after == killed, [b.log_text()[-1500:] for b in brokers]  # renewed before the end, never cut off


def test_a_broker_whose_secret_is_refused_stays_up_out_of_the_isr(cluster):
    idp, zk, base, brokers = cluster
    conf = {"bootstrap.servers": ",".join(b.bootstrap for b in brokers)}
    bad = _broker(base, 2, zk, idp, "wrong-secret").start()
    try:
        admin = AdminClient(conf)
        wait_until(lambda: len(admin.list_topics(timeout=10).brokers) == 3, 30, what="three brokers")
        topic = f"oidc-bad-{uuid.uuid4().hex[:6]}"
        admin.create_topics([NewTopic(topic, num_partitions=1, replica_assignment=[[0, 2]])])[topic].result(30)
        try:
            wait_until(lambda: "HTTP Error 401" in bad.log_text(), 30, what="the refused login in the broker's log")
        except TimeoutError:
            raise AssertionError(bad.log_text()[-3000:]) from None
        assert bad.proc.poll() is None  # still running, retrying
        # replica.lag.time.max.ms (5 s, checked every 2.5 s): the follower that never fetched leaves the ISR
        wait_until(lambda: admin.list_topics(topic, timeout=10).topics[topic].partitions[0].isrs == [0], 30,
                   what="broker 2 out of the ISR")
        assert bad.log_text().count("HTTP Error 401") == 1  # told once while it stays the same, not every retry
        assert bad.proc.poll() is None
    finally:
        bad.stop()
