"""ACL matching (Kafka's AclAuthorizer/StandardAuthorizer semantics), pure logic, no I/O.

An ACL binds a resource pattern (type, name, LITERAL or PREFIXED) to an entry (principal, host, operation,
permission). ``authorize`` answers one (principal, host, operation, resource) question: super users bypass;
Deny beats Allow; wildcard resource ``*`` and principal ``User:*`` and host ``*`` match anything; All matches
every operation; Describe is implied by Read/Write/Delete/Alter, DescribeConfigs by AlterConfigs; with no ACL
on the resource at all, ``allow.everyone.if.no.acl.found`` decides.
"""

from __future__ import annotations

from dataclasses import dataclass

AUTHORIZER_CLASS_NAMES = frozenset({
    "kafka.security.authorizer.AclAuthorizer",
    "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "logbus.AclAuthorizer",
})

WILDCARD_RESOURCE = "*"
WILDCARD_PRINCIPAL = "User:*"
WILDCARD_HOST = "*"

LITERAL = "Literal"
PREFIXED = "Prefixed"
ALLOW = "Allow"
DENY = "Deny"

# Kafka's implied operations: an Allow on the key also allows the values.
_IMPLIED_BY_ALLOW = {
    "Describe": {"Describe", "Read", "Write", "Delete", "Alter"},
    "DescribeConfigs": {"DescribeConfigs", "AlterConfigs"},
}


@dataclass(frozen=True)
class Acl:
    resource_type: str  # Topic, Group, Cluster, TransactionalId, DelegationToken, User
    name: str
    pattern_type: str  # Literal or Prefixed
    principal: str
    host: str
    operation: str  # Read, Write, ..., All
    permission: str  # Allow or Deny


def parse_super_users(value: str | None) -> frozenset[str]:
    """``super.users``: semicolon-separated principals (``User:admin;User:broker``)."""
    return frozenset(p.strip() for p in (value or "").split(";") if p.strip())


def _resource_matches(acl: Acl, resource_type: str, name: str) -> bool:
    if acl.resource_type != resource_type:
        return False
    if acl.pattern_type == LITERAL:
        return acl.name == name or acl.name == WILDCARD_RESOURCE
    if acl.pattern_type == PREFIXED:
        return name.startswith(acl.name)
    return False


def _entry_matches(acl: Acl, principal: str, host: str) -> bool:
    return acl.principal in (principal, WILDCARD_PRINCIPAL) and acl.host in (host, WILDCARD_HOST)


def authorize(acls, principal: str, host: str, operation: str, resource_type: str, name: str, *,
              super_users: frozenset[str] = frozenset(), allow_if_no_acl: bool = False) -> bool:
    if principal in super_users:
        return True
    matching = [a for a in acls if _resource_matches(a, resource_type, name)]
    if not matching:
        return allow_if_no_acl
    for acl in matching:
        if acl.permission == DENY and _entry_matches(acl, principal, host) and acl.operation in (operation, "All"):
            return False
    allowed_ops = _IMPLIED_BY_ALLOW.get(operation, {operation})
    for acl in matching:
        if acl.permission == ALLOW and _entry_matches(acl, principal, host) and (
                acl.operation == "All" or acl.operation in allowed_ops):
            return True
    return False
