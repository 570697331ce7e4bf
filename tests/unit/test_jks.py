"""JKS key and trust stores (platform/broker/security/jks.py) and tls.py's use of them: stores made by Java's own
keytool (Java 17) in a temporary directory, so the format is the JDK's and not this code's idea of it."""

import hashlib
import socket
import ssl
import struct
import subprocess
import threading

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.hazmat.primitives.serialization import load_der_private_key, load_pem_private_key, pkcs12

from broker.security import jks, tls
from security_certs import make_pki

pytestmark = [pytest.mark.unit, pytest.mark.timeout(60)]


def _keytool(cwd, *args: str) -> None:
    done = subprocess.run(["keytool", *args], cwd=cwd, capture_output=True, text=True, timeout=50)
    assert done.returncode == 0, done.stdout + done.stderr


def _genkey(cwd, store: str, storetype: str, storepass: str, keypass: str, alias: str = "broker",
            keyalg: tuple[str, ...] = ("-keyalg", "RSA", "-keysize", "2048")) -> None:
    _keytool(cwd, "-genkeypair", "-storetype", storetype, *keyalg, "-alias", alias, "-dname", f"CN={alias}",
             "-keystore", store, "-storepass", storepass, "-keypass", keypass, "-validity", "2")


def _pem_to_jks(cwd, pem_key, pem_cert, ca_pem, name: str, storepass: str, keypass: str) -> None:
    """A JKS key store (key + chain leaf, CA) from PEM files, through a PKCS12 file keytool imports."""
    key = load_pem_private_key(pem_key.read_bytes(), None)
    chain = [x509.load_pem_x509_certificate(pem_cert.read_bytes()), x509.load_pem_x509_certificate(ca_pem.read_bytes())]
    (cwd / f"{name}.p12").write_bytes(pkcs12.serialize_key_and_certificates(
        name.encode(), key, chain[0], chain[1:], serialization.BestAvailableEncryption(b"p12-pw")))
    _keytool(cwd, "-importkeystore", "-srckeystore", f"{name}.p12", "-srcstoretype", "PKCS12", "-srcstorepass",
             "p12-pw", "-srcalias", name, "-destkeystore", f"{name}.jks", "-deststoretype", "JKS",
             "-deststorepass", storepass, "-destkeypass", keypass, "-destalias", name)


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    d = tmp_path_factory.mktemp("jks")
    _genkey(d, "rsa.jks", "JKS", "store-pw", "key-pw")
    _genkey(d, "same.jks", "JKS", "store-pw", "store-pw")
    _genkey(d, "ec.jks", "JKS", "store-pw", "key-pw", keyalg=("-keyalg", "EC", "-groupname", "secp256r1"))
    _genkey(d, "ks.jceks", "JCEKS", "store-pw", "key-pw")
    for alias in ("first", "second", "third"):
        _genkey(d, "three.jks", "JKS", "store-pw", "key-pw", alias=alias)
    pki = make_pki(d / "pki", ["server", "client"])
    for store, kind in (("ts.jks", "JKS"), ("ts.p12", "PKCS12")):
        _keytool(d, "-importcert", "-noprompt", "-storetype", kind, "-alias", "ca", "-file", str(pki["ca"]),
                 "-keystore", store, "-storepass", "trust-pw")
    _pem_to_jks(d, pki["server-key"], pki["server-cert"], pki["ca"], "server", "store-pw", "key-pw")
    _pem_to_jks(d, pki["client-key"], pki["client-cert"], pki["ca"], "client", "client-pw", "client-pw")
    return d, pki


def _read(stores, name: str) -> bytes:
    return (stores[0] / name).read_bytes()


@pytest.mark.parametrize("name, key_password, key_type", [("rsa.jks", "key-pw", rsa.RSAPrivateKey),
                                                          ("same.jks", "store-pw", rsa.RSAPrivateKey),
                                                          ("ec.jks", "key-pw", ec.EllipticCurvePrivateKey)])
def test_private_key_decrypts_to_the_certificates_key(stores, name, key_password, key_type):
    store = jks.load(_read(stores, name), "store-pw")
    assert store.version == 2 and store.integrity_checked and not store.trusted_certs
    assert list(store.private_keys) == ["broker"]
    entry = store.private_keys["broker"]
    assert len(entry.chain) == 1
    cert = x509.load_der_x509_certificate(entry.chain[0])
    assert cert.subject.rfc4514_string() == "CN=broker"
    key = load_der_private_key(entry.decrypt(key_password), None)
    assert isinstance(key, key_type)
    assert key.public_key().public_numbers() == cert.public_key().public_numbers()


