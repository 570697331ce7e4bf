"""TLS contexts from Kafka's ``ssl.*`` keys (PEM or PKCS12 key stores, PEM trust stores).

``get(key)`` returns a key's value as one listener sees it (``listener.name.<l>.ssl.*`` overrides first).
"""

from __future__ import annotations

import os
import ssl
import tempfile
from typing import Callable

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
    kind = (get("ssl.keystore.type") or "JKS").upper()
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
    if kind == "JKS":
        raise TlsConfigError("ssl.keystore.type=JKS cannot be read by logbus: use PEM or PKCS12")
    try:
        if kind == "PKCS12":
            _load_pem_chain(context, _pkcs12_to_pem(location, get("ssl.keystore.password")), None)
        else:
            context.load_cert_chain(location, password=get("ssl.key.password"))
    except (OSError, ssl.SSLError) as exc:
        raise TlsConfigError(f"ssl.keystore.location {location}: {exc}") from None


def _load_truststore(context: ssl.SSLContext, get) -> bool:
    location, inline = get("ssl.truststore.location"), get("ssl.truststore.certificates")
    try:
        if location:
            context.load_verify_locations(cafile=location)
        if inline:
            context.load_verify_locations(cadata=_pem_text(inline))
    except (OSError, ssl.SSLError) as exc:
        raise TlsConfigError(f"ssl.truststore: {exc}") from None
    return bool(location or inline)


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


def _pkcs12_to_pem(location: str, password: str | None) -> str:
    try:
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.serialization import pkcs12
    except ImportError:  # pragma: no cover
        raise TlsConfigError("ssl.keystore.type=PKCS12 needs the cryptography package") from None
    with open(location, "rb") as f:
        key, cert, extra = pkcs12.load_key_and_certificates(f.read(), password.encode() if password else None)
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                            serialization.NoEncryption())
    for c in [cert, *(extra or [])]:
        if c is not None:
            pem += c.public_bytes(serialization.Encoding.PEM)
    return pem.decode()
