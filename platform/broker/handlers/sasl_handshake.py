"""SaslHandshake (key 17), v0–1: the client names its SASL mechanism on a SASL_PLAINTEXT / SASL_SSL listener.
v1: the tokens then travel in SaslAuthenticate; v0: as bare size-prefixed frames (the listener reads them).

On a connection already authenticated by a client that can re-authenticate (it sent SaslAuthenticate v1+), a
handshake begins a re-authentication (KIP-368): the same mechanism, then the same principal, or the connection
closes after the error; other requests are refused until it completes. Otherwise a second handshake is
ILLEGAL_SASL_STATE, as in Kafka."""

from broker.handlers.registry import handles
from broker.protocol.messages import ErrorCode, build, response_class
from broker.security import credentials, sasl

KEY = 17


@handles(KEY, "SaslHandshake", 0, 1)
def handle(broker, header, request):
    from broker.network.server import current_session

    cls = response_class(KEY, header.api_version)
    session = current_session.get()
    if session is None or not session.protocol.startswith("SASL_"):
        return build(cls, error_code=ErrorCode.illegal_sasl_state, mechanisms=())
    enabled = sasl.enabled_mechanisms(broker.config, session.listener)
    mechanism = request.mechanism.upper()
    reauthenticate = session.authenticated and session.reauth_supported and header.api_version >= 1
    if (session.authenticated and not reauthenticate) or (not session.authenticated and session.sasl is not None):
        session.close_after_response = not session.authenticated  # after authentication: an error, as Kafka
        return build(cls, error_code=ErrorCode.illegal_sasl_state, mechanisms=tuple(enabled))
    if mechanism not in enabled:
        session.close_after_response = True
        return build(cls, error_code=ErrorCode.unsupported_sasl_mechanism, mechanisms=tuple(enabled))
    refused = None
    if reauthenticate:
        session.reauthenticating_as, session.authenticated = session.principal, False
        if mechanism != session.mechanism:  # Kafka answers the handshake, then fails at the first token
            refused = (f"SASL mechanism '{mechanism}' requested by client is not supported for re-authentication "
                       f"of mechanism '{session.mechanism}'")
    listener = session.listener
    session.sasl = sasl.ServerExchange(
        mechanism, lambda: sasl.plain_users(broker.config, listener),
        lambda user, mech: credentials.lookup(broker, user, mech),
        sasl.token_validator(broker.config, listener) if mechanism == "OAUTHBEARER" else None, refused)
    session.raw_tokens = header.api_version == 0
    return build(cls, error_code=ErrorCode.none, mechanisms=tuple(enabled))
