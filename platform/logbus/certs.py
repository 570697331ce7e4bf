"""``logbus certs``: a private CA and the certificates of a secure topology (the ``cryptography`` package).

    logbus certs --dir DIR [--ca-name NAME] --service NAME[:HOST,HOST,...] [--service ...]
                 [--days 825] [--ca-days 3650] [--key-type rsa-2048] [--key-password PW] [--pkcs12-password PW]
                 [--force]

Files in DIR (private keys mode 0600, DIR 0700 when created here):

- ``ca.pem``: the CA certificate, the trust store of every client and broker (``ssl.truststore.location`` with
  ``ssl.truststore.type=PEM``, librdkafka's ``ssl.ca.location``); ``ca-key.pem``: its private key.
- per service: ``NAME.pem``, a PEM key store as Kafka's ``ssl.keystore.type=PEM`` reads it (the private key, then
  the certificate chain: the service's certificate and the CA's); ``NAME-cert.pem`` and ``NAME-key.pem``, the
  certificate and the key apart (librdkafka's ``ssl.certificate.location`` / ``ssl.key.location``, uvicorn's
  ``--ssl-certfile`` / ``--ssl-keyfile``); ``NAME.p12`` with ``--pkcs12-password`` (``ssl.keystore.type=PKCS12``).

A service certificate has CN=NAME, the host names and IP addresses given after the colon as subject alternative
names (NAME itself when none are given) and both the server and the client extended key usages (one
certificate per principal: its CN is the principal of a client certificate, ``User:CN=NAME,O=...``).

Idempotent: an existing CA is reused, never replaced unless ``--force``; an existing certificate is kept unless
it has expired or expires soon (within 30 days, or a third of ``--days`` if that is shorter), its host names or
key type changed, or it was not signed by the CA in DIR. Missing derived files (key store, PKCS12) are written
again from the kept key and certificate.

Passwords (``--key-password`` encrypts the private key in ``NAME.pem`` and ``NAME-key.pem``, Kafka's
``ssl.key.password``; ``--pkcs12-password`` is the PKCS12 store's) take OpenSSL's forms ``pass:PW``, ``env:VAR``
and ``file:PATH`` (first line), or a bare password.

DIR must not be inside a git work tree unless git ignores it (keys are never to be committed). Errors are one
line on stderr and exit code 1 (2 for bad arguments).
"""

from __future__ import annotations

import argparse
import datetime
import ipaddress
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

DEFAULT_DIR = "certs"  # git-ignored in this repository (/certs/)
KEY_TYPES = ("rsa-2048", "rsa-3072", "rsa-4096", "ec-p256", "ec-p384")
_LABEL = r"[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_HOST = re.compile(rf"^(\*\.)?{_LABEL}(\.{_LABEL})*$")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


class CertsError(Exception):
    """A problem reported as one line on stderr."""


@dataclass(frozen=True)
class Service:
    name: str
    hosts: tuple[str, ...]

    @classmethod
    def parse(cls, spec: str) -> "Service":
        name, sep, rest = spec.partition(":")
        name = name.strip()
        if not _NAME.match(name) or name in ("ca",):
            raise CertsError(f"--service {spec!r}: a service name is letters, digits, '.', '_' and '-' (not 'ca')")
        hosts = tuple(h.strip() for h in rest.split(",")) if sep else (name,)
        if sep and not rest.strip():
            raise CertsError(f"--service {spec!r}: no host names after ':'")
        for host in hosts:
            if not host or not (_is_ip(host) or _is_dns_name(host)):
                raise CertsError(f"--service {spec!r}: {host!r} is neither a DNS name nor an IP address")
        return cls(name, tuple(dict.fromkeys(hosts)))


def _is_dns_name(text: str) -> bool:
    """A host name (RFC 1123; a leading ``*.`` wildcard allowed) whose last label is not all digits (a mistyped
    IPv4 address such as 256.1.1.1 is not taken for a name)."""
    return bool(_HOST.match(text)) and len(text) <= 253 and not text.rsplit(".", 1)[-1].isdigit()


def _is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
        return True
    except ValueError:
        return False


