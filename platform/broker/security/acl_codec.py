"""ACLs in Kafka's ZooKeeper layout and JSON, pure logic (no I/O).

Literal patterns live at ``/kafka-acl/<ResourceType>/<name>``, prefixed ones at
``/kafka-acl-extended/prefixed/<ResourceType>/<name>``; each znode's data is
``{"version":1,"acls":[{"principal":..,"permissionType":..,"operation":..,"host":..}]}``. Change notifications are
sequential znodes ``/kafka-acl-changes/acl_changes_<seq>`` (literal) and
``/kafka-acl-extended-changes/acl_changes_<seq>`` (prefixed). Resource names are made znode-safe with
cluster.znodes.node_name (unchanged for ordinary names).
"""

from __future__ import annotations

import json
from urllib.parse import unquote

from broker.cluster.znodes import node_name
from broker.security.authorizer import LITERAL, PREFIXED, Acl

LITERAL_ROOT = "/kafka-acl"
PREFIXED_ROOT = "/kafka-acl-extended/prefixed"
LITERAL_CHANGES = "/kafka-acl-changes"
PREFIXED_CHANGES = "/kafka-acl-extended-changes"
CHANGE_PREFIX = "acl_changes_"

RESOURCE_TYPES = ("Topic", "Group", "Cluster", "TransactionalId", "DelegationToken", "User")


def resource_path(resource_type: str, name: str, pattern_type: str) -> str:
    if resource_type not in RESOURCE_TYPES:
        raise ValueError(f"unknown resource type {resource_type!r}")
    if not name:
        raise ValueError("empty resource name")
    root = LITERAL_ROOT if pattern_type == LITERAL else PREFIXED_ROOT
    return f"{root}/{resource_type}/{node_name(name)}"


def changes_root(pattern_type: str) -> str:
    return LITERAL_CHANGES if pattern_type == LITERAL else PREFIXED_CHANGES


def change_data(resource_type: str, name: str, pattern_type: str) -> bytes:
    """Kafka: literal notifications carry ``Type:name``; extended ones a JSON resource."""
    if pattern_type == LITERAL:
        return f"{resource_type}:{name}".encode()
    return json.dumps({"version": 1, "resourceType": resource_type, "name": name,
                       "patternType": pattern_type.upper()}).encode()


def encode(acls) -> bytes:
    return json.dumps({"version": 1, "acls": [
        {"principal": a.principal, "permissionType": a.permission, "operation": a.operation, "host": a.host}
        for a in acls]}, separators=(",", ":")).encode()


def decode(resource_type: str, znode: str, pattern_type: str, data: bytes) -> list[Acl]:
    if not data:
        return []
    body = json.loads(data)
    name = unquote(znode)
    return [Acl(resource_type, name, pattern_type, e["principal"], e["host"], e["operation"], e["permissionType"])
            for e in body.get("acls", [])]


__all__ = ["LITERAL", "PREFIXED", "resource_path", "changes_root", "change_data", "encode", "decode"]
