"""The schema registry secured (issue 18, items 3 and 4): HTTPS listeners (PEM and PKCS12 key stores, a required
client certificate), BASIC authentication with users in a Jetty PropertyFileLoginModule file named by a JAAS config
(Confluent's SCHEMA_REGISTRY_OPTS way, or logbus's authentication.jaas.file), read/write/admin roles, the store's
Kafka client on a SASL_SSL listener with SCRAM-SHA-512, and request bodies capped while they are read.

Real processes and real clients: confluent-kafka's SchemaRegistryClient and AvroSerializer, curl, raw sockets."""

from __future__ import annotations

import hashlib
import json
import os
import socket
import ssl
import subprocess
import sys
import time

import pytest
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.schema_registry.error import SchemaRegistryError
from confluent_kafka.serialization import MessageField, SerializationContext
from security_certs import make_pki
from support import REPO, BrokerProcess, RegistryProcess, free_port, wait_for_port

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]
CURL = "/usr/bin/curl"
SCHEMA = json.dumps({"type": "record", "name": "Signup", "fields": [{"name": "user", "type": "string"}]})
CAP = 16384


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_pki(tmp_path_factory.mktemp("pki"), ["broker0", "registry", "client"])


@pytest.fixture(scope="module")
def users(tmp_path_factory):
    """A PropertyFileLoginModule password file and a JAAS config naming it in section SchemaRegistry-Props."""
    d = tmp_path_factory.mktemp("users")
    (d / "password-file").write_text(
        "# user: password[,role ...]\n"
        "admin: admin-pw,admin\n"
        f"writer: MD5:{hashlib.md5(b'writer-pw').hexdigest()},write\n"
        "reader: reader-pw,read\n"
        "outsider: outsider-pw,guest\n")
    (d / "jaas.conf").write_text(
        "SchemaRegistry-Props {\n"
        f'  org.eclipse.jetty.jaas.spi.PropertyFileLoginModule required file="{d / "password-file"}" '
        'debug="false";\n};\n')
    return d


def _configs(*args: str) -> None:
    env = dict(os.environ, PYTHONPATH=str(REPO / "platform"))
    subprocess.run([sys.executable, "-m", "logbus.cli", "configs", *args], check=True, env=env, timeout=60,
                   capture_output=True)


@pytest.fixture(scope="module")
def broker(tmp_path_factory, pki):
    """PLAINTEXT for the harness and the read-only registry, SASL_SSL (SCRAM-SHA-512) for the primary's store."""
    b = BrokerProcess(tmp_path_factory.mktemp("broker"), num_partitions=1)
    b.sasl_ssl = free_port()
    _configs("--log-dir", str(b.log_dir), "--alter", "--entity-type", "users", "--entity-name", "registry",
             "--add-config", "SCRAM-SHA-512=[password=registry-kafka-pw]")
    b.settings.update({
        "listeners": f"PLAINTEXT://127.0.0.1:{b.port},SASL_SSL://127.0.0.1:{b.sasl_ssl}",
        "ssl.keystore.type": "PEM", "ssl.keystore.location": str(pki["broker0"]), "ssl.key.password": "keypass",
        "sasl.enabled.mechanisms": "SCRAM-SHA-512",
    })
    b.start()
    yield b
    b.stop()


def start_registry(workdir, bootstrap: str, listeners, env: dict | None = None, **settings) -> RegistryProcess:
    """A registry process (support.RegistryProcess) with these listeners; ``listeners`` gets the ports:
    a list of schemes, the first one is waited for. ``env`` is added to the process's environment."""
    reg = RegistryProcess(workdir, bootstrap, **settings)
    reg.ports = [reg.port] + [free_port() for _ in listeners[1:]]
    reg.urls = [f"{scheme}://127.0.0.1:{port}" for scheme, port in zip(listeners, reg.ports)]
    reg.settings["listeners"] = ",".join(reg.urls)
    saved = {k: os.environ.get(k) for k in (env or {})}
    os.environ.update(env or {})
    try:
        reg.start()
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k)
            else:
                os.environ[k] = v
    for port in reg.ports[1:]:
        wait_for_port("127.0.0.1", port, timeout=20, proc=reg.proc)
    return reg


