"""settings.http_auth / settings.http_server and the registry's role split: Jetty password files, JAAS configs,
BASIC and bearer headers, the ASGI middleware's 401/403 answers, the TLS settings' errors."""

import asyncio
import base64
import hashlib
import json

import pytest
from schema_registry.config import RegistryConfig, RegistryConfigError, operation
from settings import http_auth, http_server
from settings.properties import ConfigError

pytestmark = pytest.mark.unit


def basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


def test_password_file_plain_and_md5():
    users = http_auth.parse_users(f"# comment\nann: ann-pw,read,write\nbob: MD5:{hashlib.md5(b'b').hexdigest()}\n"
                                  "carol=carol-pw\n")
    assert users["ann"].roles == {"read", "write"} and users["ann"].check("ann-pw") and not users["ann"].check("x")
    assert users["bob"].check("b") and not users["bob"].check("MD5:" + hashlib.md5(b"b").hexdigest())
    assert users["bob"].roles == frozenset() and users["carol"].check("carol-pw")
    with pytest.raises(ConfigError, match="CRYPT"):
        http_auth.parse_users("dan: CRYPT:adpexzg3FUZAk,admin")
    with pytest.raises(ConfigError, match="line 1"):
        http_auth.parse_users("no separator here")


def test_jaas_file_names_the_password_file(tmp_path):
    (tmp_path / "users").write_text("ann: pw,admin\n")
    jaas = tmp_path / "jaas.conf"
    jaas.write_text("// Confluent's example\nKafkaClient { org.apache.kafka.common.security.plain.PlainLoginModule "
                    'required username="x" password="y"; };\n/* the registry */\nSchemaRegistry-Props {\n'
                    '  org.eclipse.jetty.jaas.spi.PropertyFileLoginModule required file="users" debug="false";\n};\n')
    assert set(http_auth.users_from_jaas(str(jaas), "SchemaRegistry-Props")) == {"ann"}  # relative to the file
    with pytest.raises(ConfigError, match="no section 'Nope'"):
        http_auth.users_from_jaas(str(jaas), "Nope")
    with pytest.raises(ConfigError, match="no org.eclipse.jetty.jaas.spi.PropertyFileLoginModule"):
        http_auth.users_from_jaas(str(jaas), "KafkaClient")
    with pytest.raises(ConfigError, match="not a JAAS config"):
        http_auth.users_from_jaas(str(tmp_path / "users"), "x")
    assert http_auth.jaas_path_from_opts(f"-Xmx1g -Djava.security.auth.login.config={jaas} -Dx=y") == str(jaas)
    assert http_auth.jaas_path_from_opts("-Xmx1g") is None


def test_headers():
    assert http_auth.parse_basic(basic("a", "p:q")) == ("a", "p:q")
    assert http_auth.parse_basic("Basic !!!") is None and http_auth.parse_basic("Bearer x") is None
    assert http_auth.parse_basic(None) is None
    assert http_auth.parse_bearer("Bearer tok") == "tok" and http_auth.parse_bearer("Basic tok") is None


def call(app, method: str, path: str, authorization: str | None = None) -> tuple[int, dict, dict | None]:
    sent = []

    async def receive():
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message):
        sent.append(message)

    headers = [(b"authorization", authorization.encode())] if authorization else []
    asyncio.run(app({"type": "http", "method": method, "path": path, "headers": headers}, receive, send))
    start = sent[0]
    body = b"".join(m.get("body", b"") for m in sent[1:])
    return start["status"], {k.decode(): v.decode() for k, v in start["headers"]}, json.loads(body) if body else None


async def ok_app(scope, receive, send):
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": json.dumps(scope.get("user_principal")).encode()})


def test_middleware_answers_401_403_and_passes_the_principal():
    users = http_auth.parse_users("ann: ann-pw,read\nbob: bob-pw,write\neve: eve-pw,guest\n")
    auth = http_auth.Authenticator("Reg", users, ("tok-1",), allowed_roles=frozenset({"read", "write"}))
    app = http_auth.HttpAuth(ok_app, auth, lambda method, path, roles: method == "GET" or "write" in roles,
                             open_paths=("/health",))
    status, headers, body = call(app, "GET", "/subjects")
    assert status == 401 and headers["www-authenticate"] == 'Basic realm="Reg"'
    assert body == {"error_code": 401, "message": "Unauthorized"}
    assert call(app, "GET", "/subjects", basic("ann", "wrong"))[0] == 401
    assert call(app, "GET", "/subjects", basic("ann", "ann-pw"))[2] == "ann"
    status, _, body = call(app, "POST", "/subjects/s/versions", basic("ann", "ann-pw"))
    assert status == 403 and body["error_code"] == 403
    assert call(app, "POST", "/subjects/s/versions", basic("bob", "bob-pw"))[0] == 200
    assert call(app, "GET", "/", basic("eve", "eve-pw"))[0] == 403  # not in authentication.roles
    assert call(app, "GET", "/", "Bearer tok-1")[0] == 200 and call(app, "GET", "/", "Bearer tok-2")[0] == 401
    assert call(app, "GET", "/health")[0] == 200


