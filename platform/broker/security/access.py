"""What handlers ask before they act: may this connection's principal do ``operation`` on a resource?

Answers come from the broker's :class:`~broker.security.acl_authorizer.AclAuthorizer` and the connection's
:class:`~broker.network.session.Session`. Without an authorizer (no ``authorizer.class.name``) everything is
allowed, as in Kafka; a call outside any connection (the broker's own work) is allowed too.

Resource types and operations use Kafka's names (Topic, Group, Cluster, TransactionalId; Read, Write, Create,
Delete, Alter, Describe, ClusterAction, DescribeConfigs, AlterConfigs, IdempotentWrite). The cluster resource's
name is ``kafka-cluster``.
"""

from __future__ import annotations

from broker.network.session import current_session

CLUSTER_NAME = "kafka-cluster"
TOPIC, GROUP, CLUSTER, TRANSACTIONAL_ID = "Topic", "Group", "Cluster", "TransactionalId"

# Kafka's AclOperation codes, and the operations it reports per resource type in an ``authorized_operations``
# bit field (AclEntry.supportedOperations); a field nobody asked for is NOT_REQUESTED (Integer.MIN_VALUE)
OPERATION_CODES = {"Read": 3, "Write": 4, "Create": 5, "Delete": 6, "Alter": 7, "Describe": 8, "ClusterAction": 9,
                   "DescribeConfigs": 10, "AlterConfigs": 11, "IdempotentWrite": 12}
SUPPORTED_OPERATIONS = {
    TOPIC: ("Read", "Write", "Create", "Describe", "Delete", "Alter", "DescribeConfigs", "AlterConfigs"),
    GROUP: ("Read", "Describe", "Delete"),
    CLUSTER: ("Create", "ClusterAction", "DescribeConfigs", "AlterConfigs", "IdempotentWrite", "Alter", "Describe"),
    TRANSACTIONAL_ID: ("Describe", "Write"),
}
NOT_REQUESTED = -(2**31)


def enabled(broker) -> bool:
    return getattr(broker, "authorizer", None) is not None


def allowed(broker, operation: str, resource_type: str, name: str = CLUSTER_NAME, quiet: bool = False) -> bool:
    """``quiet``: a denial here is not logged (a filter, or the first of two alternatives), as Kafka's
    ``logIfDenied=false``."""
    authorizer = getattr(broker, "authorizer", None)
    if authorizer is None:
        return True
    session = current_session.get()
    if session is None:
        return True
    return authorizer.allowed(session.principal, session.host, operation, resource_type, name, quiet)


def authorized_operations(broker, resource_type: str, name: str = CLUSTER_NAME) -> int:
    """The bit field of the operations this connection's principal may do on a resource (bit n: operation code
    n), as Kafka's ``AuthHelper.authorizedOperations``: every supported one without an authorizer; no denial is
    logged."""
    bits = 0
    for operation in SUPPORTED_OPERATIONS[resource_type]:
        if allowed(broker, operation, resource_type, name, quiet=True):
            bits |= 1 << OPERATION_CODES[operation]
    return bits


def on_cluster(broker, operation: str, quiet: bool = False) -> bool:
    return allowed(broker, operation, CLUSTER, quiet=quiet)


def allowed_on_some(broker, operation: str, resource_type: str) -> bool:
    authorizer = getattr(broker, "authorizer", None)
    session = current_session.get()
    if authorizer is None or session is None:
        return True
    return authorizer.allowed_on_some(session.principal, session.host, operation, resource_type)


def principal() -> str:
    session = current_session.get()
    return session.principal if session is not None else "User:ANONYMOUS"
