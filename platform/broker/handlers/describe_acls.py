"""DescribeAcls (key 29), v1–3: the ACL bindings matching a filter (see :mod:`broker.security.acl_filter`),
grouped by resource pattern. Needs Describe on the cluster; SECURITY_DISABLED without an authorizer."""

from broker.handlers.registry import handles
from broker.protocol.messages import ErrorCode, build, nested, response_class
from broker.security import access
from broker.security.acl_filter import OPERATIONS, PATTERN_TYPES, PERMISSIONS, RESOURCE_TYPES, AclFilter, code_of

KEY = 29


def read_filter(f) -> AclFilter:
    return AclFilter(f.resource_type_filter, f.resource_name_filter, f.pattern_type_filter, f.principal_filter,
                     f.host_filter, f.operation, f.permission_type)


@handles(KEY, "DescribeAcls", 1, 3)
def handle(broker, header, request):
    cls = response_class(KEY, header.api_version)
    resource_cls = nested(cls, "DescribeAclsResource")
    acl_cls = nested(cls, "AclDescription")

    def refuse(error, message):
        return build(cls, throttle_time=0, error_code=error, error_message=message, resources=())

    if broker.authorizer is None:
        return refuse(ErrorCode.security_disabled, "No Authorizer is configured.")
    if not access.on_cluster(broker, "Describe"):
        return refuse(ErrorCode.cluster_authorization_failed, "Authorization failed.")
    acl_filter = read_filter(request)
    if not acl_filter.valid():
        return refuse(ErrorCode.invalid_request, "Invalid filter")
    grouped: dict[tuple, list] = {}
    for a in broker.authorizer.describe(acl_filter):
        grouped.setdefault((a.resource_type, a.name, a.pattern_type), []).append(build(
            acl_cls, principal=a.principal, host=a.host, operation=code_of(OPERATIONS, a.operation),
            permission_type=code_of(PERMISSIONS, a.permission)))
    resources = tuple(build(resource_cls, resource_type=code_of(RESOURCE_TYPES, rtype), resource_name=name,
                            pattern_type=code_of(PATTERN_TYPES, pattern), acls=tuple(acls))
                      for (rtype, name, pattern), acls in grouped.items())
    return build(cls, throttle_time=0, error_code=ErrorCode.none, error_message=None, resources=resources)
