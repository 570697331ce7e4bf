"""SASL/GSSAPI (Kerberos) on a broker listener, against a real MIT KDC started here (tests/kdc.py), judged by
kafka-python (python-gssapi) and kcat (librdkafka with Cyrus SASL, which runs kinit itself from a keytab): the
principal is the Kerberos name's short name by Kafka's rules (ACLs see ``User:alice``), a bad token or a ticket
for a service principal the broker does not hold is refused with Kafka's error, and the broker serves on."""

import json
import os
import subprocess
import sys
import textwrap
import uuid

import pytest
from kdc import Kdc
from rawclient import RawClient, request_module
from support import REPO, BrokerProcess, free_port

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]
HOST = "127.0.0.1"


@pytest.fixture(scope="module")
def kdc(tmp_path_factory):
    k = Kdc(tmp_path_factory.mktemp("kdc")).start()
    k.broker_keytab = k.principal(f"kafka/{HOST}")
    k.alice_keytab = k.principal("alice")
    k.bob_keytab = k.principal("bob/batch")
    yield k
    k.stop()


@pytest.fixture(scope="module")
def broker(tmp_path_factory, kdc):
    b = BrokerProcess(tmp_path_factory.mktemp("gssapi"), num_partitions=1)
    b.kerberos = free_port()
    b.settings.update({
        "listeners": f"PLAINTEXT://{HOST}:{b.port},KERBEROS://{HOST}:{b.kerberos}",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,KERBEROS:SASL_PLAINTEXT",
        "sasl.enabled.mechanisms": "GSSAPI",
        "sasl.kerberos.service.name": "kafka",
        # Kafka's rules: bob/batch@REALM becomes "batch-bob"; everyone else of the realm their first component
        "sasl.kerberos.principal.to.local.rules": "RULE:[2:$2-$1](.*-bob)s/^.*$/batch-bob/,DEFAULT",
        "listener.name.kerberos.gssapi.sasl.jaas.config":
            "com.sun.security.auth.module.Krb5LoginModule required useKeyTab=true storeKey=true "
            f'keyTab="{kdc.broker_keytab}" principal="kafka/{HOST}@{kdc.realm}";',
        "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
        "super.users": "User:ANONYMOUS",  # the harness, on PLAINTEXT
    })
    b.env = kdc.env
    b.start()
    yield b
    b.stop()


KAFKA_PYTHON = textwrap.dedent("""
    import json, sys
    from kafka import KafkaProducer, KafkaConsumer
    bootstrap, topic, domain = sys.argv[1], sys.argv[2], sys.argv[3]
    conf = dict(bootstrap_servers=bootstrap, security_protocol="SASL_PLAINTEXT", sasl_mechanism="GSSAPI",
                sasl_kerberos_service_name="kafka", sasl_kerberos_domain_name=domain)
    producer = KafkaProducer(**conf, bootstrap_timeout_ms=8000)  # a refused login fails in 8 s, not 30
    for i in range(10):
        producer.send(topic, f"m{i}".encode()).get(timeout=30)
    producer.close()
    consumer = KafkaConsumer(topic, **conf, auto_offset_reset="earliest", consumer_timeout_ms=10000,
                             group_id="gssapi-" + topic)
    print(json.dumps([m.value.decode() for m in consumer]))
    consumer.close()
""")


def _kafka_python(env: dict, bootstrap: str, topic: str, domain: str = HOST) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", KAFKA_PYTHON, bootstrap, topic, domain], env=env,
                          capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)


