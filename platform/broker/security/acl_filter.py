"""Kafka's ACL wire codes and binding filters (DescribeAcls/DeleteAcls), pure logic.

Codes are Kafka's (org.apache.kafka.common.resource/acl): ResourceType, AclOperation, AclPermissionType and
PatternType. A filter field of ANY (or a null name/principal/host) matches everything; pattern type MATCH
matches the literal patterns that name the resource or ``*`` and the prefixed patterns that are a prefix of it.
"""

from __future__ import annotations

from dataclasses import dataclass

from broker.security.authorizer import LITERAL, PREFIXED, WILDCARD_RESOURCE, Acl

RESOURCE_TYPES = {2: "Topic", 3: "Group", 4: "Cluster", 5: "TransactionalId", 6: "DelegationToken", 7: "User"}
OPERATIONS = {2: "All", 3: "Read", 4: "Write", 5: "Create", 6: "Delete", 7: "Alter", 8: "Describe",
              9: "ClusterAction", 10: "DescribeConfigs", 11: "AlterConfigs", 12: "IdempotentWrite",
              13: "CreateTokens", 14: "DescribeTokens"}
PERMISSIONS = {2: "Deny", 3: "Allow"}
PATTERN_TYPES = {3: LITERAL, 4: PREFIXED}
ANY, MATCH = 1, 2


def code_of(table: dict[int, str], name: str) -> int:
    return next(code for code, value in table.items() if value == name)


@dataclass(frozen=True)
class AclFilter:
    resource_type: int  # ANY or a RESOURCE_TYPES code
    name: str | None
    pattern_type: int  # ANY, MATCH or a PATTERN_TYPES code
    principal: str | None
    host: str | None
    operation: int  # ANY or an OPERATIONS code
    permission: int  # ANY or a PERMISSIONS code

    def valid(self) -> bool:
        """Unknown (0) or out-of-range codes make the filter INVALID_REQUEST."""
        return (self.resource_type == ANY or self.resource_type in RESOURCE_TYPES) and \
            (self.pattern_type in (ANY, MATCH) or self.pattern_type in PATTERN_TYPES) and \
            (self.operation == ANY or self.operation in OPERATIONS) and \
            (self.permission == ANY or self.permission in PERMISSIONS)

    def matches(self, acl: Acl) -> bool:
        if self.resource_type != ANY and RESOURCE_TYPES[self.resource_type] != acl.resource_type:
            return False
        if self.pattern_type == MATCH:
            if self.name is not None:
                if acl.pattern_type == LITERAL and acl.name not in (self.name, WILDCARD_RESOURCE):
                    return False
                if acl.pattern_type == PREFIXED and not self.name.startswith(acl.name):
                    return False
        else:
            if self.pattern_type != ANY and PATTERN_TYPES[self.pattern_type] != acl.pattern_type:
                return False
            if self.name is not None and self.name != acl.name:
                return False
        return (self.principal is None or self.principal == acl.principal) and \
            (self.host is None or self.host == acl.host) and \
            (self.operation == ANY or OPERATIONS[self.operation] == acl.operation) and \
            (self.permission == ANY or PERMISSIONS[self.permission] == acl.permission)
