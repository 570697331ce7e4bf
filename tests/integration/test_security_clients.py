"""Outside clients over SSL and SASL (issue 18 items 6 and 7) against one broker whose certificates were made by
``logbus certs`` (item 5): kcat over SASL_SSL (SCRAM-SHA-512 and PLAIN; a wrong password failing fast), aiokafka
and kafka-python over SSL and SASL_SSL, confluent-kafka with a client certificate and SASL on a listener that
requires one. The Python clients' settings come from settings.security.ClientSecurity (Kafka's or librdkafka's
names, as the services take them). What test_security_listeners.py covers (confluent-kafka over SSL/SASL_SSL
with a test CA, SCRAM administration, raw protocol checks) is not repeated.

Debian's kcat links librdkafka 2.0.2, whose SCRAM client-final message repeats the client nonce (fixed in
librdkafka 2.6.1); logbus checks the nonce as RFC 5802 and Kafka 4.x do, so SCRAM with kcat runs it on the
librdkafka of the confluent-kafka wheel (LD_LIBRARY_PATH), and the refusal of the old one is a test of its own."""

import asyncio
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from settings.security import ClientSecurity
from support import REPO, BrokerProcess, free_port, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]

KEY_PASSWORD = "broker-key-pw"
PLAIN_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
              'user_carol="carol-pw";')


def logbus(*argv: str, cwd=None) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(REPO / "platform"))
    return subprocess.run([sys.executable, "-m", "logbus.cli", *argv], env=env, cwd=cwd, capture_output=True,
                          text=True, timeout=60)


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    """``logbus certs`` (the real command): the broker's key store with an encrypted key, a client's."""
    d = tmp_path_factory.mktemp("secrets") / "pki"
    made = logbus("certs", "--dir", str(d), "--service", "broker0:localhost,127.0.0.1", "--service", "client",
                  "--key-type", "ec-p256", "--key-password", f"pass:{KEY_PASSWORD}")
    assert made.returncode == 0, made.stderr
    return d


@pytest.fixture(scope="module")
def broker(tmp_path_factory, pki):
    b = BrokerProcess(tmp_path_factory.mktemp("secure-clients"), num_partitions=1)
    b.ssl, b.sasl_ssl, b.mtls = free_port(), free_port(), free_port()
    made = logbus("configs", "--log-dir", str(b.log_dir), "--alter", "--entity-type", "users", "--entity-name",
                  "alice", "--add-config", "SCRAM-SHA-512=[password=alice-pw],SCRAM-SHA-256=[password=alice-pw]")
    assert made.returncode == 0, made.stderr
    b.settings.update({
        "listeners": f"PLAINTEXT://127.0.0.1:{b.port},SSL://127.0.0.1:{b.ssl},SASL_SSL://127.0.0.1:{b.sasl_ssl},"
                     f"MTLS://127.0.0.1:{b.mtls}",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_SSL:SASL_SSL,MTLS:SASL_SSL",
        "listener.name.mtls.ssl.client.auth": "required",
        # the files logbus certs wrote, as Kafka's docs configure them
        "ssl.keystore.type": "PEM", "ssl.keystore.location": str(pki / "broker0.pem"),
        "ssl.key.password": KEY_PASSWORD,
        "ssl.truststore.type": "PEM", "ssl.truststore.location": str(pki / "ca.pem"),
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
        "listener.name.sasl_ssl.plain.sasl.jaas.config": PLAIN_JAAS,
        "listener.name.mtls.plain.sasl.jaas.config": PLAIN_JAAS,
        "group.initial.rebalance.delay.ms": 0,
    })
    b.start()
    yield b
    b.stop()


def new_topic(broker) -> str:
    topic = f"sec-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})  # kept alive until the answer
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(20)
    return topic


