"""TLS contexts from Kafka's ``ssl.*`` keys: JKS, PKCS12 or PEM key and trust stores.

``get(key)`` returns a key's value as one listener sees it (``listener.name.<l>.ssl.*`` overrides first), the
default included, so an unset ``ssl.keystore.type``/``ssl.truststore.type`` cannot be told from Kafka's default
``JKS``. A store file of type JKS or PKCS12 is therefore read by its content: the JKS magic (0xFEEDFEED; JCEKS
is refused) -> JKS, text with ``-----BEGIN`` -> PEM (what logbus read before it read JKS, whatever the type),
any other DER -> PKCS12 (Java also reads a PKCS12 file given as JKS and back, ``keystore.type.compat``). Type
PEM is read as PEM only.

A JKS key store needs ``ssl.keystore.password`` (as Kafka); its key is decrypted with ``ssl.key.password``, or
the store password when that is unset (Kafka's rule). With several private key entries the first in the file is
used. A trust store's password is optional: without it a JKS store's integrity digest is not checked (as Java).
Trusted from a JKS or PKCS12 trust store: its trusted certificate entries and each private key entry's own
certificate (Java's trust managers); of a PKCS12 file with no private key, every certificate.
"""

from __future__ import annotations

import os
import ssl
import tempfile
from typing import Callable

from broker.security import jks

_VERSIONS = {"TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}
_CLIENT_AUTH = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL, "required": ssl.CERT_REQUIRED}


class TlsConfigError(ValueError):
    pass


