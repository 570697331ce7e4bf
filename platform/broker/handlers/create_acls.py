"""CreateAcls (key 30), v1–3: store ACL bindings (Kafka's AclAuthorizer in ZooKeeper, or the standalone file).

The caller needs Alter on the cluster (CLUSTER_AUTHORIZATION_FAILED). Without an authorizer every creation is
SECURITY_DISABLED. A binding with an ANY/MATCH/unknown code, a principal without ``Type:``, or a cluster resource
not named ``kafka-cluster`` is INVALID_REQUEST; the others of the request are created.
"""

from broker.handlers.registry import handles
from broker.protocol.messages import ErrorCode, build, nested, response_class
from broker.security import access
from broker.security.acl_filter import OPERATIONS, PATTERN_TYPES, PERMISSIONS, RESOURCE_TYPES
from broker.security.authorizer import Acl

KEY = 30


def binding(c) -> Acl:
    """The ACL a creation names; ValueError with Kafka's reason if it is not a concrete binding."""
    if c.resource_type not in RESOURCE_TYPES or c.resource_pattern_type not in PATTERN_TYPES:
        raise ValueError("Invalid resource type or pattern type")
    if c.operation not in OPERATIONS or c.permission_type not in PERMISSIONS:
        raise ValueError("Invalid operation or permission type")
    if not c.resource_name:
        raise ValueError("Resource name must not be empty")
    if ":" not in c.principal or not c.principal.split(":", 1)[1]:
        raise ValueError(f"Invalid principal {c.principal!r}: expected Type:name")
    if RESOURCE_TYPES[c.resource_type] == "Cluster" and c.resource_name != access.CLUSTER_NAME:
        raise ValueError("The only valid name for the CLUSTER resource is kafka-cluster")
    return Acl(RESOURCE_TYPES[c.resource_type], c.resource_name, PATTERN_TYPES[c.resource_pattern_type],
               c.principal, c.host or "*", OPERATIONS[c.operation], PERMISSIONS[c.permission_type])


@handles(KEY, "CreateAcls", 1, 3)
async def handle(broker, header, request):
    cls = response_class(KEY, header.api_version)
    result_cls = nested(cls, "AclCreationResult")
    if broker.authorizer is None:
        return build(cls, throttle_time=0, results=tuple(
            build(result_cls, error_code=ErrorCode.security_disabled, error_message="No Authorizer is configured.")
            for _ in request.creations))
    if not access.on_cluster(broker, "Alter"):
        return build(cls, throttle_time=0, results=tuple(
            build(result_cls, error_code=ErrorCode.cluster_authorization_failed,
                  error_message="Authorization failed.") for _ in request.creations))
    results, valid = [], []
    for c in request.creations:
        try:
            valid.append(binding(c))
            results.append((ErrorCode.none, None))
        except ValueError as exc:
            results.append((ErrorCode.invalid_request, str(exc)))
    if valid:
        try:
            await broker.authorizer.create(valid)
        except Exception as exc:  # ZooKeeper or the disk refused: nothing of it is claimed as created
            results = [(ErrorCode.unknown_server_error, f"ACLs not stored: {type(exc).__name__}") if e == 0 else (e, m)
                       for e, m in results]
    return build(cls, throttle_time=0, results=tuple(build(result_cls, error_code=e, error_message=m)
                                                     for e, m in results))
