"""DescribeUserScramCredentials (key 50), v0: each user's SCRAM mechanisms and iterations (never the keys).
Users are read where the credentials live (ZooKeeper ``/config/users``; standalone: the credentials file)."""

import json

from broker.handlers.registry import handles
from broker.protocol.messages import ErrorCode, build, nested, response_class
from broker.security import access
from broker.security import credentials, scram

KEY = 50
MECHANISM_IDS = {"SCRAM-SHA-256": 1, "SCRAM-SHA-512": 2}


def infos(node: bytes | None) -> list[tuple[int, int]]:
    config = json.loads(node).get("config", {}) if node else {}
    out = []
    for mechanism, text in sorted(config.items()):
        if mechanism in MECHANISM_IDS:
            try:
                out.append((MECHANISM_IDS[mechanism], scram.ScramCredential.decode(text).iterations))
            except scram.ScramError:
                pass
    return out


@handles(KEY, "DescribeUserScramCredentials", 0, 0)
async def handle(broker, header, request):
    cls = response_class(KEY, header.api_version)
    result_cls = nested(cls, "DescribeUserScramCredentialsResult")
    info_cls = nested(result_cls, "CredentialInfo")
    if not access.on_cluster(broker, "Describe"):
        return build(cls, throttle_time=0, error_code=ErrorCode.cluster_authorization_failed,
                     error_message="Authorization failed.", results=())
    wanted = None if request.users is None else [u.name for u in request.users]
    duplicates = {u for u in wanted or () if wanted.count(u) > 1}
    nodes = await credentials.read_nodes(broker, sorted(set(wanted)) if wanted is not None else None)
    results = []
    for user in (sorted(set(wanted)) if wanted is not None else sorted(nodes)):
        found = infos(nodes.get(user))
        if user in duplicates:
            error, message = ErrorCode.duplicate_resource, f"Cannot describe SCRAM credentials for the same user twice in a single request: {user}"
        elif not found:
            if wanted is None:
                continue
            error, message = ErrorCode.resource_not_found, "Attempt to describe a user credential that does not exist"
        else:
            error, message = ErrorCode.none, None
        results.append(build(result_cls, user=user, error_code=error, error_message=message,
                             credential_infos=tuple(build(info_cls, mechanism=m, iterations=i) for m, i in found)))
    return build(cls, throttle_time=0, error_code=ErrorCode.none, error_message=None, results=tuple(results))