def _allow(broker, principal: str, topic: str) -> None:
    out = subprocess.run([sys.executable, "-m", "logbus.cli", "acls", "--bootstrap-server", broker.bootstrap, "--add",
                          "--allow-principal", principal, "--operation", "All", "--topic", topic, "--group", "*"],
                         env={**os.environ, "PYTHONPATH": str(REPO / "platform")}, capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr


def test_kafka_python_authenticates_with_a_kerberos_ticket(broker, kdc):
    topic = f"krb-{uuid.uuid4().hex[:6]}"
    _allow(broker, "User:alice", topic)
    env = kdc.kinit("alice", kdc.alice_keytab)
    out = _kafka_python(env, f"{HOST}:{broker.kerberos}", topic)
    assert out.returncode == 0, out.stderr[-3000:]
    assert json.loads(out.stdout.strip().splitlines()[-1]) == [f"m{i}" for i in range(10)]
    assert "alice@LOGBUS.TEST authenticated as User:alice" in broker.log_text()


def test_kcat_authenticates_from_a_keytab_and_the_name_rules_apply(broker, kdc):
    topic = f"krb-kcat-{uuid.uuid4().hex[:6]}"
    _allow(broker, "User:batch-bob", topic)
    conf = ["-b", f"{HOST}:{broker.kerberos}", "-X", "security.protocol=SASL_PLAINTEXT",
            "-X", "sasl.mechanisms=GSSAPI", "-X", "sasl.kerberos.service.name=kafka",
            "-X", f"sasl.kerberos.keytab={kdc.bob_keytab}", "-X", f"sasl.kerberos.principal=bob/batch@{kdc.realm}"]
    env = {**kdc.env, "KRB5CCNAME": f"FILE:{kdc.dir / 'kcat.ccache'}"}
    out = subprocess.run(["kcat", *conf, "-P", "-t", topic], input="one\ntwo\nthree\n", env=env,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr[-3000:]
    got = subprocess.run(["kcat", *conf, "-C", "-t", topic, "-o", "beginning", "-e", "-q"], env=env,
                         capture_output=True, text=True, timeout=60)
    assert got.returncode == 0, got.stderr[-3000:]
    assert got.stdout.split() == ["one", "two", "three"]
    assert f"bob/batch@{kdc.realm} authenticated as User:batch-bob" in broker.log_text()


def test_bad_tokens_and_tickets_for_another_service_are_refused_and_the_broker_serves_on(broker, kdc):
    client = RawClient(HOST, broker.kerberos)
    try:
        hs = client.request(17, 1, request_module(17, 1).SaslHandshakeRequest(mechanism="GSSAPI"))
        assert int(hs.error_code) == 0 and list(hs.mechanisms) == ["GSSAPI"]
        auth = client.request(36, 2, request_module(36, 2).SaslAuthenticateRequest(auth_bytes=b"not a GSS token"))
        assert int(auth.error_code) == 58  # SASL_AUTHENTICATION_FAILED, Kafka's message
        assert auth.error_message == ("Authentication failed during authentication due to invalid credentials with "
                                      "SASL mechanism GSSAPI")
        with pytest.raises((ConnectionError, OSError)):
            client.request(18, 0, request_module(18, 0).ApiVersionsRequest())
    finally:
        client.close()
    # a valid ticket, for a service principal this broker's keytab does not hold
    kdc.principal("kafka/localhost")
    out = _kafka_python(kdc.kinit("alice", kdc.alice_keytab), f"{HOST}:{broker.kerberos}", "krb-other",
                        domain="localhost")
    assert out.returncode != 0
    assert "GSSAPI authentication failed" in broker.log_text()
    assert broker.proc.poll() is None
    topic = f"krb-after-{uuid.uuid4().hex[:6]}"
    _allow(broker, "User:alice", topic)
    again = _kafka_python(kdc.kinit("alice", kdc.alice_keytab), f"{HOST}:{broker.kerberos}", topic)
    assert again.returncode == 0, again.stderr[-3000:]


def test_an_acl_is_checked_against_the_short_name(broker, kdc):
    topic = f"krb-denied-{uuid.uuid4().hex[:6]}"  # no ACL for User:alice on it
    out = _kafka_python(kdc.kinit("alice", kdc.alice_keytab), f"{HOST}:{broker.kerberos}", topic)
    assert out.returncode != 0
    assert "TopicAuthorizationFailed" in out.stderr or "TOPIC_AUTHORIZATION_FAILED" in out.stderr.upper(), \
        out.stderr[-2000:]


def test_brokers_replicate_over_a_kerberos_inter_broker_listener(tmp_path, kdc):
    """Two brokers authenticate to each other with GSSAPI (their keytab, a ticket for kafka/127.0.0.1 from the
    KDC): acks=all with min.insync.replicas=2 is answered only once the follower fetched over that listener."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic
    from support import ZooKeeperProcess, wait_until

    zk = ZooKeeperProcess(tmp_path / "zk").start()
    brokers = []
    try:
        for i in range(2):
            b = BrokerProcess(tmp_path / f"b{i}", broker_id=i)
            b.kerberos = free_port()
            b.settings.update({
                "listeners": f"PLAINTEXT://{HOST}:{b.port},KERBEROS://{HOST}:{b.kerberos}",
                "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,KERBEROS:SASL_PLAINTEXT",
                "inter.broker.listener.name": "KERBEROS",
                "sasl.enabled.mechanisms": "GSSAPI", "sasl.mechanism.inter.broker.protocol": "GSSAPI",
                "sasl.kerberos.service.name": "kafka",
                "listener.name.kerberos.gssapi.sasl.jaas.config":
                    "com.sun.security.auth.module.Krb5LoginModule required useKeyTab=true storeKey=true "
                    f'keyTab="{kdc.broker_keytab}" principal="kafka/{HOST}@{kdc.realm}";',
                "zookeeper.connect": zk.connect + "/krb", "zookeeper.session.timeout.ms": 6000,
                "replica.fetch.wait.max.ms": 100, "replica.lag.time.max.ms": 5000,
            })
            b.env = kdc.env
            brokers.append(b.start())
        conf = {"bootstrap.servers": ",".join(b.bootstrap for b in brokers)}
        admin = AdminClient(conf)
        wait_until(lambda: len(admin.list_topics(timeout=10).brokers) == 2, 30, what="two brokers")
        topic = f"krb-repl-{uuid.uuid4().hex[:6]}"
        admin.create_topics([NewTopic(topic, 2, 2, config={"min.insync.replicas": "2"})])[topic].result(30)
        producer = Producer({**conf, "acks": "all", "message.timeout.ms": 20000})
        acked = []
        for i in range(50):
            producer.produce(topic, value=b"%d" % i, on_delivery=lambda err, msg: acked.append(err))
        assert producer.flush(30) == 0
        assert len(acked) == 50 and all(err is None for err in acked), acked[:5]
        parts = admin.list_topics(topic, timeout=10).topics[topic].partitions.values()
        assert all(sorted(p.isrs) == [0, 1] for p in parts)
        assert any(f"kafka/{HOST}@{kdc.realm} authenticated as User:kafka" in b.log_text() for b in brokers)
    finally:
        for b in brokers:
            b.stop()
        zk.stop()