@pytest.fixture(scope="module")
def primary(tmp_path_factory, broker, pki, users):
    """HTTPS and HTTP, BASIC with the users of the JAAS config named in SCHEMA_REGISTRY_OPTS (Confluent's way),
    roles split, the store on the SASL_SSL listener as user ``registry``."""
    reg = start_registry(
        tmp_path_factory.mktemp("primary"), f"127.0.0.1:{broker.sasl_ssl}", ["https", "http"],
        env={"SCHEMA_REGISTRY_OPTS": f"-Xmx256m -Djava.security.auth.login.config={users / 'jaas.conf'}"},
        ssl_keystore_type="PEM", ssl_keystore_location=str(pki["registry"]), ssl_key_password="keypass",
        authentication_method="BASIC", authentication_realm="SchemaRegistry-Props",
        authentication_roles="admin,write,read", authentication_roles_write="write",
        authentication_roles_admin="admin", max_request_bytes=str(CAP), kafkastore_topic_replication_factor="1",
        kafkastore_security_protocol="SASL_SSL", kafkastore_sasl_mechanism="SCRAM-SHA-512",
        kafkastore_sasl_jaas_config='org.apache.kafka.common.security.scram.ScramLoginModule required '
                                    'username="registry" password="registry-kafka-pw";',
        kafkastore_ssl_truststore_location=str(pki["ca"]))
    yield reg
    reg.stop()


def client(reg, pki, user: str, password: str) -> SchemaRegistryClient:
    # confluent-kafka's Python client takes basic.auth.user.info alone: it refuses basic.auth.credentials.source
    # ("Unrecognized properties"), the Java serializers' companion key
    return SchemaRegistryClient({"url": reg.urls[0], "basic.auth.user.info": f"{user}:{password}",
                                 "ssl.ca.location": str(pki["ca"])})


def curl(*args: str) -> tuple[int, dict, str]:
    """(HTTP status, response headers lower-cased, body) of one curl call."""
    out = subprocess.run([CURL, "-sS", "-i", "--max-time", "20", *args], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    head, _, body = out.stdout.replace("\r\n", "\n").partition("\n\n")
    lines = head.splitlines()
    headers = dict((k.strip().lower(), v.strip()) for k, _, v in (line.partition(":") for line in lines[1:]))
    return int(lines[0].split()[1]), headers, body


def test_serializer_through_https_and_basic_auth(primary, pki, broker):
    writer = client(primary, pki, "writer", "writer-pw")  # an MD5: credential
    sid = writer.register_schema("signups-value", Schema(SCHEMA, "AVRO"))
    serializer = AvroSerializer(writer, SCHEMA)
    ctx = SerializationContext("signups", MessageField.VALUE)
    data = serializer({"user": "ann"}, ctx)
    assert data[0] == 0 and int.from_bytes(data[1:5], "big") == sid
    reader = client(primary, pki, "reader", "reader-pw")
    assert AvroDeserializer(reader)(data, ctx) == {"user": "ann"}
    assert reader.lookup_schema("signups-value", Schema(SCHEMA, "AVRO")).schema_id == sid  # a lookup reads
    with pytest.raises(SchemaRegistryError) as denied:  # a read-only user cannot register
        reader.register_schema("other-value", Schema(SCHEMA, "AVRO"))
    assert denied.value.http_status_code == 403 and denied.value.error_code == 403
    with pytest.raises(SchemaRegistryError) as wrong:
        client(primary, pki, "writer", "nope").get_subjects()
    assert wrong.value.http_status_code == 401
    # the store wrote through the SASL_SSL listener as "registry": the record is in _schemas
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "check", "enable.auto.commit": False})
    try:
        low, high = consumer.get_watermark_offsets(TopicPartition("_schemas", 0), timeout=10)
        assert high >= 1
    finally:
        consumer.close()


