"""This broker's OAUTHBEARER login to other brokers with an OpenID Connect client-credentials grant (KIP-768's
client side, Kafka's ``OAuthBearerLoginCallbackHandler``), for an inter-broker listener whose tokens are checked
against a JWKS.

Kafka's settings, each also for one listener and mechanism (``listener.name.<l>.oauthbearer.<key>``):
``sasl.login.callback.handler.class`` set to that handler, ``sasl.oauthbearer.token.endpoint.url``,
``sasl.login.connect.timeout.ms`` and ``sasl.login.read.timeout.ms``; the listener's ``OAuthBearerLoginModule``
JAAS entry gives ``clientId``, ``clientSecret`` and an optional ``scope``, and for an https endpoint optional
``ssl.*`` options (a trust store; the host name is checked unless ``ssl.endpoint.identification.algorithm`` is
empty), as Kafka's ``JaasOptionsUtils`` reads them. A token is fetched when a connection is opened and reused
until 80% of its lifetime (:class:`settings.oidc.OidcTokens`); the session it opens ends with the token, and
:mod:`broker.network.connect` reconnects before that, with a fresh token."""

from __future__ import annotations

from broker.config import OAUTHBEARER_LOGIN_HANDLERS
from settings.oidc import OidcTokens

_cache: dict[tuple[int, str], tuple[object, OidcTokens]] = {}  # (id(config), listener) -> (config, tokens)


def handler_class(config, listener: str) -> str | None:
    return config.mechanism_value(listener, "oauthbearer", "sasl.login.callback.handler.class")


def tokens(config, listener: str) -> OidcTokens | None:
    """The token source of this broker's OIDC login on ``listener``, None for Kafka's unsecured login (no
    login handler set). Nothing is fetched here; ValueError names a setting that is missing or wrong."""
    from broker.security.sasl import oauthbearer_options

    handler = handler_class(config, listener)
    if handler is None:
        return None
    cached = _cache.get((id(config), listener))
    if cached is not None and cached[0] is config:
        return cached[1]
    if handler not in OAUTHBEARER_LOGIN_HANDLERS:
        raise ValueError(f"sasl.login.callback.handler.class {handler} is not supported (only "
                         f"{OAUTHBEARER_LOGIN_HANDLERS[0]})")
    url = config.mechanism_value(listener, "oauthbearer", "sasl.oauthbearer.token.endpoint.url")
    if not url or not url.lower().startswith(("http://", "https://")):
        raise ValueError(f"{handler} needs sasl.oauthbearer.token.endpoint.url (http:// or https://), not {url!r}")
    options = oauthbearer_options(config, listener)
    missing = [k for k in ("clientId", "clientSecret") if not options.get(k)]
    if missing:
        raise ValueError(f"the OAuthBearerLoginModule JAAS entry needs {' and '.join(missing)} for {handler}")
    timeout = max(config.mechanism_value(listener, "oauthbearer", "sasl.login.connect.timeout.ms"),
                  config.mechanism_value(listener, "oauthbearer", "sasl.login.read.timeout.ms")) / 1000
    context = _context(options) if url.lower().startswith("https://") else None
    source = OidcTokens(url, options["clientId"], options["clientSecret"], options.get("scope") or None,
                        context=context, timeout=timeout)
    _cache[(id(config), listener)] = (config, source)
    return source


def _context(options: dict[str, str]):
    from broker.security import tls

    def get(key: str):
        if key == "ssl.endpoint.identification.algorithm":
            return options.get(key, "https")
        return options.get(key)

    try:
        return tls.client_context(get)
    except (OSError, ValueError) as exc:
        raise ValueError(f"the token endpoint's ssl.* JAAS options: {exc}") from None