def test_chain_imported_from_pkcs12_keeps_leaf_then_ca(stores):
    _, pki = stores
    entry = jks.load(_read(stores, "server.jks"), "store-pw").private_keys["server"]
    assert [x509.load_der_x509_certificate(c) for c in entry.chain] == [
        x509.load_pem_x509_certificate(pki["server-cert"].read_bytes()),
        x509.load_pem_x509_certificate(pki["ca"].read_bytes())]
    key = load_der_private_key(entry.decrypt("key-pw"), None)
    want = load_pem_private_key(pki["server-key"].read_bytes(), None)
    assert key.private_numbers() == want.private_numbers()


def test_wrong_store_password_is_refused(stores):
    with pytest.raises(jks.StorePasswordError, match="wrong store password or a corrupted file"):
        jks.load(_read(stores, "rsa.jks"), "not-the-pw")
    with pytest.raises(jks.StorePasswordError):
        jks.load(_read(stores, "rsa.jks"), "")  # an empty password is a password: checked


def test_wrong_key_password_is_refused(stores):
    entry = jks.load(_read(stores, "rsa.jks"), "store-pw").private_keys["broker"]
    with pytest.raises(jks.KeyPasswordError, match="cannot recover the key 'broker': wrong key password"):
        entry.decrypt("store-pw")