def test_curl_with_and_without_credentials(primary, pki):
    https, http = primary.urls
    ca = ["--cacert", str(pki["ca"])]
    status, headers, body = curl(*ca, f"{https}/subjects")
    assert status == 401 and headers["www-authenticate"] == 'Basic realm="SchemaRegistry-Props"'
    assert json.loads(body) == {"error_code": 401, "message": "Unauthorized"}
    assert curl(*ca, "-u", "reader:reader-pw", f"{https}/subjects")[0] == 200
    assert curl(*ca, "-u", "reader:wrong", f"{https}/subjects")[0] == 401
    assert curl(*ca, "-u", "ghost:reader-pw", f"{https}/subjects")[0] == 401
    assert curl(*ca, "-u", "outsider:outsider-pw", f"{https}/subjects")[0] == 403  # not in authentication.roles
    assert curl(f"{http}/subjects")[0] == 401  # the plain listener asks the same
    assert curl("-u", "admin:admin-pw", f"{http}/")[0] == 200
    post = ["-X", "POST", "-H", "Content-Type: application/vnd.schemaregistry.v1+json",
            "--data", json.dumps({"schema": SCHEMA})]
    status, _, body = curl(*ca, "-u", "reader:reader-pw", *post, f"{https}/subjects/curl-value/versions")
    assert status == 403 and json.loads(body)["error_code"] == 403
    status, _, body = curl(*ca, "-u", "writer:writer-pw", *post, f"{https}/subjects/curl-value/versions")
    assert status == 200 and "id" in json.loads(body)
    # /config and /mode are the admin role's
    put = ["-X", "PUT", "-H", "Content-Type: application/json", "--data", '{"compatibility": "FULL"}']
    assert curl(*ca, "-u", "writer:writer-pw", *put, f"{https}/config/curl-value")[0] == 403
    assert curl(*ca, "-u", "admin:admin-pw", *put, f"{https}/config/curl-value")[0] == 200
    assert curl(*ca, "-u", "reader:reader-pw", "-X", "DELETE", f"{https}/subjects/curl-value")[0] == 403


@pytest.fixture(scope="module")
def mtls_follower(tmp_path_factory, broker, pki, users, primary):
    """A READONLY registry on HTTPS only, PKCS12 key store, client certificate required, users from
    authentication.jaas.file; its store on the PLAINTEXT listener."""
    from cryptography.hazmat.primitives.serialization import BestAvailableEncryption, load_pem_private_key, pkcs12
    from cryptography.x509 import load_pem_x509_certificate

    work = tmp_path_factory.mktemp("follower")
    key = load_pem_private_key(pki["registry-key"].read_bytes(), None)
    cert = load_pem_x509_certificate(pki["registry-cert"].read_bytes())
    (work / "registry.p12").write_bytes(pkcs12.serialize_key_and_certificates(
        b"registry", key, cert, None, BestAvailableEncryption(b"storepass")))
    reg = start_registry(work, broker.bootstrap, ["https"], mode="READONLY",
                         ssl_keystore_type="PKCS12", ssl_keystore_location=str(work / "registry.p12"),
                         ssl_keystore_password="storepass", ssl_truststore_location=str(pki["ca"]),
                         ssl_client_authentication="REQUIRED", authentication_method="BASIC",
                         authentication_realm="SchemaRegistry-Props",
                         authentication_jaas_file=str(users / "jaas.conf"))
    yield reg
    reg.stop()


