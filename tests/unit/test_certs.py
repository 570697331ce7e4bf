"""``logbus certs`` (platform/logbus/certs.py): the chain verifies, SANs, idempotence, permissions, bad input.
In process, in tmp_path (outside any git work tree: no git subprocess); the git-ignore check and a broker
serving the certificates are in tests/integration/test_security_clients.py."""

import argparse
import datetime
import ipaddress
import ssl
import stat

import pytest
from cryptography import x509
from cryptography.hazmat.primitives.serialization import load_pem_private_key, pkcs12

from logbus import certs

pytestmark = pytest.mark.unit


def _cli(*argv: str) -> int:
    parser = argparse.ArgumentParser()
    certs.add_arguments(parser)
    return certs.run(parser.parse_args(list(argv)))


def _cert(path) -> x509.Certificate:
    return x509.load_pem_x509_certificate(path.read_bytes())


def _sans(cert) -> set[str]:
    return {str(n.value) for n in cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value}


def test_ca_and_service_files_chain_and_sans(tmp_path):
    d = tmp_path / "pki"
    assert _cli("--dir", str(d), "--ca-name", "Test CA", "--service", "broker1:broker1.example,localhost,127.0.0.1,::1",
                "--service", "frontend", "--key-type", "ec-p256") == 0
    ca, leaf = _cert(d / "ca.pem"), _cert(d / "broker1-cert.pem")
    leaf.verify_directly_issued_by(ca)
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    assert not leaf.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    assert ca.subject.rfc4514_string() == "CN=Test CA,O=logbus"
    assert leaf.subject.rfc4514_string() == "CN=broker1,O=logbus"
    names = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert names.get_values_for_type(x509.DNSName) == ["broker1.example", "localhost"]
    assert names.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address("127.0.0.1"), ipaddress.ip_address("::1")]
    usages = leaf.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert {u._name for u in usages} == {"serverAuth", "clientAuth"}
    assert _sans(_cert(d / "frontend-cert.pem")) == {"frontend"}  # no hosts given: the name itself
    # the PEM key store: key, then the chain (leaf, CA), as Kafka's ssl.keystore.type=PEM reads it
    store = (d / "broker1.pem").read_bytes()
    assert store.index(b"PRIVATE KEY") < store.index(b"CERTIFICATE")
    chain = x509.load_pem_x509_certificates(store)
    assert chain == [leaf, ca]
    # Python's ssl (the broker's and uvicorn's TLS) accepts both forms and verifies the host names against ca.pem
    ssl.create_default_context(ssl.Purpose.CLIENT_AUTH).load_cert_chain(d / "broker1.pem")
    ssl.create_default_context(ssl.Purpose.CLIENT_AUTH).load_cert_chain(d / "broker1-cert.pem", d / "broker1-key.pem")
    key = load_pem_private_key((d / "broker1-key.pem").read_bytes(), None)
    assert key.public_key().public_numbers() == leaf.public_key().public_numbers()


def test_handshake_with_the_made_certificates(tmp_path):
    """A TLS handshake in memory: server with the key store, client trusting ca.pem, host name checked."""
    d = tmp_path / "pki"
    assert certs.make(d, [certs.Service.parse("svc:localhost,127.0.0.1")], key_type="ec-p256")
    server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_ctx.load_cert_chain(d / "svc.pem")
    client_ctx = ssl.create_default_context(cafile=d / "ca.pem")
    for host, ok in [("localhost", True), ("other.example", False)]:
        c_in, c_out, s_in, s_out = ssl.MemoryBIO(), ssl.MemoryBIO(), ssl.MemoryBIO(), ssl.MemoryBIO()
        client = client_ctx.wrap_bio(c_in, c_out, server_hostname=host)
        server = server_ctx.wrap_bio(s_in, s_out, server_side=True)
        failed = None
        for _ in range(10):
            for side, out, into in [(client, c_out, s_in), (server, s_out, c_in)]:
                try:
                    side.do_handshake()
                except ssl.SSLWantReadError:
                    pass
                except ssl.SSLError as exc:
                    failed = failed or exc
                into.write(out.read())
        assert (failed is None) == ok, failed


