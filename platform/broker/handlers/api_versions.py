"""ApiVersions (key 18), v0–3, built from the handler registry; KIP-511 fallback for newer versions."""

from broker.handlers.registry import APIS, handles
from broker.protocol.messages import ErrorCode, build, nested, response_class

KEY = 18


def api_versions_response(version: int, error: ErrorCode = ErrorCode.none):
    cls = response_class(KEY, version)
    entry = nested(cls, "ApiVersion")
    keys = tuple(build(entry, api_key=a.key, min_version=a.min_version, max_version=a.max_version)
                 for a in sorted(APIS.values(), key=lambda a: a.key))
    return build(cls, error_code=error, api_keys=keys, throttle_time=0)


@handles(KEY, "ApiVersions", 0, 3)
def handle(broker, header, request):
    return api_versions_response(header.api_version)


def unsupported_version_response():
    """Answer to an ApiVersions version we do not know: a v0 body with UNSUPPORTED_VERSION and the list,
    so the client retries with a version it finds there (KIP-511)."""
    return api_versions_response(0, ErrorCode.unsupported_version)