def test_client_certificate_required_and_readonly_follower(mtls_follower, primary, pki):
    url = mtls_follower.urls[0]
    no_cert = subprocess.run([CURL, "-sS", "--max-time", "10", "--cacert", str(pki["ca"]), "-u", "reader:reader-pw",
                              f"{url}/subjects"], capture_output=True, text=True, timeout=30)
    assert no_cert.returncode != 0  # the TLS handshake fails without a client certificate
    cert = ["--cacert", str(pki["ca"]), "--cert", str(pki["client-cert"]), "--key", str(pki["client-key"])]
    assert curl(*cert, f"{url}/subjects")[0] == 401  # a certificate is not a login
    sid = client(primary, pki, "writer", "writer-pw").register_schema("follow-value", Schema(SCHEMA, "AVRO"))
    follower = SchemaRegistryClient({"url": url, "basic.auth.user.info": "reader:reader-pw",
                                     "ssl.ca.location": str(pki["ca"]),
                                     "ssl.certificate.location": str(pki["client-cert"]),
                                     "ssl.key.location": str(pki["client-key"])})
    deadline = time.monotonic() + 20
    while True:  # the follower reads what the primary wrote
        try:
            assert follower.get_schema(sid).schema_str
            break
        except SchemaRegistryError:
            assert time.monotonic() < deadline, "the follower did not read the primary's schema"
            time.sleep(0.2)
    status, _, body = curl(*cert, "-u", "admin:admin-pw", "-X", "POST", "-H", "Content-Type: application/json",
                           "--data", json.dumps({"schema": SCHEMA}), f"{url}/subjects/x-value/versions")
    assert status == 422 and json.loads(body)["error_code"] == 42205  # still read-only behind the login


def _raw_http(port: int, head: bytes) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    sock.sendall(head)
    return sock


def _read_response(sock: socket.socket, timeout: float) -> bytes:
    sock.settimeout(timeout)
    data = b""
    try:
        while b"\r\n\r\n" not in data or len(data.partition(b"\r\n\r\n")[2]) < 10:
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
    except socket.timeout:
        pass
    return data


