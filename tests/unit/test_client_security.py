"""settings.security: one parser of a client's security keys, in Kafka's and librdkafka's names."""

import ssl

import pytest

from settings.properties import ConfigError, parse_properties, read_properties
from settings.security import ClientSecurity, librdkafka_config

pytestmark = pytest.mark.unit

JAAS = ('org.apache.kafka.common.security.scram.ScramLoginModule required username="mirror" '
        'password="s3cr=t;x";')


def test_java_names_become_librdkafka_names():
    props = {"bootstrap.servers": "b:9093", "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
             "sasl.jaas.config": JAAS, "ssl.truststore.location": "/pki/ca.pem", "ssl.truststore.type": "PEM",
             "group.id": "g"}
    conf = librdkafka_config(props)
    assert conf == {"bootstrap.servers": "b:9093", "group.id": "g", "security.protocol": "SASL_SSL",
                    "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "mirror", "sasl.password": "s3cr=t;x",
                    "ssl.ca.location": "/pki/ca.pem", "ssl.endpoint.identification.algorithm": "https"}


def test_librdkafka_names_and_a_prefix():
    props = {"kafkastore.security.protocol": "sasl_plaintext", "kafkastore.sasl.mechanisms": "PLAIN",
             "kafkastore.sasl.username": "registry", "kafkastore.sasl.password": "pw", "kafkastore.topic": "_s"}
    sec = ClientSecurity.from_properties(props, "kafkastore.")
    assert (sec.protocol, sec.mechanism, sec.username, sec.password) == ("SASL_PLAINTEXT", "PLAIN", "registry", "pw")
    assert sec.ssl_context() is None
    assert sec.kafka_python() == {"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "PLAIN",
                                  "sasl_plain_username": "registry", "sasl_plain_password": "pw"}
    mine, rest = ClientSecurity.split(props, "kafkastore.")
    assert rest == {"kafkastore.topic": "_s"} and len(mine) == 4


def test_plaintext_without_security_keys_is_unchanged():
    props = {"bootstrap.servers": "b:9092", "linger.ms": "5"}
    assert librdkafka_config(props) == props
    assert ClientSecurity.from_properties(props).librdkafka() == {"security.protocol": "PLAINTEXT"}


def test_empty_endpoint_identification_turns_the_host_check_off():
    sec = ClientSecurity.from_properties({"security.protocol": "SSL", "ssl.endpoint.identification.algorithm": ""})
    assert sec.check_hostname is False
    context = sec.ssl_context()
    assert isinstance(context, ssl.SSLContext) and context.check_hostname is False
    assert ClientSecurity.from_properties({"security.protocol": "SSL"}).check_hostname is True


@pytest.mark.parametrize("props, words", [
    ({"security.protocol": "TLS"}, "security.protocol=TLS"),
    ({"security.protocol": "SASL_SSL", "sasl.mechanism": "GSSAPI", "sasl.username": "a", "sasl.password": "b"},
     "GSSAPI"),
    ({"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN"}, "needs a user"),
    ({"security.protocol": "SSL", "ssl.truststore.type": "JKS"}, "PEM files only"),
    ({"security.protocol": "SASL_SSL", "sasl.jaas.config": "no module"}, "sasl.jaas.config"),
])
def test_bad_settings_name_the_key(props, words):
    with pytest.raises(ConfigError, match=words):
        ClientSecurity.from_properties(props)


def test_properties_files(tmp_path):
    path = tmp_path / "client.properties"
    path.write_text("# a comment\nsecurity.protocol = SSL\n! another\nssl.ca.location: /ca.pem\n")
    assert read_properties(path) == {"security.protocol": "SSL", "ssl.ca.location": "/ca.pem"}
    with pytest.raises(ConfigError, match="cannot read"):
        read_properties(tmp_path / "missing")
    with pytest.raises(ConfigError, match="line 1"):
        parse_properties("no separator here")