def test_private_keys_are_0600(tmp_path):
    d = tmp_path / "pki"
    assert _cli("--dir", str(d), "--service", "a:localhost", "--pkcs12-password", "pass:p12pw",
                "--key-type", "ec-p256") == 0
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in d.iterdir()}
    assert modes == {"ca.pem": 0o644, "ca-key.pem": 0o600, "a-cert.pem": 0o644, "a-key.pem": 0o600,
                     "a.pem": 0o600, "a.p12": 0o600}
    assert stat.S_IMODE(d.stat().st_mode) == 0o700


def test_rerun_keeps_everything(tmp_path, capsys):
    d = tmp_path / "pki"
    args = ("--dir", str(d), "--service", "a:localhost", "--service", "b:127.0.0.1", "--key-type", "ec-p256")
    assert _cli(*args) == 0
    before = {p.name: p.read_bytes() for p in d.iterdir()}
    capsys.readouterr()
    assert _cli(*args) == 0
    assert {p.name: p.read_bytes() for p in d.iterdir()} == before
    assert [line.split()[0] for line in capsys.readouterr().out.splitlines()] == ["kept", "kept", "kept"]
    # a new service later: the CA is reused, the others untouched
    assert _cli(*args, "--service", "c") == 0
    assert all((d / name).read_bytes() == data for name, data in before.items())
    _cert(d / "c-cert.pem").verify_directly_issued_by(_cert(d / "ca.pem"))


def test_changed_hosts_or_expiry_reissue_only_that_certificate(tmp_path):
    d = tmp_path / "pki"
    services = [certs.Service.parse("a:localhost"), certs.Service.parse("b:localhost")]
    now = datetime.datetime.now(datetime.timezone.utc)
    certs.make(d, services, key_type="ec-p256", days=90, now=now)
    a, b, ca = (d / "a-cert.pem").read_bytes(), (d / "b-cert.pem").read_bytes(), (d / "ca.pem").read_bytes()
    done = certs.make(d, [certs.Service.parse("a:localhost,a.example"), services[1]], key_type="ec-p256", days=90)
    assert done == {"ca": "kept", "a": "renewed", "b": "kept"}
    assert _sans(_cert(d / "a-cert.pem")) == {"localhost", "a.example"} and (d / "b-cert.pem").read_bytes() == b
    assert (d / "ca.pem").read_bytes() == ca
    # 80 days on: within the last third of b's 90 days, renewed; a (re-issued today) only 10 days from expiry too
    later = now + datetime.timedelta(days=80)
    done = certs.make(d, [certs.Service.parse("a:localhost,a.example"), services[1]], key_type="ec-p256", days=90,
                      now=later)
    assert done["b"] == "renewed" and _cert(d / "b-cert.pem").not_valid_after_utc > later
    assert a != (d / "a-cert.pem").read_bytes()


def test_key_type_change_reissues(tmp_path):
    d = tmp_path / "pki"
    certs.make(d, [certs.Service.parse("a")], key_type="ec-p256")
    assert certs.make(d, [certs.Service.parse("a")], key_type="ec-p384")["a"] == "renewed"
    assert load_pem_private_key((d / "a-key.pem").read_bytes(), None).curve.name == "secp384r1"


def test_existing_ca_is_never_replaced_without_force(tmp_path, capsys):
    d = tmp_path / "pki"
    assert _cli("--dir", str(d), "--service", "a", "--key-type", "ec-p256") == 0
    ca = (d / "ca.pem").read_bytes()
    assert _cli("--dir", str(d), "--ca-name", "Another CA", "--service", "a", "--key-type", "ec-p256") == 0
    assert (d / "ca.pem").read_bytes() == ca  # the existing CA is reused (its name is not changed)
    (d / "ca-key.pem").unlink()
    capsys.readouterr()
    assert _cli("--dir", str(d), "--service", "a", "--key-type", "ec-p256") == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("logbus: certs: ") and "--force" in err
    assert (d / "ca.pem").read_bytes() == ca
    # --force: a new CA, and the certificates it did not sign are re-issued
    assert _cli("--dir", str(d), "--service", "a", "--key-type", "ec-p256", "--force") == 0
    new_ca = _cert(d / "ca.pem")
    assert (d / "ca.pem").read_bytes() != ca
    _cert(d / "a-cert.pem").verify_directly_issued_by(new_ca)
    assert x509.load_pem_x509_certificates((d / "a.pem").read_bytes())[1] == new_ca