# ---- the command line -------------------------------------------------------------------------------------------
def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = ("Make (or keep) a private CA and one certificate per service: PEM key stores, separate "
                          "certificate and key files, optionally PKCS12. Idempotent.")
    parser.add_argument("--dir", default=DEFAULT_DIR,
                        help=f"output directory (default: {DEFAULT_DIR}); refused inside a git work tree unless "
                             "git ignores it")
    parser.add_argument("--ca-name", default="logbus CA", help="the CA's common name (default: %(default)s)")
    parser.add_argument("--org", default="logbus", help="organization (O=) of every subject (default: %(default)s)")
    parser.add_argument("--service", action="append", default=[], metavar="NAME[:HOST,HOST,...]",
                        help="a certificate for NAME valid for these DNS names / IP addresses (default: NAME); "
                             "repeat for each service")
    parser.add_argument("--days", type=int, default=825, help="validity of service certificates (default: 825)")
    parser.add_argument("--ca-days", type=int, default=3650, help="validity of a new CA (default: 3650)")
    parser.add_argument("--key-type", choices=KEY_TYPES, default="rsa-2048", help="default: rsa-2048")
    parser.add_argument("--key-password", metavar="PW",
                        help="encrypt service private keys (Kafka's ssl.key.password); pass:PW, env:VAR, file:PATH")
    parser.add_argument("--pkcs12-password", metavar="PW",
                        help="also write NAME.p12 with this password (ssl.keystore.type=PKCS12); pass:/env:/file:")
    parser.add_argument("--force", action="store_true",
                        help="replace an existing CA (and so re-issue every certificate in --dir)")


