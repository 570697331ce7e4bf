"""SaslAuthenticate (key 36), v0–2: one SASL token each way. A failed authentication is answered
SASL_AUTHENTICATION_FAILED with Kafka's message, then the connection is closed (as Kafka does). The last answer
carries the session's lifetime (v1+, KIP-368): ``connections.max.reauth.ms`` or an OAUTHBEARER token's expiry,
0 when the session does not expire."""

from broker.handlers.registry import NO_RESPONSE, handles
from broker.protocol.messages import ErrorCode, build, response_class
from broker.security import sasl

KEY = 36


@handles(KEY, "SaslAuthenticate", 0, 2)
async def handle(broker, header, request):
    from broker.network.server import current_session

    cls = response_class(KEY, header.api_version)
    session = current_session.get()
    if session is None or session.sasl is None or session.authenticated:
        if session is not None:  # during authentication: answer and close; after it (or no SASL): an error only
            session.close_after_response = not session.authenticated
        return build(cls, error_code=ErrorCode.illegal_sasl_state, error_message="SaslAuthenticate out of order: "
                     "SaslHandshake first, once per connection", auth_bytes=b"", session_lifetime=0)
    reauthentication = session.reauthenticating_as is not None
    if session.sasl.refused is not None:  # a re-authentication with another mechanism: Kafka closes, unanswered
        session.close_after_response = True
        broker.metrics.failed_reauthentications[session.listener] += 1
        return NO_RESPONSE
    lifetime = 0
    try:
        reply = await session.sasl.respond(request.auth_bytes)
        if session.sasl.complete:
            lifetime = sasl.finish(session, broker.config, session.sasl)
    except sasl.SaslFailure as exc:
        session.close_after_response = True
        failed = broker.metrics.failed_reauthentications if reauthentication else broker.metrics.failed_authentications
        failed[session.listener] += 1
        return build(cls, error_code=ErrorCode.sasl_authentication_failed, error_message=str(exc), auth_bytes=b"",
                     session_lifetime=0)
    if reauthentication and session.authenticated:
        broker.metrics.successful_reauthentications[session.listener] += 1
    return build(cls, error_code=ErrorCode.none, error_message=None, auth_bytes=reply, session_lifetime=lifetime)