def test_truncated_and_corrupted_files(stores):
    data = _read(stores, "rsa.jks")
    for cut in (2, 12, len(data) // 2, len(data) - 21):
        for password in ("store-pw", None):
            with pytest.raises(jks.JksError, match="truncated key store"):
                jks.load(data[:cut], password)
    with pytest.raises(jks.JksError, match="truncated key store"):
        jks.load(data[:-5], "store-pw")  # part of the digest missing
    bad = bytearray(data)
    bad[len(data) - 100] ^= 0x01  # in the certificate
    with pytest.raises(jks.StorePasswordError, match="integrity check failed"):
        jks.load(bytes(bad), "store-pw")
    # without a password nothing checks the file as a whole, but a changed key fails its own check
    entry = jks.load(_read(stores, "rsa.jks"), None).private_keys["broker"]
    encrypted = bytearray(entry.encrypted)
    encrypted[100] ^= 0x01
    broken = jks.PrivateKeyEntry(entry.alias, entry.timestamp_ms, bytes(encrypted), entry.chain)
    with pytest.raises(jks.KeyPasswordError):
        broken.decrypt("key-pw")
    with pytest.raises(jks.JksError, match="not a JKS key store"):
        jks.load(b"\x30\x82\x01\x00" + bytes(300), None)


def test_jceks_is_refused_with_a_conversion_hint(stores):
    with pytest.raises(jks.JksError, match="JCEKS is not supported; convert with keytool -importkeystore to PKCS12"):
        jks.load(_read(stores, "ks.jceks"), "store-pw")
    with pytest.raises(tls.TlsConfigError, match="ssl.keystore.location .*JCEKS is not supported"):
        tls.server_context({"ssl.keystore.location": str(stores[0] / "ks.jceks"),
                            "ssl.keystore.password": "store-pw"}.get)


def test_trust_store_read_without_a_password(stores):
    _, pki = stores
    ca = x509.load_pem_x509_certificate(pki["ca"].read_bytes())
    for password in (None, "trust-pw"):
        store = jks.load(_read(stores, "ts.jks"), password)
        assert store.integrity_checked == (password is not None)
        assert list(store.trusted_certs) == ["ca"] and not store.private_keys
        assert store.trust_anchors() == [ca.public_bytes(serialization.Encoding.DER)]
    with pytest.raises(jks.StorePasswordError):
        jks.load(_read(stores, "ts.jks"), "wrong-pw")
    # a key store used as a trust store: its key entry's own certificate, not the CA behind it (as Java)
    server = jks.load(_read(stores, "server.jks"), None)
    assert server.trust_anchors() == [server.private_keys["server"].chain[0]]


def _store(version: int, entries: list[bytes], password: str) -> bytes:
    body = struct.pack(">III", 0xFEEDFEED, version, len(entries)) + b"".join(entries)
    return body + hashlib.sha1(password.encode("utf-16-be") + b"Mighty Aphrodite" + body).digest()


def _utf(text: str) -> bytes:
    return struct.pack(">H", len(text.encode())) + text.encode()


def test_version_1_and_certificate_types(stores):
    cert = jks.load(_read(stores, "ts.jks"), None).trusted_certs["ca"].cert_der
    v1 = _store(1, [struct.pack(">I", 2) + _utf("old") + struct.pack(">qI", 0, len(cert)) + cert], "pw1234")
    assert jks.load(v1, "pw1234").trusted_certs["old"].cert_der == cert
    with pytest.raises(jks.StorePasswordError):
        jks.load(v1, "pw12345")
    other = struct.pack(">I", 2) + _utf("x") + struct.pack(">q", 0) + _utf("PGP") + struct.pack(">I", 1) + b"\0"
    with pytest.raises(jks.JksError, match="certificate type 'PGP', not X.509"):
        jks.load(_store(2, [other], "pw1234"), "pw1234")
    with pytest.raises(jks.JksError, match="unsupported JKS version 3"):
        jks.load(_store(3, [], "pw1234"), "pw1234")
    with pytest.raises(jks.JksError, match="unknown entry tag 3"):
        jks.load(_store(2, [struct.pack(">I", 3) + _utf("s") + struct.pack(">q", 0)], "p"), "p")


def _handshake(server: ssl.SSLContext, client: ssl.SSLContext) -> dict:
    """Over a socket pair: ``peer`` / ``peer_der`` (the certificate the client saw) and ``principal`` (the
    server's view of the client), or ``client_error`` / ``server_error``."""
    a, b = socket.socketpair()
    b.settimeout(10)
    seen = {}

    def serve():
        try:
            with server.wrap_socket(a, server_side=True) as s:
                seen["principal"] = tls.peer_principal(s)
                s.sendall(b"ok")
        except (ssl.SSLError, OSError) as exc:
            seen["server_error"] = exc
        finally:
            a.close()

    thread = threading.Thread(target=serve)
    thread.start()
    try:
        with client.wrap_socket(b, server_hostname="localhost") as c:
            seen["peer"], seen["peer_der"] = c.getpeercert(), c.getpeercert(binary_form=True)
            seen["data"] = c.recv(2)
    except (ssl.SSLError, OSError) as exc:
        seen["client_error"] = exc
    finally:
        b.close()
        thread.join(10)
    return seen


def _ok(seen: dict) -> tuple[str, str]:
    """(the server's CN as the client saw it, the client's principal as the server saw it)."""
    assert seen.get("data") == b"ok", seen
    return dict(x[0] for x in seen["peer"]["subject"])["commonName"], seen["principal"]


def test_tls_contexts_from_jks_and_pkcs12_stores(stores):
    d, _ = stores
    server = tls.server_context({"ssl.keystore.type": "JKS", "ssl.keystore.location": str(d / "server.jks"),
                                 "ssl.keystore.password": "store-pw", "ssl.key.password": "key-pw",
                                 "ssl.client.auth": "required", "ssl.truststore.type": "JKS",
                                 "ssl.truststore.location": str(d / "ts.jks")}.get)  # no trust store password
    assert server.verify_mode == ssl.CERT_REQUIRED
    client = tls.client_context({"ssl.keystore.type": "JKS", "ssl.keystore.location": str(d / "client.jks"),
                                 "ssl.keystore.password": "client-pw",  # the key's too: ssl.key.password unset
                                 "ssl.truststore.type": "PKCS12", "ssl.truststore.location": str(d / "ts.p12"),
                                 "ssl.truststore.password": "trust-pw",
                                 "ssl.endpoint.identification.algorithm": "https"}.get)
    assert _ok(_handshake(server, client)) == ("server", "User:CN=client,O=logbus-test")
    # the client without its key store: the server requires a certificate
    bare = tls.client_context({"ssl.truststore.location": str(d / "ts.jks"), "ssl.truststore.password": "trust-pw",
                               "ssl.endpoint.identification.algorithm": "https"}.get)
    refused = _handshake(server, bare)
    assert "PEER_DID_NOT_RETURN_A_CERTIFICATE" in str(refused.get("server_error")), refused


def test_first_private_key_entry_is_used(stores):
    d, _ = stores
    first = next(iter(jks.load(_read(stores, "three.jks"), "store-pw").private_keys))
    assert first in ("first", "second", "third")
    server = tls.server_context({"ssl.keystore.location": str(d / "three.jks"), "ssl.keystore.password": "store-pw",
                                 "ssl.key.password": "key-pw"}.get)
    client = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    client.check_hostname, client.verify_mode = False, ssl.CERT_NONE
    peer = _handshake(server, client)["peer_der"]
    assert x509.load_der_x509_certificate(peer).subject.rfc4514_string() == f"CN={first}"


@pytest.mark.parametrize("values, message", [
    ({"ssl.keystore.password": "bad-pw", "ssl.key.password": "key-pw"},
     r"ssl.keystore.password: the key store's integrity check failed"),
    ({"ssl.keystore.password": "store-pw", "ssl.key.password": "bad-pw"},
     r"ssl.key.password: cannot recover the key 'broker': wrong key password"),
    ({"ssl.keystore.password": "store-pw"}, r"ssl.keystore.password \(ssl.key.password unset\): cannot recover"),
    ({"ssl.key.password": "key-pw"}, "a JKS key store needs ssl.keystore.password"),
])
def test_tls_key_store_errors_name_the_key(stores, values, message):
    with pytest.raises(tls.TlsConfigError, match=message):
        tls.server_context({"ssl.keystore.location": str(stores[0] / "rsa.jks"), **values}.get)


def test_tls_key_store_without_a_key_and_bad_trust_stores(stores):
    d, _ = stores
    with pytest.raises(tls.TlsConfigError, match="no private key entry in this JKS store"):
        tls.server_context({"ssl.keystore.location": str(d / "ts.jks"), "ssl.keystore.password": "trust-pw"}.get)
    with pytest.raises(tls.TlsConfigError, match="ssl.truststore.password: the key store's integrity check failed"):
        tls.client_context({"ssl.truststore.location": str(d / "ts.jks"), "ssl.truststore.password": "bad-pw"}.get)
    with pytest.raises(tls.TlsConfigError, match=r"ssl.truststore.location .*\(ssl.truststore.password is unset\)"):
        tls.client_context({"ssl.truststore.type": "PKCS12", "ssl.truststore.location": str(d / "ts.p12")}.get)
    (d / "truncated.jks").write_bytes(_read(stores, "ts.jks")[:40])
    with pytest.raises(tls.TlsConfigError, match="ssl.truststore.location .*truncated key store"):
        tls.client_context({"ssl.truststore.location": str(d / "truncated.jks")}.get)
    (d / "junk").write_bytes(b"\x00junk" * 10)
    with pytest.raises(tls.TlsConfigError, match=r"neither a JKS, a PKCS12 nor a PEM file \(ssl.truststore.type=JKS"):
        tls.client_context({"ssl.truststore.location": str(d / "junk")}.get)


def test_default_type_reads_pem_and_pkcs12_files_by_their_content(stores):
    """ssl.*.type defaults to JKS (Kafka's default): PEM files (what logbus read before) and PKCS12 files given
    with it, or a JKS file given as PKCS12, are read by content; type PEM stays PEM only."""
    d, pki = stores
    server = tls.server_context({"ssl.keystore.type": "JKS", "ssl.keystore.location": str(pki["server"]),
                                 "ssl.key.password": "keypass", "ssl.client.auth": "required",
                                 "ssl.truststore.type": "JKS", "ssl.truststore.location": str(pki["ca"])}.get)
    client = tls.client_context({"ssl.keystore.type": "JKS", "ssl.keystore.location": str(d / "client.p12"),
                                 "ssl.keystore.password": "p12-pw",
                                 "ssl.truststore.type": "PKCS12", "ssl.truststore.location": str(d / "ts.jks"),
                                 "ssl.endpoint.identification.algorithm": "https"}.get)
    assert _ok(_handshake(server, client)) == ("server", "User:CN=client,O=logbus-test")
    with pytest.raises(tls.TlsConfigError, match="ssl.truststore"):  # PEM means PEM
        tls.client_context({"ssl.truststore.type": "PEM", "ssl.truststore.location": str(d / "ts.jks")}.get)
