"""DeleteAcls (key 31), v1–3: remove the ACL bindings matching each filter, answering what each one removed.
Needs Alter on the cluster; SECURITY_DISABLED without an authorizer; an invalid filter is INVALID_REQUEST (the
other filters still apply)."""

from broker.handlers.describe_acls import read_filter
from broker.handlers.registry import handles
from broker.protocol.messages import ErrorCode, build, nested, response_class
from broker.security import access
from broker.security.acl_filter import OPERATIONS, PATTERN_TYPES, PERMISSIONS, RESOURCE_TYPES, code_of

KEY = 31


@handles(KEY, "DeleteAcls", 1, 3)
async def handle(broker, header, request):
    cls = response_class(KEY, header.api_version)
    result_cls = nested(cls, "DeleteAclsFilterResult")
    match_cls = nested(cls, "DeleteAclsMatchingAcl")

    def refused(error, message):
        return build(result_cls, error_code=error, error_message=message, matching_acls=())

    if broker.authorizer is None:
        return build(cls, throttle_time=0, filter_results=tuple(
            refused(ErrorCode.security_disabled, "No Authorizer is configured.") for _ in request.filters))
    if not access.on_cluster(broker, "Alter"):
        return build(cls, throttle_time=0, filter_results=tuple(
            refused(ErrorCode.cluster_authorization_failed, "Authorization failed.") for _ in request.filters))
    filters = [read_filter(f) for f in request.filters]
    valid = [f for f in filters if f.valid()]
    try:
        matched = iter(await broker.authorizer.delete(valid))
    except Exception as exc:  # ZooKeeper or the disk refused: nothing is claimed as deleted
        return build(cls, throttle_time=0, filter_results=tuple(
            refused(ErrorCode.unknown_server_error, f"ACLs not deleted: {type(exc).__name__}") for _ in filters))
    results = []
    for f in filters:
        if not f.valid():
            results.append(refused(ErrorCode.invalid_request, "Invalid filter"))
            continue
        results.append(build(result_cls, error_code=ErrorCode.none, error_message=None, matching_acls=tuple(
            build(match_cls, error_code=ErrorCode.none, error_message=None,
                  resource_type=code_of(RESOURCE_TYPES, a.resource_type), resource_name=a.name,
                  pattern_type=code_of(PATTERN_TYPES, a.pattern_type), principal=a.principal, host=a.host,
                  operation=code_of(OPERATIONS, a.operation), permission_type=code_of(PERMISSIONS, a.permission))
            for a in next(matched))))
    return build(cls, throttle_time=0, filter_results=tuple(results))