def server_context(get: Callable[[str], object]) -> ssl.SSLContext:
    """The context of an SSL / SASL_SSL listener: its key store, and its trust store when clients are asked
    for certificates (``ssl.client.auth``)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    _versions(context, get)
    _load_keystore(context, get, required=True)
    mode = _CLIENT_AUTH[get("ssl.client.auth") or "none"]
    if mode != ssl.CERT_NONE:
        if not _load_truststore(context, get):
            raise TlsConfigError("ssl.client.auth needs ssl.truststore.location or ssl.truststore.certificates")
        context.verify_mode = mode
    return context


def client_context(get: Callable[[str], object]) -> ssl.SSLContext:
    """The context of this broker's connections to other brokers: their certificates are checked against the
    trust store (the system's CAs without one), the host name too unless ssl.endpoint.identification.algorithm
    is empty; the key store, if any, is this broker's client certificate."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    _versions(context, get)
    if not _load_truststore(context, get):
        context.load_default_certs()
    context.check_hostname = (get("ssl.endpoint.identification.algorithm") or "").lower() == "https"
    _load_keystore(context, get, required=False)
    return context


def peer_principal(ssl_object) -> str:
    """Kafka's principal of a TLS peer: ``User:`` and the certificate's distinguished name (RFC 2253 order),
    ``User:ANONYMOUS`` without a certificate."""
    cert = ssl_object.getpeercert() if ssl_object is not None else None
    if not cert:
        return "User:ANONYMOUS"
    names = {"commonName": "CN", "organizationalUnitName": "OU", "organizationName": "O", "localityName": "L",
             "stateOrProvinceName": "ST", "countryName": "C", "domainComponent": "DC", "emailAddress": "EMAILADDRESS"}
    parts = [f"{names.get(k, k)}={v}" for rdn in reversed(cert.get("subject", ())) for k, v in rdn]
    return "User:" + ",".join(parts)


def _versions(context: ssl.SSLContext, get) -> None:
    wanted = [_VERSIONS[v] for v in (get("ssl.enabled.protocols") or ["TLSv1.2", "TLSv1.3"]) if v in _VERSIONS]
    if not wanted:
        raise TlsConfigError("ssl.enabled.protocols: none of TLSv1.2, TLSv1.3")
    context.minimum_version, context.maximum_version = min(wanted), max(wanted)


def _load_keystore(context: ssl.SSLContext, get, required: bool) -> None:
    location, chain, key = get("ssl.keystore.location"), get("ssl.keystore.certificate.chain"), get("ssl.keystore.key")
    if not (location or chain):
        if required:
            raise TlsConfigError("an SSL listener needs ssl.keystore.location (or ssl.keystore.certificate.chain "
                                 "and ssl.keystore.key)")
        return
    if chain:
        if not key:
            raise TlsConfigError("ssl.keystore.certificate.chain needs ssl.keystore.key")
        _load_pem_chain(context, _pem_text(chain) + "\n" + _pem_text(key), get("ssl.key.password"))
        return
    try:
        kind, data = _read_store("ssl.keystore", location, get("ssl.keystore.type"))
        if kind == "JKS":
            _load_pem_chain(context, _jks_key_pem(data, location, get), None)
        elif kind == "PKCS12":
            _load_pem_chain(context, _pkcs12_to_pem(data, location, get("ssl.keystore.password")), None)
        else:
            context.load_cert_chain(location, password=get("ssl.key.password"))
    except (OSError, ssl.SSLError) as exc:
        raise TlsConfigError(f"ssl.keystore.location {location}: {exc}") from None


def _load_truststore(context: ssl.SSLContext, get) -> bool:
    location, inline = get("ssl.truststore.location"), get("ssl.truststore.certificates")
    try:
        if location:
            kind, data = _read_store("ssl.truststore", location, get("ssl.truststore.type"))
            if kind == "PEM":
                context.load_verify_locations(cafile=location)
            else:
                certs = _trusted_certs(kind, data, location, get("ssl.truststore.password"))
                if not certs:
                    raise TlsConfigError(f"ssl.truststore.location {location}: no trusted certificate in this "
                                         f"{kind} store")
                context.load_verify_locations(cadata=b"".join(certs))
        if inline:
            context.load_verify_locations(cadata=_pem_text(inline))
    except (OSError, ssl.SSLError) as exc:
        raise TlsConfigError(f"ssl.truststore: {exc}") from None
    return bool(location or inline)


def _read_store(name: str, location: str, declared) -> tuple[str, bytes | None]:
    """(the format to read, the file's bytes) of the store ``name`` (``ssl.keystore`` / ``ssl.truststore``): its
    type only tells PEM from the binary formats, which are told apart by content (module doc). Type PEM is left
    to the ssl module (bytes None)."""
    kind = (declared or "JKS").upper()
    if kind == "PEM":
        return "PEM", None
    with open(location, "rb") as f:
        data = f.read()
    if jks.is_keystore(data):
        return "JKS", data
    if b"-----BEGIN " in data:
        return "PEM", data
    if data[:1] == b"\x30":  # a DER SEQUENCE: PKCS12's PFX
        return "PKCS12", data
    raise TlsConfigError(f"{name}.location {location}: neither a JKS, a PKCS12 nor a PEM file "
                         f"({name}.type={kind})")


def _pem_text(value: str) -> str:
    """Inline PEM from a properties file may have its line breaks escaped or folded to spaces."""
    text = value.replace("\\n", "\n")
    if "\n" not in text.strip():
        for tag in ("-----BEGIN ", "-----END "):
            text = text.replace(" " + tag, "\n" + tag)
        out = []
        for line in text.split("\n"):
            head, sep, rest = line.partition("----- ")
            out.append(head + "-----\n" + rest.replace(" ", "\n") if sep else line)
        text = "\n".join(out)
    return text


def _load_pem_chain(context: ssl.SSLContext, pem: str, password: str | None) -> None:
    # the ssl module loads key stores from files only: a private temporary file, removed at once
    fd, path = tempfile.mkstemp(suffix=".pem")
    try:
        with os.fdopen(fd, "w") as out:
            out.write(pem)
        context.load_cert_chain(path, password=password)
    except ssl.SSLError as exc:
        raise TlsConfigError(f"ssl.keystore: {exc}") from None
    finally:
        os.unlink(path)


def _jks_key_pem(data: bytes, location: str, get) -> str:
    """The first private key entry of a JKS key store and its chain, as PEM."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.serialization import load_der_private_key

    store_password, key_password = get("ssl.keystore.password"), get("ssl.key.password")
    if store_password is None:
        raise TlsConfigError(f"ssl.keystore.location {location}: a JKS key store needs ssl.keystore.password")
    try:
        store = jks.load(data, store_password)
    except jks.StorePasswordError as exc:
        raise TlsConfigError(f"ssl.keystore.password: {exc} ({location})") from None
    except jks.JksError as exc:
        raise TlsConfigError(f"ssl.keystore.location {location}: {exc}") from None
    entry = next(iter(store.private_keys.values()), None)  # several: the first in the file
    if entry is None:
        raise TlsConfigError(f"ssl.keystore.location {location}: no private key entry in this JKS store")
    try:
        key = load_der_private_key(entry.decrypt(key_password if key_password is not None else store_password), None)
    except jks.KeyPasswordError as exc:
        name = "ssl.key.password" if key_password is not None else "ssl.keystore.password (ssl.key.password unset)"
        raise TlsConfigError(f"{name}: {exc} in {location}") from None
    except (ValueError, TypeError) as exc:  # a malformed entry, a key cryptography cannot read
        raise TlsConfigError(f"ssl.keystore.location {location}: {exc}") from None
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                            serialization.NoEncryption()).decode()
    return pem + "".join(ssl.DER_cert_to_PEM_cert(c) for c in entry.chain)


def _trusted_certs(kind: str, data: bytes, location: str, password: str | None) -> list[bytes]:
    """DER certificates trusted from a JKS or PKCS12 trust store (module doc)."""
    if kind == "JKS":
        try:
            return jks.load(data, password).trust_anchors()
        except jks.StorePasswordError as exc:
            raise TlsConfigError(f"ssl.truststore.password: {exc} ({location})") from None
        except jks.JksError as exc:
            raise TlsConfigError(f"ssl.truststore.location {location}: {exc}") from None
    from cryptography.hazmat.primitives.serialization import Encoding, pkcs12

    try:
        p12 = pkcs12.load_pkcs12(data, password.encode() if password else None)
    except ValueError as exc:
        hint = "" if password else " (ssl.truststore.password is unset)"
        raise TlsConfigError(f"ssl.truststore.location {location}: {exc}{hint}") from None
    certs = [] if p12.cert is None else [p12.cert.certificate]
    certs += [c.certificate for c in p12.additional_certs if p12.key is None or c.friendly_name is not None]
    return list(dict.fromkeys(c.public_bytes(Encoding.DER) for c in certs))


def _pkcs12_to_pem(data: bytes, location: str, password: str | None) -> str:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.serialization import pkcs12

    try:
        key, cert, extra = pkcs12.load_key_and_certificates(data, password.encode() if password else None)
    except ValueError as exc:
        raise TlsConfigError(f"ssl.keystore.location {location}: {exc} (ssl.keystore.password)") from None
    if key is None:
        raise TlsConfigError(f"ssl.keystore.location {location}: no private key in this PKCS12 store")
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                            serialization.NoEncryption())
    for c in [cert, *(extra or [])]:
        if c is not None:
            pem += c.public_bytes(serialization.Encoding.PEM)
    return pem.decode()
