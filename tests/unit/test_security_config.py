"""The listener security keys: per-listener overrides, start-up refusals, TLS contexts from PEM."""

import ssl

import pytest

from broker.config import BrokerConfig, ConfigError
from broker.security import tls

pytestmark = [pytest.mark.unit, pytest.mark.timeout(30)]

SASL = {"listeners": "PLAINTEXT://h:1,SASL_SSL://h:2", "ssl.keystore.location": "/k.pem"}


def test_listener_scoped_keys_override_the_broker_wide_ones():
    config = BrokerConfig.from_strings({**SASL, "sasl.enabled.mechanisms": "GSSAPI",
                                        "listener.name.sasl_ssl.sasl.enabled.mechanisms": "SCRAM-SHA-512",
                                        "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config": "x"})
    assert config.listener_value("SASL_SSL", "sasl.enabled.mechanisms") == ["SCRAM-SHA-512"]
    assert config.listener_value("PLAINTEXT", "sasl.enabled.mechanisms") == ["GSSAPI"]
    assert config.listener_value("SASL_SSL", "scram-sha-512.sasl.jaas.config") == "x"
    assert config.listener_protocol("SASL_SSL") == "SASL_SSL"


@pytest.mark.parametrize("raw, message", [
    ({**SASL}, "No serviceName defined"),  # Kafka's default mechanism, GSSAPI, without its settings
    ({**SASL, "sasl.enabled.mechanisms": "DIGEST-MD5"}, "has none of PLAIN"),
    ({**SASL, "sasl.enabled.mechanisms": "PLAIN", "inter.broker.listener.name": "SASL_SSL"},
     "sasl.mechanism.inter.broker.protocol=GSSAPI"),
    ({"listeners": "SASL_SSL://h:2", "sasl.enabled.mechanisms": "PLAIN"}, "needs ssl.keystore.location"),
    ({"listener.name.plaintext.ssl.no.such": "1"}, "unknown config key"),
    ({"listener.name.x.digest-md5.sasl.jaas.config": "1"}, "unknown config key"),
    ({"ssl.client.auth": "sometimes"}, "ssl.client.auth"),
])
def test_refused_at_start_up(raw, message):
    with pytest.raises(ConfigError, match=message):
        BrokerConfig.from_strings(raw)


def test_security_inter_broker_protocol_picks_the_listener():
    config = BrokerConfig.from_strings({"listeners": "PLAINTEXT://h:1,SSL://h:2", "ssl.keystore.location": "/k",
                                        "security.inter.broker.protocol": "SSL"})
    assert config.inter_broker_listener == "SSL"
    assert BrokerConfig.from_strings({"listeners": "PLAINTEXT://h:1"}).inter_broker_listener == "PLAINTEXT"


def test_a_missing_jks_key_store_is_a_clear_error(tmp_path):
    """JKS is read (tests/unit/test_jks.py); a store that is not there, or not a key store, is named in the error."""
    values = {"ssl.keystore.type": "JKS", "ssl.keystore.location": "/x.jks", "ssl.keystore.password": "pw"}
    with pytest.raises(tls.TlsConfigError, match="ssl.keystore.location /x.jks"):
        tls.server_context(values.get)
    garbage = tmp_path / "garbage.jks"
    garbage.write_bytes(b"\x00\x01 not a key store")
    with pytest.raises(tls.TlsConfigError, match="neither a JKS, a PKCS12 nor a PEM file"):
        tls.server_context({**values, "ssl.keystore.location": str(garbage)}.get)


def test_pem_contexts(tmp_path):
    from security_certs import make_pki  # tests/ is on sys.path (tests/conftest.py)

    pki = make_pki(tmp_path, ["b"])
    server = tls.server_context({"ssl.keystore.type": "PEM", "ssl.keystore.location": str(pki["b"]),
                                 "ssl.key.password": "keypass", "ssl.client.auth": "required",
                                 "ssl.truststore.location": str(pki["ca"])}.get)
    assert server.verify_mode == ssl.CERT_REQUIRED
    inline = tls.server_context({"ssl.keystore.type": "PEM",
                                 "ssl.keystore.certificate.chain": pki["b-cert"].read_text(),
                                 "ssl.keystore.key": pki["b-key"].read_text()}.get)
    assert inline.verify_mode == ssl.CERT_NONE
    client = tls.client_context({"ssl.truststore.location": str(pki["ca"]),
                                 "ssl.endpoint.identification.algorithm": "https"}.get)
    assert client.check_hostname
    with pytest.raises(tls.TlsConfigError):  # wrong key password
        tls.server_context({"ssl.keystore.type": "PEM", "ssl.keystore.location": str(pki["b"]),
                            "ssl.key.password": "nope"}.get)
    with pytest.raises(tls.TlsConfigError, match="ssl.client.auth needs"):
        tls.server_context({"ssl.keystore.type": "PEM", "ssl.keystore.location": str(pki["b"]),
                            "ssl.key.password": "keypass", "ssl.client.auth": "required"}.get)
