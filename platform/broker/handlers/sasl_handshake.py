"""SaslHandshake (key 17), v0–1: the client names its SASL mechanism on a SASL_PLAINTEXT / SASL_SSL listener.
v1: the tokens then travel in SaslAuthenticate; v0: as bare size-prefixed frames (the listener reads them).

On an authenticated connection whose session ends (KIP-368: ``connections.max.reauth.ms`` or a token's expiry),
a handshake at least a second after the last re-authentication began starts a new one, as Kafka's
``KafkaChannel.maybeBeginServerReauthentication``: the same mechanism (else the connection closes at the next
token, unanswered), then the same principal (else SASL_AUTHENTICATION_FAILED and a close); other requests close
the connection until it completes. Otherwise a second handshake is ILLEGAL_SASL_STATE, as in Kafka."""

import time

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
    reauthenticate = session.may_reauthenticate(time.monotonic())
    if (session.authenticated and not reauthenticate) or (not session.authenticated and session.sasl is not None):
        session.close_after_response = not session.authenticated  # after authentication: an error, as Kafka
        return build(cls, error_code=ErrorCode.illegal_sasl_state, mechanisms=tuple(enabled))
    if mechanism not in enabled:
        session.close_after_response = True
        return build(cls, error_code=ErrorCode.unsupported_sasl_mechanism, mechanisms=tuple(enabled))
    refused = None
    if reauthenticate:
        session.reauthenticating_as, session.authenticated = session.principal, False
        session.reauth_started = time.monotonic()
        if mechanism != session.mechanism:  # Kafka answers the handshake, then closes at the first token
            refused = (f"SASL mechanism '{mechanism}' requested by client is not supported for re-authentication "
                       f"of mechanism '{session.mechanism}'")
    listener = session.listener
    session.sasl = sasl.ServerExchange(
        mechanism, lambda: sasl.plain_users(broker.config, listener),
        lambda user, mech: credentials.lookup(broker, user, mech),
        sasl.token_validator(broker.config, listener) if mechanism == "OAUTHBEARER" else None, refused,
        reauthenticating=reauthenticate, gssapi=lambda: sasl.gssapi_acceptor(broker.config, listener))
    session.raw_tokens = header.api_version == 0
    return build(cls, error_code=ErrorCode.none, mechanisms=tuple(enabled))