def test_chunked_body_over_the_cap_is_refused_while_it_is_sent(primary):
    http_port = primary.ports[1]
    auth = b"Authorization: Basic " + __import__("base64").b64encode(b"writer:writer-pw") + b"\r\n"
    head = (b"POST /subjects/big-value/versions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" + auth
            + b"Transfer-Encoding: chunked\r\n\r\n")
    sock = _raw_http(http_port, head)
    chunk = b'{"schema": "' + b"x" * 1000
    sent, refused_at = 0, None
    try:
        # 4 x the cap, never the final zero-length chunk: a server reading the whole body would never answer
        for _ in range(4 * CAP // 1000):
            try:
                sock.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            except (BrokenPipeError, ConnectionResetError):
                break
            sent += len(chunk)
            if sent > CAP and refused_at is None:
                response = _read_response(sock, 3)
                assert response.startswith(b"HTTP/1.1 413"), response[:200]
                body = json.loads(response.partition(b"\r\n\r\n")[2].split(b"\r\n")[-1] or b"{}")
                assert body["error_code"] == 413 and "max.request.bytes" in body["message"]
                refused_at = sent
                break
    finally:
        sock.close()
    assert refused_at is not None and refused_at <= CAP + 1000, f"answered after {refused_at} bytes"
    # a body that says it is larger than the cap is refused on its headers alone, nothing of it sent
    sock = _raw_http(http_port, head.replace(b"Transfer-Encoding: chunked", b"Content-Length: 100000000"))
    try:
        assert _read_response(sock, 3).startswith(b"HTTP/1.1 413")
    finally:
        sock.close()
    # a Content-Length that lies low: only that many bytes are the body, the rest is no request (400, closed)
    sock = _raw_http(http_port, head.replace(b"Transfer-Encoding: chunked", b"Content-Length: 12")
                     + b'{"schema": "' + b"x" * (4 * CAP))
    try:
        answer = _read_response(sock, 3)
        assert answer.startswith(b"HTTP/1.1 4"), answer[:100]
    finally:
        sock.close()
    assert curl("-u", "reader:reader-pw", f"http://127.0.0.1:{http_port}/subjects")[0] == 200  # still serving


def test_bad_security_settings_are_config_errors(tmp_path, pki, users):
    env = dict(os.environ, PYTHONPATH=str(REPO / "platform"))
    cases = {
        "ssl.keystore.type=JKS": "JKS",
        "authentication.method=BASIC": "JAAS",
        f"authentication.method=BASIC\nauthentication.jaas.file={users / 'password-file'}": "not a JAAS config",
        f"authentication.method=BASIC\nauthentication.realm=Other\nauthentication.jaas.file={users / 'jaas.conf'}":
            "no section 'Other'",
        "kafkastore.security.protocol=SASL_SSL\nkafkastore.sasl.mechanism=SCRAM-SHA-512": "needs a user",
    }
    for i, (extra, expected) in enumerate(cases.items()):
        config = tmp_path / f"r{i}.properties"
        config.write_text(f"listeners=https://127.0.0.1:{free_port()}\nkafkastore.bootstrap.servers=127.0.0.1:1\n"
                          f"ssl.keystore.location={pki['registry']}\nssl.key.password=keypass\n{extra}\n")
        out = subprocess.run([sys.executable, "-m", "logbus.cli", "schema-registry", str(config)], env=env,
                             capture_output=True, text=True, timeout=30)
        assert out.returncode == 2 and expected in out.stderr, (extra, out.stderr)


def test_https_listener_speaks_tls_only(primary, pki):
    context = ssl.create_default_context(cafile=str(pki["ca"]))
    with socket.create_connection(("127.0.0.1", primary.ports[0]), timeout=10) as raw:
        with context.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
            assert tls.version() in ("TLSv1.2", "TLSv1.3")
            assert "registry" in str(tls.getpeercert()["subject"])


@pytest.fixture(scope="module")
def audit_service(tmp_path_factory, broker, primary, pki, users):
    """The audit service on HTTPS with BASIC (the registry's password file) and a bearer token; its reader on the
    SASL_SSL listener as SCRAM user ``audit``, its registry client on the primary over HTTPS as ``reader``."""
    from support import LogbusProcess

    _configs("--bootstrap-server", broker.bootstrap, "--alter", "--entity-type", "users", "--entity-name", "audit",
             "--add-config", "SCRAM-SHA-512=[password=audit-kafka-pw]")
    work = tmp_path_factory.mktemp("audit")
    (work / "token.properties").write_text("token=tok-7f3a\n")
    port = free_port()
    (work / "audit.properties").write_text(
        f"listeners=https://127.0.0.1:{port}\n"
        "config.providers=file\n"
        "config.providers.file.class=org.apache.kafka.common.config.provider.FileConfigProvider\n"
        f"ssl.keystore.location={pki['registry']}\nssl.key.password=keypass\n"
        f"authentication.method=BASIC,BEARER\nauthentication.users.file={users / 'password-file'}\n"
        f"authentication.bearer.tokens=${{file:{work / 'token.properties'}:token}}\n"
        "security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-512\n"
        'sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username="audit" '
        'password="audit-kafka-pw";\n'
        f"ssl.truststore.location={pki['ca']}\n"
        f"schema.registry.url={primary.urls[0]}\nschema.registry.basic.auth.user.info=reader:reader-pw\n"
        "schema.registry.basic.auth.credentials.source=USER_INFO\n"
        f"schema.registry.ssl.ca.location={pki['ca']}\n"
        f"audit.cluster.live.bootstrap.servers=127.0.0.1:{broker.sasl_ssl}\n")
    proc = LogbusProcess(work, "audit-service", ["audit-service", str(work / "audit.properties")]).start()
    try:
        wait_for_port("127.0.0.1", port, timeout=60, proc=proc.proc)
        proc.url = f"https://127.0.0.1:{port}"
        yield proc
    finally:
        proc.stop()


def test_audit_service_requires_a_login(audit_service, broker, primary, pki):
    from audit.events import AUDIT_TOPIC, SCHEMA_STR
    from confluent_kafka import Producer

    url, ca = audit_service.url, ["--cacert", str(pki["ca"])]
    assert curl(*ca, f"{url}/health")[0] == 200  # open, for health checks
    for path in ("/api/report", "/api/status", "/", "/plot.png"):
        status, headers, body = curl(*ca, url + path)
        assert status == 401 and headers["www-authenticate"] == 'Basic realm="logbus-audit"', path
        assert json.loads(body)["error_code"] == 401
    assert curl(*ca, "-u", "reader:wrong", f"{url}/api/report")[0] == 401
    assert curl(*ca, "-H", "Authorization: Bearer not-it", f"{url}/api/report")[0] == 401
    assert curl(*ca, "-H", "Authorization: Bearer tok-7f3a", f"{url}/api/report")[0] == 200
    assert curl(*ca, "-u", "reader:reader-pw", f"{url}/")[0] == 200
    # an audit event written to _audit is read through SASL_SSL and decoded through the authenticated registry
    writer = client(primary, pki, "writer", "writer-pw")
    event = {"kind": "TIER", "tier": "live", "producer_id": "p1", "host": "h", "topic": "signups",
             "window_start": 0, "window_end": 1000, "count": 3, "first_seq": 0, "last_seq": 2, "bytes": 30,
             "sequences": [[0, 2]], "source": [], "emitted_at": 1}
    value = AvroSerializer(writer, SCHEMA_STR)(event, SerializationContext(AUDIT_TOPIC, MessageField.VALUE))
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    producer.produce(AUDIT_TOPIC, value)
    assert producer.flush(10) == 0

    def status():
        _, _, body = curl(*ca, "-u", "admin:admin-pw", f"{url}/api/status")
        return json.loads(body)

    deadline = time.monotonic() + 30
    while status()["records_read"] < 1:
        assert time.monotonic() < deadline, status()
        time.sleep(0.3)
    s = status()
    assert s["malformed"] == 0 and s["clusters"]["live"]["error"] is None, s


def test_logbus_certs_key_store_and_a_wrong_store_password(tmp_path, broker, users, pki):
    """The registry serves the PEM key store ``logbus certs`` writes (unencrypted key, no ssl.key.password, as the
    secure topology configures it); a store user with a wrong password never serves and says why."""
    env = dict(os.environ, PYTHONPATH=str(REPO / "platform"))
    subprocess.run([sys.executable, "-m", "logbus.cli", "certs", "--dir", str(tmp_path / "certs"), "--service",
                    "registry:127.0.0.1,localhost", "--key-type", "ec-p256"], check=True, env=env, timeout=60,
                   capture_output=True)
    reg = start_registry(tmp_path / "r", broker.bootstrap, ["https"], kafkastore_topic="_schemas_certs",
                         kafkastore_topic_replication_factor="1", ssl_keystore_type="PEM",
                         ssl_keystore_location=str(tmp_path / "certs" / "registry.pem"),
                         authentication_method="BASIC", authentication_realm="SchemaRegistry-Props",
                         authentication_users_file=str(users / "password-file"))
    try:
        ca = ["--cacert", str(tmp_path / "certs" / "ca.pem")]
        assert curl(*ca, "-u", "reader:reader-pw", f"{reg.urls[0]}/subjects")[0] == 200
        assert curl(*ca, f"{reg.urls[0]}/subjects")[0] == 401
    finally:
        reg.stop()
    bad = RegistryProcess(tmp_path / "bad", f"127.0.0.1:{broker.sasl_ssl}", kafkastore_security_protocol="SASL_SSL",
                          kafkastore_sasl_mechanism="SCRAM-SHA-512", kafkastore_sasl_username="registry",
                          kafkastore_sasl_password="wrong", kafkastore_ssl_ca_location=str(pki["ca"]))
    config = bad.dir / "registry.properties"
    config.write_text("".join(f"{k}={v}\n" for k, v in bad.settings.items()))
    proc = subprocess.Popen([sys.executable, "-m", "logbus.cli", "schema-registry", str(config)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        time.sleep(6)
        with pytest.raises(OSError):
            socket.create_connection(("127.0.0.1", bad.port), timeout=1).close()
    finally:
        proc.terminate()
        output = proc.communicate(timeout=20)[0]
    assert "Authentication failed" in output and "certificate verify failed" not in output, output[-2000:]