def security(broker, pki, protocol: str, mechanism: str | None = None, user: str = "alice",
             password: str = "alice-pw", **extra: str) -> tuple[str, ClientSecurity]:
    port = {"SSL": broker.ssl, "SASL_SSL": broker.sasl_ssl}[protocol]
    props = {"security.protocol": protocol, "ssl.truststore.type": "PEM",
             "ssl.truststore.location": str(pki / "ca.pem"), **extra}
    if mechanism:
        props.update({"sasl.mechanism": mechanism, "sasl.username": user, "sasl.password": password})
    return f"127.0.0.1:{port}", ClientSecurity.from_properties(props)


def kcat(*args: str, stdin: str | None = None, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(["/usr/bin/kcat", *args], input=stdin, capture_output=True, text=True, timeout=30, env=env)


# ---- logbus certs -----------------------------------------------------------------------------------------------
def test_certs_refuses_a_directory_git_would_commit(tmp_path):
    repo = tmp_path / "repo"
    subprocess.run(["git", "init", "-q", str(repo)], check=True, timeout=30)
    refused = logbus("certs", "--dir", "pki", "--service", "a", "--key-type", "ec-p256", cwd=repo)
    assert refused.returncode == 1 and refused.stderr.count("\n") == 1
    assert "not git-ignored" in refused.stderr and not (repo / "pki").exists()
    (repo / ".gitignore").write_text("/pki/\n")
    made = logbus("certs", "--dir", "pki", "--service", "a", "--key-type", "ec-p256", cwd=repo)
    assert made.returncode == 0, made.stderr
    status = subprocess.run(["git", "-C", str(repo), "status", "--porcelain", "--untracked-files=all"],
                            capture_output=True, text=True, check=True, timeout=30).stdout
    assert status.splitlines() == ["?? .gitignore"]  # no key can be added by accident


def test_broker_serves_ssl_with_logbus_certs_to_confluent_kafka(broker, pki):
    where, sec = security(broker, pki, "SSL")
    conf = {"bootstrap.servers": where, **sec.librdkafka()}
    assert conf["ssl.endpoint.identification.algorithm"] == "https"  # the SAN 127.0.0.1 is checked
    topic = new_topic(broker)
    producer = Producer({**conf, "acks": "all"})
    for i in range(5):
        producer.produce(topic, f"ssl-{i}".encode())
    assert producer.flush(20) == 0
    assert _consume(conf, topic, 5) == [f"ssl-{i}".encode() for i in range(5)]


def test_sasl_ssl_consumer_reads_a_backlog_larger_than_one_fetch(broker, pki):
    """Fetch responses over 64 KiB over TLS: asyncio's sendfile fallback swapped the transport's protocol while
    it ran, so a pipelined request arriving meanwhile closed the connection ("SSL connection closed by peer") and
    a consumer of a backlog read nothing, ever (the secure topology's loads)."""
    where, sec = security(broker, pki, "SASL_SSL", "SCRAM-SHA-512")
    conf = {"bootstrap.servers": where, **sec.librdkafka()}
    topic = new_topic(broker)
    producer = Producer({**conf, "linger.ms": 5})
    for i in range(20000):
        producer.produce(topic, b"%06d" % i + b"x" * 300)
        if i % 5000 == 0:
            producer.poll(0)
    assert producer.flush(30) == 0
    got = _consume(conf, topic, 20000)
    assert len(got) == 20000 and got[-1].startswith(b"019999")


def _consume(conf: dict, topic: str, n: int) -> list[bytes]:
    consumer = Consumer({**conf, "group.id": f"g-{uuid.uuid4().hex[:6]}", "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    got: list[bytes] = []
    try:
        def poll():
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                got.append(msg.value())
            return len(got) >= n
        wait_until(poll, 30, interval=0, what=f"{n} records")
    finally:
        consumer.close()
    return got


# ---- kcat ---------------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def newer_librdkafka(tmp_path_factory) -> dict:
    """An environment in which /usr/bin/kcat loads the librdkafka of the confluent-kafka wheel (2.16) instead of
    Debian's 2.0.2: librdkafka before 2.6.1 repeats the client nonce in SCRAM's client-final message, which Kafka
    4.x (and logbus) refuse (RFC 5802; CVE-2024-56128), while PLAIN works with both."""
    import confluent_kafka

    libs = Path(confluent_kafka.__file__).parent.parent / "confluent_kafka.libs"
    found = sorted(libs.glob("librdkafka-*.so.1"))
    assert found, f"no librdkafka in {libs}"
    d = tmp_path_factory.mktemp("librdkafka")
    (d / "librdkafka.so.1").symlink_to(found[0])
    env = dict(os.environ, LD_LIBRARY_PATH=str(d))
    version = kcat("-V", env=env).stdout
    assert f"librdkafka {confluent_kafka.libversion()[0]}" in version, version
    return env


def _kcat_sasl(broker, pki, mechanism: str, user: str, password: str) -> list[str]:
    return ["-b", f"127.0.0.1:{broker.sasl_ssl}", "-X", "security.protocol=SASL_SSL",
            "-X", f"sasl.mechanisms={mechanism}", "-X", f"sasl.username={user}", "-X", f"sasl.password={password}",
            "-X", f"ssl.ca.location={pki / 'ca.pem'}"]


@pytest.mark.parametrize("mechanism, user, password, librdkafka", [
    ("SCRAM-SHA-512", "alice", "alice-pw", "2.16"),
    ("PLAIN", "carol", "carol-pw", "system"),
])
def test_kcat_sasl_ssl_produce_consume(broker, pki, newer_librdkafka, mechanism, user, password, librdkafka):
    env = newer_librdkafka if librdkafka == "2.16" else None
    auth = _kcat_sasl(broker, pki, mechanism, user, password)
    topic = new_topic(broker)
    lines = "".join(f"k{i}:value {i}\n" for i in range(50))
    produced = kcat(*auth, "-P", "-t", topic, "-K:", stdin=lines, env=env)
    assert produced.returncode == 0, produced.stderr
    out = kcat(*auth, "-C", "-t", topic, "-o", "beginning", "-e", "-f", "%o|%k|%s\n", env=env)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [f"{i}|k{i}|value {i}" for i in range(50)]


def test_kcat_with_debians_librdkafka_is_refused_scram_as_by_kafka_4(broker, pki):
    """librdkafka < 2.6.1 sends r=<client nonce><client nonce><server nonce>: refused, quickly, with a message."""
    assert "librdkafka 2.0." in kcat("-V").stdout  # the kcat package of this image; newer ones pass SCRAM
    start = time.monotonic()
    out = kcat(*_kcat_sasl(broker, pki, "SCRAM-SHA-512", "alice", "alice-pw"), "-P", "-t", "none", stdin="x\n")
    assert out.returncode != 0 and time.monotonic() - start < 5
    assert ("SASL authentication error: Authentication failed: Invalid client nonce in the final client message."
            in out.stderr), out.stderr


def test_kcat_wrong_password_fails_fast_with_an_authentication_error(broker, pki, newer_librdkafka):
    topic = new_topic(broker)
    start = time.monotonic()
    out = kcat(*_kcat_sasl(broker, pki, "SCRAM-SHA-512", "alice", "wrong"), "-P", "-t", topic, stdin="x\n",
               env=newer_librdkafka)
    elapsed = time.monotonic() - start
    assert out.returncode != 0
    assert "SASL authentication error: Authentication failed during authentication due to invalid credentials " \
           "with SASL mechanism SCRAM-SHA-512" in out.stderr, out.stderr
    assert elapsed < 5, f"kcat took {elapsed:.1f} s to fail"


# ---- aiokafka -----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("protocol, mechanism, user, password", [
    ("SSL", None, None, None),
    ("SASL_SSL", "SCRAM-SHA-256", "alice", "alice-pw"),
    ("SASL_SSL", "PLAIN", "carol", "carol-pw"),
])
def test_aiokafka_producer_and_consumer(broker, pki, protocol, mechanism, user, password):
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

    where, sec = security(broker, pki, protocol, mechanism, user or "", password or "")
    kwargs = sec.kafka_python()
    topic = new_topic(broker)

    async def roundtrip() -> list[bytes]:
        producer = AIOKafkaProducer(bootstrap_servers=where, acks="all", **kwargs)
        await producer.start()
        try:
            for i in range(10):
                await producer.send_and_wait(topic, f"aio-{i}".encode())
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(topic, bootstrap_servers=where, auto_offset_reset="earliest",
                                    group_id=f"g-{uuid.uuid4().hex[:6]}", **kwargs)
        await consumer.start()
        got: list[bytes] = []
        try:
            async with asyncio.timeout(20):
                async for message in consumer:
                    got.append(message.value)
                    if len(got) == 10:
                        break
        finally:
            await consumer.stop()
        return got

    assert asyncio.run(roundtrip()) == [f"aio-{i}".encode() for i in range(10)]


def test_aiokafka_wrong_password_is_an_authentication_error(broker, pki, caplog):
    from aiokafka import AIOKafkaProducer
    from aiokafka.errors import KafkaConnectionError, SaslAuthenticationFailed

    where, sec = security(broker, pki, "SASL_SSL", "SCRAM-SHA-256", "alice", "wrong")

    async def start() -> None:
        producer = AIOKafkaProducer(bootstrap_servers=where, **sec.kafka_python())
        try:
            await producer.start()
        finally:
            await producer.stop()

    begin = time.monotonic()
    with pytest.raises((SaslAuthenticationFailed, KafkaConnectionError)):  # aiokafka: "Unable to bootstrap"
        asyncio.run(start())
    assert time.monotonic() - begin < 10
    # the broker's error, as aiokafka logs it
    assert "[Error 58] SaslAuthenticationFailed: Authentication failed during authentication due to invalid " \
           "credentials with SASL mechanism SCRAM-SHA-256" in caplog.text, caplog.text


# ---- kafka-python -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("protocol, mechanism", [("SSL", None), ("SASL_SSL", "SCRAM-SHA-512")])
def test_kafka_python_producer_and_consumer(broker, pki, protocol, mechanism):
    from kafka import KafkaConsumer, KafkaProducer

    where, sec = security(broker, pki, protocol, mechanism)
    kwargs = sec.kafka_python()
    topic = new_topic(broker)
    producer = KafkaProducer(bootstrap_servers=where, acks="all", **kwargs)
    for i in range(10):
        producer.send(topic, f"kp-{i}".encode())
    producer.flush(20)
    producer.close()
    consumer = KafkaConsumer(topic, bootstrap_servers=where, auto_offset_reset="earliest",
                             consumer_timeout_ms=10000, **kwargs)
    got = []
    for message in consumer:  # consumer_timeout_ms ends the loop if records are missing
        got.append(message.value)
        if len(got) == 10:
            break
    consumer.close()
    assert got == [f"kp-{i}".encode() for i in range(10)]


# ---- confluent-kafka with a client certificate and SASL ------------------------------------------------------------
def test_confluent_kafka_sasl_ssl_with_a_client_certificate(broker, pki):
    # Kafka's Java names, the PEM key store logbus certs wrote for the client (ClientSecurity -> librdkafka)
    sec = ClientSecurity.from_properties({
        "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.jaas.config": 'org.apache.kafka.common.security.scram.ScramLoginModule required username="alice" '
                            'password="alice-pw";',
        "ssl.truststore.type": "PEM", "ssl.truststore.location": str(pki / "ca.pem"),
        "ssl.keystore.type": "PEM", "ssl.keystore.location": str(pki / "client.pem"),
        "ssl.key.password": KEY_PASSWORD})
    conf = {"bootstrap.servers": f"127.0.0.1:{broker.mtls}", **sec.librdkafka()}
    topic = new_topic(broker)
    producer = Producer({**conf, "acks": "all"})
    for i in range(5):
        producer.produce(topic, f"mtls-{i}".encode())
    assert producer.flush(20) == 0
    assert _consume(conf, topic, 5) == [f"mtls-{i}".encode() for i in range(5)]
    # the same SASL user without the certificate: the TLS handshake is refused on this listener
    bare = {k: v for k, v in conf.items() if k not in ("ssl.certificate.location", "ssl.key.location")}
    with pytest.raises(KafkaException):
        AdminClient(bare).list_topics(timeout=2)