def run(args: argparse.Namespace) -> int:
    try:
        services = [Service.parse(s) for s in args.service]
        names = [s.name for s in services]
        duplicate = next((n for n in names if names.count(n) > 1), None)
        if duplicate:
            raise CertsError(f"--service {duplicate} given twice")
        if args.days < 1 or args.ca_days < 1:
            raise CertsError("--days and --ca-days must be at least 1")
        key_password = password(args.key_password, "--key-password")
        p12_password = password(args.pkcs12_password, "--pkcs12-password")
        directory = Path(args.dir)
        check_not_committable(directory)
        made = make(directory, services, ca_name=args.ca_name, org=args.org, days=args.days, ca_days=args.ca_days,
                    key_type=args.key_type, key_password=key_password, pkcs12_password=p12_password,
                    force=args.force)
    except CertsError as exc:
        print(f"logbus: certs: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"logbus: certs: {exc.filename or ''}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    for name, action in made.items():
        print(f"{action:8} {directory / (name + '.pem')}")
    return 0


def password(spec: str | None, option: str) -> str | None:
    """OpenSSL's password forms: ``pass:PW``, ``env:VAR``, ``file:PATH`` (first line); anything else is the
    password itself."""
    if spec is None:
        return None
    kind, sep, rest = spec.partition(":")
    if sep and kind == "pass":
        value = rest
    elif sep and kind == "env":
        if rest not in os.environ:
            raise CertsError(f"{option} env:{rest}: the environment variable is not set")
        value = os.environ[rest]
    elif sep and kind == "file":
        try:
            value = Path(rest).read_text().splitlines()[0] if Path(rest).read_text() else ""
        except OSError as exc:
            raise CertsError(f"{option} file:{rest}: {exc.strerror}") from None
    else:
        value = spec
    if not value:
        raise CertsError(f"{option}: empty password")
    return value


def check_not_committable(directory: Path) -> None:
    """Refuse a directory inside a git work tree unless git ignores it."""
    path = directory.resolve()
    top = next((p for p in (path, *path.parents) if (p / ".git").exists()), None)
    if top is None:
        return
    try:
        probe = subprocess.run(["git", "-C", str(top), "check-ignore", "-q", "--no-index",
                                str(path.relative_to(top) / "ca-key.pem")],
                               capture_output=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise CertsError(f"{directory} is inside the git work tree {top} and git cannot tell whether it is "
                         f"ignored ({exc})") from None
    if probe.returncode != 0:
        raise CertsError(f"{directory} is inside the git work tree {top} and not git-ignored: private keys would be "
                         "committable (add it to .gitignore or choose another --dir)")


# ---- making the files --------------------------------------------------------------------------------------------
def make(directory: Path, services: list[Service], *, ca_name: str = "logbus CA", org: str = "logbus",
         days: int = 825, ca_days: int = 3650, key_type: str = "rsa-2048", key_password: str | None = None,
         pkcs12_password: str | None = None, force: bool = False,
         now: datetime.datetime | None = None) -> dict[str, str]:
    """The CA and the services' certificates in ``directory``; returns {name: created|renewed|kept} (``ca`` too)."""
    now = now or datetime.datetime.now(datetime.timezone.utc)
    if not directory.exists():
        directory.mkdir(parents=True, mode=0o700)
    elif not directory.is_dir():
        raise CertsError(f"{directory} is not a directory")
    done: dict[str, str] = {}
    ca_cert, ca_key, done["ca"] = _ca(directory, ca_name, org, ca_days, key_type, force, now)
    for service in services:
        done[service.name] = _service(directory, service, ca_cert, ca_key, org, days, key_type, key_password,
                                      pkcs12_password, now)
    return done


def _ca(directory: Path, ca_name: str, org: str, ca_days: int, key_type: str, force: bool, now):
    from cryptography import x509

    cert_path, key_path = directory / "ca.pem", directory / "ca-key.pem"
    if cert_path.exists() or key_path.exists():
        if not force:
            if not (cert_path.exists() and key_path.exists()):
                missing = key_path if cert_path.exists() else cert_path
                raise CertsError(f"{missing} is missing but the other half of the CA exists: restore it, or "
                                 "--force to replace the CA (every certificate is then re-issued)")
            try:
                cert = x509.load_pem_x509_certificate(cert_path.read_bytes())
                key = _load_key(key_path.read_bytes(), None, key_path)
            except ValueError as exc:
                raise CertsError(f"{cert_path}: not a PEM certificate ({exc})") from None
            if cert.public_key().public_numbers() != key.public_key().public_numbers():
                raise CertsError(f"{key_path} is not the key of {cert_path}: --force to replace the CA")
            if cert.not_valid_after_utc <= now:
                raise CertsError(f"the CA in {cert_path} expired on {cert.not_valid_after_utc:%Y-%m-%d}: --force "
                                 "to replace it (every certificate is then re-issued)")
            return cert, key, "kept"
    key = _new_key(key_type)
    subject = _subject(ca_name, org)
    cert = (_builder(subject, subject, key.public_key(), now, ca_days)
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, content_commitment=False, key_encipherment=False,
                                         data_encipherment=False, key_agreement=False, key_cert_sign=True,
                                         crl_sign=True, encipher_only=False, decipher_only=False), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .sign(key, _hash(key)))
    _write(key_path, _key_pem(key, None), private=True)
    _write(cert_path, _cert_pem(cert))
    return cert, key, "created" if not force else "replaced"


def _service(directory: Path, service: Service, ca_cert, ca_key, org: str, days: int, key_type: str,
             key_password: str | None, pkcs12_password: str | None, now) -> str:
    from cryptography import x509

    cert_path, key_path = directory / f"{service.name}-cert.pem", directory / f"{service.name}-key.pem"
    store_path, p12_path = directory / f"{service.name}.pem", directory / f"{service.name}.p12"
    action = "created"
    if cert_path.exists() and key_path.exists():
        try:
            cert = x509.load_pem_x509_certificate(cert_path.read_bytes())
        except ValueError:
            cert = None
        data = key_path.read_bytes()
        encrypted = b"ENCRYPTED" in data
        key = _load_key(data, key_password if encrypted else None, key_path) if cert is not None else None
        reason = _stale(cert, key, service, ca_cert, days, key_type, now)
        if reason is None:
            written = False
            if encrypted != bool(key_password):  # the key's protection changed: the same key, written again
                _write(key_path, _key_pem(key, key_password), private=True)
                written = True
            written |= _derived(store_path, p12_path, key, cert, ca_cert, service.name, key_password,
                                pkcs12_password, fresh=written)
            return "updated" if written else "kept"
        action = "renewed"
    key = _new_key(key_type)
    cert = (_builder(_subject(service.name, org), ca_cert.subject, key.public_key(), now, days)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, content_commitment=False,
                                         key_encipherment=not _is_ec(key), data_encipherment=False,
                                         key_agreement=False, key_cert_sign=False, crl_sign=False,
                                         encipher_only=False, decipher_only=False), critical=True)
            .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH,
                                                  x509.oid.ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
            .add_extension(x509.SubjectAlternativeName([_general_name(h) for h in service.hosts]), critical=False)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
            .sign(ca_key, _hash(ca_key)))
    _write(key_path, _key_pem(key, key_password), private=True)
    _write(cert_path, _cert_pem(cert))
    _derived(store_path, p12_path, key, cert, ca_cert, service.name, key_password, pkcs12_password, fresh=True)
    return action


def _stale(cert, key, service: Service, ca_cert, days: int, key_type: str, now) -> str | None:
    """Why an existing certificate must be re-issued (None: keep it)."""
    from cryptography import x509
    from cryptography.exceptions import InvalidSignature

    if cert is None:
        return "unreadable"
    if cert.public_key().public_numbers() != key.public_key().public_numbers():
        return "key does not match"
    if cert.issuer != ca_cert.subject:
        return "other CA"
    try:
        cert.verify_directly_issued_by(ca_cert)
    except (ValueError, TypeError, InvalidSignature):
        return "other CA"
    renew_within = datetime.timedelta(days=min(30, days / 3))
    if cert.not_valid_after_utc - now <= renew_within:
        return "expires"
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return "no host names"
    have = {str(n.value) for n in san}
    if have != {str(ipaddress.ip_address(h)) if _is_ip(h) else h for h in service.hosts}:
        return "host names changed"
    if _key_type(key) != key_type:
        return "key type changed"
    return None