def test_config_providers_keep_secrets_out_of_config_files(tmp_path, monkeypatch):
    (tmp_path / "secrets.properties").write_text("password=s3cret\n")
    (tmp_path / "dir").mkdir()
    (tmp_path / "dir" / "token").write_text("tok-123\n")
    monkeypatch.setenv("LOGBUS_TEST_USER", "mirror")
    text = (
        "config.providers=file,env,dir\n"
        "config.providers.file.class=org.apache.kafka.common.config.provider.FileConfigProvider\n"
        "config.providers.env.class=org.apache.kafka.common.config.provider.EnvVarConfigProvider\n"
        "config.providers.dir.class=org.apache.kafka.common.config.provider.DirectoryConfigProvider\n"
        f"sasl.jaas.config=x required username=\"${{env:LOGBUS_TEST_USER}}\" "
        f"password=\"${{file:{tmp_path}/secrets.properties:password}}\";\n"
        f"token=${{dir:{tmp_path}/dir:token}}\n"
        "other=${vault:/a:b}\n")
    props = parse_properties(text)
    assert props == {"sasl.jaas.config": 'x required username="mirror" password="s3cret";', "token": "tok-123",
                     "other": "${vault:/a:b}"}  # an alias not configured stays as written, as in Kafka
    with pytest.raises(ConfigError, match="names nothing"):
        parse_properties(text.replace(":password}", ":nope}"))
    with pytest.raises(ConfigError, match="cannot read"):
        parse_properties(text.replace("secrets.properties", "missing.properties"))
    with pytest.raises(ConfigError, match="config.providers.x.class"):
        parse_properties("config.providers=x\na=b\n")


def test_oauthbearer_oidc_login_in_either_naming():
    """librdkafka's keys and Kafka's (token endpoint key plus the login module's clientId/clientSecret/scope)
    give the same librdkafka settings; a login without a token endpoint or client is a one-line error."""
    from settings.security import ClientSecurity
    from settings.properties import ConfigError

    librdkafka_names = {"security.protocol": "SASL_SSL", "sasl.mechanism": "OAUTHBEARER",
                        "sasl.oauthbearer.method": "oidc", "sasl.oauthbearer.client.id": "mirror",
                        "sasl.oauthbearer.client.secret": "s3", "sasl.oauthbearer.scope": "logbus",
                        "sasl.oauthbearer.token.endpoint.url": "https://idp/token", "ssl.ca.location": "/ca.pem"}
    java_names = {"security.protocol": "SASL_SSL", "sasl.mechanism": "OAUTHBEARER",
                  "sasl.oauthbearer.token.endpoint.url": "https://idp/token", "ssl.truststore.location": "/ca.pem",
                  "sasl.login.callback.handler.class": "org.apache.kafka.common.security.oauthbearer."
                                                       "OAuthBearerLoginCallbackHandler",
                  "sasl.jaas.config": 'org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required '
                                      'clientId="mirror" clientSecret="s3" scope="logbus";'}
    expected = {"security.protocol": "SASL_SSL", "sasl.mechanism": "OAUTHBEARER", "sasl.oauthbearer.method": "oidc",
                "sasl.oauthbearer.client.id": "mirror", "sasl.oauthbearer.client.secret": "s3",
                "sasl.oauthbearer.token.endpoint.url": "https://idp/token", "sasl.oauthbearer.scope": "logbus",
                "ssl.ca.location": "/ca.pem", "ssl.endpoint.identification.algorithm": "https"}
    for props in (librdkafka_names, java_names):
        assert ClientSecurity.from_properties(props).librdkafka() == expected
    plain = {k: v for k, v in librdkafka_names.items() if not k.startswith("ssl.")}
    kwargs = ClientSecurity.from_properties({**plain, "security.protocol": "SASL_PLAINTEXT"}).kafka_python()
    assert kwargs["sasl_mechanism"] == "OAUTHBEARER" and callable(kwargs["sasl_oauth_token_provider"].token)
    for props, words in (({**librdkafka_names, "sasl.oauthbearer.method": "default"}, "log in with oidc"),
                         ({k: v for k, v in librdkafka_names.items() if "endpoint" not in k}, "needs")):
        with pytest.raises(ConfigError, match=words):
            ClientSecurity.from_properties(props)


def test_oidc_tokens_are_fetched_with_client_credentials_and_reused(tmp_path):
    import sys
    import time as _time

    sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[1]))
    from oidc_provider import OidcProvider
    from settings.oidc import OidcError, OidcTokens

    idp = OidcProvider({"reg": "reg-secret"}, lifetimes={"reg": 2})
    try:
        tokens = OidcTokens(idp.token_url, "reg", "reg-secret", "logbus")
        first = tokens.token()
        assert tokens.token() == first and idp.issued == 1  # reused within 80% of its 2 s
        _time.sleep(1.7)
        assert tokens.token() != first and idp.issued == 2
        with pytest.raises(OidcError, match="no token from"):
            OidcTokens(idp.token_url, "reg", "wrong").token()
    finally:
        idp.stop()