def test_registry_operations_and_role_split(tmp_path):
    assert [operation(m, p) for m, p in [("GET", "/config"), ("POST", "/subjects/s"), ("POST", "/compatibility/"
            "subjects/s/versions"), ("POST", "/subjects/s/versions"), ("DELETE", "/subjects/s"),
            ("PUT", "/config/s"), ("PUT", "/mode")]] == ["read", "read", "read", "write", "admin", "admin", "admin"]
    keks = "/dek-registry/v1/keks"  # a producer's serializer creates its KEK and DEKs; undeleting administers
    assert [operation(m, keks + p) for m, p in [("GET", "/k/deks/s"), ("POST", ""), ("POST", "/k/deks/s"),
            ("POST", "/k/deks/s/undelete"), ("POST", "/k/test"), ("PUT", "/k"), ("DELETE", "/k/deks/s")]] == [
        "read", "write", "write", "admin", "admin", "admin", "admin"]
    (tmp_path / "users").write_text("a: a,admin\nw: w,write\nr: r,read\n")
    base = ["kafkastore.bootstrap.servers=x:1", "authentication.method=BASIC", f"authentication.users.file="
            f"{tmp_path / 'users'}"]
    assert RegistryConfig.load(None, base).role_policy() is None  # Confluent: every role may do everything
    allowed = RegistryConfig.load(None, base + ["authentication.roles.write=write",
                                                "authentication.roles.admin=admin"]).role_policy()
    r, w, a = frozenset({"read"}), frozenset({"write"}), frozenset({"admin"})
    assert allowed("GET", "/subjects", r) and not allowed("POST", "/subjects/s/versions", r)
    assert allowed("POST", "/subjects/s/versions", w) and not allowed("PUT", "/config", w)
    assert allowed("PUT", "/config", a) and allowed("POST", "/subjects/s/versions", a)  # admin writes too
    with pytest.raises(RegistryConfigError, match="NONE or BASIC"):
        RegistryConfig.load(None, base + ["authentication.method=DIGEST"])


def test_server_tls_settings(tmp_path):
    from security_certs import make_pki

    pki = make_pki(tmp_path, ["srv"])
    https = [http_server.Listener("https", "127.0.0.1", 1)]
    good = {"ssl.keystore.location": str(pki["srv"]), "ssl.key.password": "keypass"}
    http_server.check_ssl(good, https)
    for bad, message in [({"ssl.keystore.type": "JKS"}, "JKS"), ({"ssl.key.password": "wrong"}, "cannot load"),
                         ({"ssl.client.authentication": "REQUIRED"}, "needs ssl.truststore.location"),
                         ({"ssl.client.authentication": "MAYBE"}, "NONE, REQUESTED or REQUIRED"),
                         ({"ssl.keystore.location": str(tmp_path / "none")}, "no such file")]:
        with pytest.raises(ConfigError, match=message):
            http_server.check_ssl({**good, **bad}, https)
    http_server.check_ssl({}, [http_server.Listener("http", "h", 1)])  # plain http needs nothing
    assert [lst.url for lst in http_server.parse_listeners("http://a:1, https://b:2")] == ["http://a:1", "https://b:2"]
    with pytest.raises(ConfigError):
        http_server.parse_listeners("tcp://a:1")


def test_audit_service_security_config(tmp_path):
    from audit.service import ServiceConfig, ServiceConfigError
    from security_certs import make_pki

    pki = make_pki(tmp_path, ["audit"])
    (tmp_path / "users").write_text("ann: pw,read\n")
    base = {"schema.registry.url": "https://r:8081", "audit.cluster.live.bootstrap.servers": "a:1",
            "listeners": "https://127.0.0.1:8090", "ssl.keystore.location": str(pki["audit"]),
            "ssl.key.password": "keypass", "ssl.truststore.location": str(pki["ca"]),
            "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "audit",
            "sasl.password": "pw", "schema.registry.basic.auth.user.info": "audit:pw",
            "schema.registry.basic.auth.credentials.source": "USER_INFO", "schema.registry.ssl.ca.location": "ca",
            "authentication.method": "BASIC,BEARER", "authentication.users.file": str(tmp_path / "users"),
            "authentication.bearer.tokens": "t1, t2"}
    cfg = ServiceConfig(base)
    # the server's key store and key password stay out of the Kafka client's settings
    assert cfg.client_conf["security.protocol"] == "SASL_SSL" and cfg.client_conf["ssl.ca.location"] == str(pki["ca"])
    assert "ssl.certificate.location" not in cfg.client_conf and "ssl.key.password" not in cfg.client_conf
    assert cfg.registry_conf == {"url": "https://r:8081", "basic.auth.user.info": "audit:pw", "ssl.ca.location": "ca"}
    assert cfg.authenticator.tokens == ("t1", "t2") and set(cfg.authenticator.users) == {"ann"}
    assert cfg.authenticator.realm == "logbus-audit"
    assert ServiceConfig({**base, "authentication.method": "NONE"}).authenticator is None
    for bad, message in [({"authentication.method": "BEARER", "authentication.bearer.tokens": ""}, "tokens"),
                         ({"authentication.method": "DIGEST"}, "BASIC or BEARER"),
                         ({"authentication.method": "NONE,BASIC"}, "cannot be combined"),
                         ({"ssl.keystore.type": "JKS"}, "JKS")]:
        with pytest.raises(ServiceConfigError, match=message):
            ServiceConfig({**base, **bad})
