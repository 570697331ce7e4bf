"""The listeners and TLS settings of logbus's HTTP services (schema registry, audit service) in Confluent's REST
names: ``listeners=http://host:port,https://host:port``, ``ssl.keystore.location`` / ``ssl.keystore.password`` /
``ssl.key.password`` / ``ssl.keystore.type`` (PEM: private key + certificate chain in one file, Kafka's PEM key
store; PKCS12), ``ssl.truststore.location`` (PEM CA certificates checking client certificates) and
``ssl.client.authentication`` (NONE, REQUESTED, REQUIRED). JKS is refused. :func:`uvicorn_kwargs` renders a
listener for uvicorn.Config."""

from __future__ import annotations

import os
import secrets
import ssl
import tempfile
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

from settings.properties import ConfigError

SERVER_SSL_KEYS = ("ssl.keystore.location", "ssl.keystore.password", "ssl.key.password", "ssl.keystore.type",
                   "ssl.truststore.location", "ssl.truststore.password", "ssl.truststore.type",
                   "ssl.client.authentication")
CLIENT_AUTH = {"NONE": ssl.CERT_NONE, "REQUESTED": ssl.CERT_OPTIONAL, "REQUIRED": ssl.CERT_REQUIRED}


@dataclass(frozen=True)
class Listener:
    scheme: str
    host: str
    port: int

    @property
    def url(self) -> str:
        return f"{self.scheme}://{self.host}:{self.port}"


def parse_listeners(value: str) -> list[Listener]:
    out = []
    for item in (i.strip() for i in value.split(",") if i.strip()):
        url = urlparse(item)
        if url.scheme not in ("http", "https") or not url.hostname or not url.port:
            raise ConfigError(f"listeners: expected http://host:port or https://host:port, got {item!r}")
        out.append(Listener(url.scheme, url.hostname, url.port))
    if not out:
        raise ConfigError("listeners: no listener")
    return out


def _get(props: dict, key: str) -> str | None:
    value = props.get(key)
    return value.strip() if isinstance(value, str) and value.strip() else None


def check_ssl(props: dict, listeners: list[Listener]) -> None:
    """ConfigError for settings an https listener cannot serve with."""
    if not any(lst.scheme == "https" for lst in listeners):
        return
    kind = (_get(props, "ssl.keystore.type") or "PEM").upper()
    if kind == "JKS":
        raise ConfigError("ssl.keystore.type=JKS: logbus reads PEM and PKCS12 key stores (convert with keytool "
                          "-importkeystore -deststoretype PKCS12, or openssl to PEM)")
    if kind not in ("PEM", "PKCS12"):
        raise ConfigError(f"ssl.keystore.type={kind}: expected PEM or PKCS12")
    location = _get(props, "ssl.keystore.location")
    if not location:
        raise ConfigError("an https listener needs ssl.keystore.location")
    if not Path(location).is_file():
        raise ConfigError(f"ssl.keystore.location={location}: no such file")
    trust_kind = (_get(props, "ssl.truststore.type") or "PEM").upper()
    if trust_kind != "PEM":
        raise ConfigError(f"ssl.truststore.type={trust_kind}: logbus reads PEM trust stores only")
    auth = (_get(props, "ssl.client.authentication") or "NONE").upper()
    if auth not in CLIENT_AUTH:
        raise ConfigError(f"ssl.client.authentication={auth}: expected NONE, REQUESTED or REQUIRED")
    if auth != "NONE" and not _get(props, "ssl.truststore.location"):
        raise ConfigError(f"ssl.client.authentication={auth} needs ssl.truststore.location (the CA of the "
                          "client certificates)")
    ssl_context(props)  # the files load and the passwords fit


def _pkcs12_to_pem(location: str, password: str | None) -> tuple[str, str]:
    """A PKCS12 key store as a private PEM file (key encrypted with a fresh password): (path, password)."""
    from cryptography.hazmat.primitives.serialization import (BestAvailableEncryption, Encoding, PrivateFormat,
                                                              pkcs12)

    try:
        key, cert, chain = pkcs12.load_key_and_certificates(Path(location).read_bytes(),
                                                            password.encode() if password else None)
    except (ValueError, OSError) as exc:
        raise ConfigError(f"ssl.keystore.location={location}: cannot read the PKCS12 key store ({exc})") from None
    if key is None or cert is None:
        raise ConfigError(f"ssl.keystore.location={location}: no private key and certificate")
    fresh = secrets.token_urlsafe(24)
    fd, path = tempfile.mkstemp(prefix="logbus-keystore-", suffix=".pem")
    with os.fdopen(fd, "wb") as out:  # mkstemp: mode 0600
        out.write(key.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, BestAvailableEncryption(fresh.encode())))
        for c in [cert, *(chain or [])]:
            out.write(c.public_bytes(Encoding.PEM))
    return path, fresh


def uvicorn_kwargs(props: dict, listener: Listener) -> dict:
    """uvicorn.Config keyword arguments for ``listener`` (host, port and, for https, the ssl_* options)."""
    kwargs: dict = {"host": listener.host, "port": listener.port}
    if listener.scheme != "https":
        return kwargs
    location = _get(props, "ssl.keystore.location")
    if (_get(props, "ssl.keystore.type") or "PEM").upper() == "PKCS12":
        location, password = _pkcs12_to_pem(location, _get(props, "ssl.keystore.password"))
    else:
        password = _get(props, "ssl.key.password") or _get(props, "ssl.keystore.password")
    kwargs.update(ssl_certfile=location, ssl_keyfile=location, ssl_keyfile_password=password)
    auth = (_get(props, "ssl.client.authentication") or "NONE").upper()
    if _get(props, "ssl.truststore.location"):
        kwargs["ssl_ca_certs"] = _get(props, "ssl.truststore.location")
    kwargs["ssl_cert_reqs"] = CLIENT_AUTH[auth]
    return kwargs


def ssl_context(props: dict) -> ssl.SSLContext:
    """The server context the settings describe (what uvicorn builds from :func:`uvicorn_kwargs`)."""
    kw = uvicorn_kwargs(props, Listener("https", "-", 0))
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        context.load_cert_chain(kw["ssl_certfile"], kw["ssl_keyfile"], kw["ssl_keyfile_password"])
        if "ssl_ca_certs" in kw:
            context.load_verify_locations(kw["ssl_ca_certs"])
    except (ssl.SSLError, OSError) as exc:
        raise ConfigError(f"ssl.keystore.location / ssl.truststore.location: cannot load ({exc})") from None
    finally:
        if (_get(props, "ssl.keystore.type") or "PEM").upper() == "PKCS12":
            Path(kw["ssl_certfile"]).unlink(missing_ok=True)
    context.verify_mode = kw["ssl_cert_reqs"]
    return context


def uvicorn_config(app, props: dict, listener: Listener, **extra):
    """A loaded uvicorn.Config serving ``app`` on ``listener``. uvicorn reads the key store while loading, so the
    private PEM copy of a PKCS12 key store is removed at once."""
    import uvicorn

    kwargs = uvicorn_kwargs(props, listener)
    # log_config=None: uvicorn's loggers go through the service's own handler (text or --log-format json)
    config = uvicorn.Config(app, **kwargs, **{"log_config": None, **extra})
    try:
        config.load()
    finally:
        if kwargs.get("ssl_certfile") and (_get(props, "ssl.keystore.type") or "PEM").upper() == "PKCS12":
            Path(kwargs["ssl_certfile"]).unlink(missing_ok=True)
    return config