def _derived(store_path: Path, p12_path: Path, key, cert, ca_cert, name: str, key_password, pkcs12_password,
             fresh: bool) -> bool:
    """The PEM key store and the PKCS12 store from the key and certificate; when not ``fresh`` only what is
    missing or holds another certificate. True if something was written."""
    from cryptography.hazmat.primitives.serialization import pkcs12

    written = False
    mine = _cert_pem(cert)
    if fresh or not store_path.exists() or mine not in store_path.read_bytes() or \
            not _opens(store_path, key_password):
        _write(store_path, _key_pem(key, key_password) + mine + _cert_pem(ca_cert), private=True)
        written = True
    if pkcs12_password is not None:
        current = False
        if not fresh and p12_path.exists():
            try:
                _, stored, _ = pkcs12.load_key_and_certificates(p12_path.read_bytes(), pkcs12_password.encode())
                current = stored is not None and stored == cert
            except ValueError:
                current = False
        if not current:
            from cryptography.hazmat.primitives import serialization

            blob = pkcs12.serialize_key_and_certificates(
                name.encode(), key, cert, [ca_cert],
                serialization.BestAvailableEncryption(pkcs12_password.encode()))
            _write(p12_path, blob, private=True)
            written = True
    return written


def _opens(path: Path, key_password: str | None) -> bool:
    try:
        _load_key(path.read_bytes(), key_password, path)
        return True
    except CertsError:
        return False


# ---- cryptography helpers ----------------------------------------------------------------------------------------
def _new_key(key_type: str):
    from cryptography.hazmat.primitives.asymmetric import ec, rsa

    kind, _, size = key_type.partition("-")
    if kind == "rsa":
        return rsa.generate_private_key(public_exponent=65537, key_size=int(size))
    if kind == "ec":
        return ec.generate_private_key({"p256": ec.SECP256R1(), "p384": ec.SECP384R1()}[size])
    raise CertsError(f"--key-type {key_type}: one of {', '.join(KEY_TYPES)}")


def _key_type(key) -> str:
    from cryptography.hazmat.primitives.asymmetric import ec, rsa

    if isinstance(key, rsa.RSAPrivateKey):
        return f"rsa-{key.key_size}"
    if isinstance(key, ec.EllipticCurvePrivateKey):
        return {"secp256r1": "ec-p256", "secp384r1": "ec-p384"}.get(key.curve.name, key.curve.name)
    return type(key).__name__


def _is_ec(key) -> bool:
    return _key_type(key).startswith("ec-")


def _hash(signing_key):
    from cryptography.hazmat.primitives import hashes

    return hashes.SHA384() if _key_type(signing_key) == "ec-p384" else hashes.SHA256()


def _subject(common_name: str, org: str):
    from cryptography import x509
    from cryptography.x509.oid import NameOID

    return x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, org),
                      x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _builder(subject, issuer, public_key, now, days: int):
    from cryptography import x509

    return (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer).public_key(public_key)
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))  # clocks a little behind still accept it
            .not_valid_after(now + datetime.timedelta(days=days)))


def _general_name(host: str):
    from cryptography import x509

    return x509.IPAddress(ipaddress.ip_address(host)) if _is_ip(host) else x509.DNSName(host)


def _key_pem(key, password: str | None) -> bytes:
    from cryptography.hazmat.primitives import serialization

    encryption = (serialization.BestAvailableEncryption(password.encode()) if password
                  else serialization.NoEncryption())
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption)


def _cert_pem(cert) -> bytes:
    from cryptography.hazmat.primitives import serialization

    return cert.public_bytes(serialization.Encoding.PEM)


def _load_key(data: bytes, password: str | None, path: Path):
    from cryptography.hazmat.primitives import serialization

    try:
        return serialization.load_pem_private_key(data, password.encode() if password else None)
    except TypeError:
        if password:
            raise CertsError(f"{path}: the private key is not encrypted") from None
        raise CertsError(f"{path}: the private key is encrypted: give its --key-password") from None
    except ValueError:
        if b"ENCRYPTED" in data:
            raise CertsError(f"{path}: --key-password does not open the private key") from None
        raise CertsError(f"{path}: not a PEM private key") from None


def _write(path: Path, data: bytes, private: bool = False) -> None:
    """Atomically (a temporary file renamed over), private files created 0600 from the start."""
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600 if private else 0o644)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
        os.chmod(tmp, 0o600 if private else 0o644)
        os.replace(tmp, path)
    except BaseException:
        if tmp.exists():
            tmp.unlink()
        raise
