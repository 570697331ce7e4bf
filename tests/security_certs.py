"""A throwaway CA and certificates for the security tests (the cryptography package)."""

import datetime
import ipaddress
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "logbus-test"),
                      x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _key_pem(key, password: str | None = None) -> bytes:
    enc = serialization.BestAvailableEncryption(password.encode()) if password else serialization.NoEncryption()
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, enc)


def make_pki(directory: Path, names: list[str]) -> dict[str, Path]:
    """``ca.pem`` and, for each name, ``<name>.pem`` (private key + certificate, a Kafka PEM key store whose key
    is encrypted with password ``keypass``) valid for 127.0.0.1 and localhost."""
    directory.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.timezone.utc)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = (x509.CertificateBuilder().subject_name(_name("test-ca")).issuer_name(_name("test-ca"))
          .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
          .not_valid_before(now - datetime.timedelta(hours=1)).not_valid_after(now + datetime.timedelta(days=1))
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
          .sign(ca_key, hashes.SHA256()))
    out = {"ca": directory / "ca.pem"}
    out["ca"].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    for name in names:
        key = ec.generate_private_key(ec.SECP256R1())
        cert = (x509.CertificateBuilder().subject_name(_name(name)).issuer_name(ca.subject)
                .public_key(key.public_key()).serial_number(x509.random_serial_number())
                .not_valid_before(now - datetime.timedelta(hours=1)).not_valid_after(now + datetime.timedelta(days=1))
                .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost"),
                                                            x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                               critical=False)
                .sign(ca_key, hashes.SHA256()))
        out[name] = directory / f"{name}.pem"
        out[name].write_bytes(_key_pem(key, "keypass") + cert.public_bytes(serialization.Encoding.PEM))
        out[name + "-key"] = directory / f"{name}-key.pem"
        out[name + "-key"].write_bytes(_key_pem(key))
        out[name + "-cert"] = directory / f"{name}-cert.pem"
        out[name + "-cert"].write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return out