def test_a_foreign_certificate_is_reissued(tmp_path):
    d, other = tmp_path / "pki", tmp_path / "other"
    certs.make(d, [certs.Service.parse("a")], key_type="ec-p256")
    certs.make(other, [certs.Service.parse("a")], key_type="ec-p256")
    for name in ("a-cert.pem", "a-key.pem"):
        (d / name).write_bytes((other / name).read_bytes())
    assert certs.make(d, [certs.Service.parse("a")], key_type="ec-p256")["a"] == "renewed"
    _cert(d / "a-cert.pem").verify_directly_issued_by(_cert(d / "ca.pem"))


def test_key_password_and_pkcs12(tmp_path, monkeypatch):
    d = tmp_path / "pki"
    monkeypatch.setenv("KEYPW", "s3cret")
    (tmp_path / "p12pw").write_text("p12-pw\n")
    assert _cli("--dir", str(d), "--service", "a:localhost", "--key-type", "ec-p256", "--key-password", "env:KEYPW",
                "--pkcs12-password", f"file:{tmp_path / 'p12pw'}") == 0
    for name in ("a.pem", "a-key.pem"):
        data = (d / name).read_bytes()
        assert b"ENCRYPTED PRIVATE KEY" in data
        load_pem_private_key(data, b"s3cret")
    ssl.create_default_context(ssl.Purpose.CLIENT_AUTH).load_cert_chain(d / "a.pem", password="s3cret")
    key, cert, extra = pkcs12.load_key_and_certificates((d / "a.p12").read_bytes(), b"p12-pw")
    assert cert == _cert(d / "a-cert.pem") and extra == [_cert(d / "ca.pem")]
    # again with the passwords: kept; without the key password: one line, exit 1
    assert certs.make(d, [certs.Service.parse("a:localhost")], key_type="ec-p256", key_password="s3cret",
                      pkcs12_password="p12-pw")["a"] == "kept"
    assert _cli("--dir", str(d), "--service", "a:localhost", "--key-type", "ec-p256") == 1
    assert _cli("--dir", str(d), "--service", "a:localhost", "--key-type", "ec-p256", "--key-password", "wrong") == 1
    # a lost PKCS12 store is written again from the kept key and certificate
    (d / "a.p12").unlink()
    cert_before = (d / "a-cert.pem").read_bytes()
    assert certs.make(d, [certs.Service.parse("a:localhost")], key_type="ec-p256", key_password="s3cret",
                      pkcs12_password="p12-pw")["a"] == "updated"
    assert (d / "a-cert.pem").read_bytes() == cert_before
    assert pkcs12.load_key_and_certificates((d / "a.p12").read_bytes(), b"p12-pw")[1] == _cert(d / "a-cert.pem")


@pytest.mark.parametrize("argv, message", [
    (["--service", "bad name"], "a service name is"),
    (["--service", "a:"], "no host names"),
    (["--service", "a:not_a host"], "neither a DNS name nor an IP address"),
    (["--service", "a:localhost,256.1.1.1"], "neither a DNS name nor an IP address"),
    (["--service", "a", "--service", "a:localhost"], "given twice"),
    (["--service", "ca"], "a service name is"),
    (["--days", "0"], "at least 1"),
    (["--key-password", "env:LOGBUS_TEST_SURELY_UNSET"], "not set"),
    (["--key-password", "pass:"], "empty password"),
])
def test_bad_input_is_one_line_and_exit_1(tmp_path, capsys, argv, message):
    assert _cli("--dir", str(tmp_path / "pki"), *argv) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("logbus: certs: ") and message in err, err
    assert not (tmp_path / "pki").exists()  # nothing made


def test_dir_that_is_a_file_and_unreadable_ca(tmp_path, capsys):
    (tmp_path / "f").write_text("x")
    assert _cli("--dir", str(tmp_path / "f")) == 1
    assert "not a directory" in capsys.readouterr().err
    d = tmp_path / "pki"
    certs.make(d, [], key_type="ec-p256")
    (d / "ca.pem").write_text("garbage")
    assert _cli("--dir", str(d)) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "ca.pem" in err


def test_unknown_key_type_is_an_argparse_error(tmp_path):
    with pytest.raises(SystemExit) as exc:
        _cli("--dir", str(tmp_path), "--key-type", "dsa-1024")
    assert exc.value.code == 2
