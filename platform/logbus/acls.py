"""``logbus acls``: add, remove and list ACLs, in the shape of kafka-acls.sh.

Implemented: ``--authorizer-properties zookeeper.connect=HOST:PORT[/chroot]`` (writes Kafka's ZooKeeper ACL
znodes directly, with change notifications; works before any broker runs). Not yet: ``--bootstrap-server``
(needs the broker's CreateAcls/DescribeAcls/DeleteAcls, issue 18 item 2) — refused with a one-line error.
"""

from __future__ import annotations

import argparse
import sys

OPERATIONS = ("All", "Read", "Write", "Create", "Delete", "Alter", "Describe", "ClusterAction", "DescribeConfigs",
              "AlterConfigs", "IdempotentWrite", "CreateTokens", "DescribeTokens")
_OPS = {op.lower(): op for op in OPERATIONS}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--bootstrap-server")
    parser.add_argument("--command-config")
    parser.add_argument("--authorizer-properties", action="append", default=[])
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--add", action="store_true")
    action.add_argument("--remove", action="store_true")
    action.add_argument("--list", action="store_true")
    parser.add_argument("--allow-principal", action="append", default=[])
    parser.add_argument("--deny-principal", action="append", default=[])
    parser.add_argument("--allow-host", action="append", default=[])
    parser.add_argument("--deny-host", action="append", default=[])
    parser.add_argument("--operation", action="append", default=[])
    parser.add_argument("--topic", action="append", default=[])
    parser.add_argument("--group", action="append", default=[])
    parser.add_argument("--cluster", action="store_true")
    parser.add_argument("--transactional-id", action="append", default=[])
    parser.add_argument("--resource-pattern-type", default="literal",
                        choices=("literal", "prefixed", "match", "any"))
    parser.add_argument("--producer", action="store_true")
    parser.add_argument("--consumer", action="store_true")
    parser.add_argument("--idempotent", action="store_true")
    parser.add_argument("--force", action="store_true")


class UsageError(Exception):
    pass


def _resources(args) -> list[tuple[str, str]]:
    out = [("Topic", t) for t in args.topic] + [("Group", g) for g in args.group]
    out += [("TransactionalId", t) for t in args.transactional_id]
    if args.cluster:
        out.append(("Cluster", "kafka-cluster"))
    return out


def _bindings(args):
    from broker.security.authorizer import Acl

    pattern = args.resource_pattern_type.capitalize()
    if pattern not in ("Literal", "Prefixed"):
        raise UsageError(f"--resource-pattern-type {args.resource_pattern_type} is only for --list/--remove")
    if not (args.allow_principal or args.deny_principal):
        raise UsageError("--allow-principal or --deny-principal is required")
    per_resource: list[tuple[str, str, list[str]]] = []
    ops = []
    for op in args.operation:
        if op.lower() not in _OPS:
            raise UsageError(f"unknown --operation {op}")
        ops.append(_OPS[op.lower()])
    if args.producer:
        per_resource += [("Topic", t, ["Write", "Describe", "Create"]) for t in args.topic]
        per_resource += [("TransactionalId", t, ["Write", "Describe"]) for t in args.transactional_id]
        if args.idempotent:
            per_resource.append(("Cluster", "kafka-cluster", ["IdempotentWrite"]))
    if args.consumer:
        if not args.group:
            raise UsageError("--consumer needs --group")
        per_resource += [("Topic", t, ["Read", "Describe"]) for t in args.topic]
        per_resource += [("Group", g, ["Read"]) for g in args.group]
    if not (args.producer or args.consumer):
        if not ops:
            raise UsageError("--operation is required (or --producer/--consumer)")
        per_resource = [(rtype, name, ops) for rtype, name in _resources(args)]
    if not per_resource:
        raise UsageError("a resource is required (--topic, --group, --cluster or --transactional-id)")
    acls = set()
    for permission, principals, hosts in (("Allow", args.allow_principal, args.allow_host),
                                          ("Deny", args.deny_principal, args.deny_host)):
        for principal in principals:
            if ":" not in principal:
                raise UsageError(f"principal {principal!r} must be Type:name (User:alice)")
            for host in hosts or ["*"]:
                for rtype, name, rops in per_resource:
                    for op in rops:
                        acls.add(Acl(rtype, name, pattern, principal, host, op, permission))
    return acls


def _zk_connect(props: list[str]) -> str:
    for item in props:
        key, _, value = item.partition("=")
        if key.strip() == "zookeeper.connect" and value.strip():
            return value.strip()
    raise UsageError("--authorizer-properties needs zookeeper.connect=HOST:PORT[/chroot]")


def _matches_resources(args, acl) -> bool:
    resources = _resources(args)
    if not resources:
        return True
    kind = args.resource_pattern_type
    for rtype, name in resources:
        if rtype != acl.resource_type:
            continue
        if kind == "any" and acl.name == name:
            return True
        if kind == "match" and ((acl.pattern_type == "Literal" and acl.name in (name, "*")) or
                                (acl.pattern_type == "Prefixed" and name.startswith(acl.name))):
            return True
        if kind in ("literal", "prefixed") and acl.pattern_type.lower() == kind and acl.name == name:
            return True
    return False


def run(args: argparse.Namespace) -> int:
    try:
        return _run(args)
    except UsageError as exc:
        print(f"logbus: acls: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:  # noqa: BLE001 — one line, not a traceback
        print(f"logbus: acls: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1


def _run(args) -> int:
    if args.bootstrap_server:
        raise UsageError("--bootstrap-server is not implemented yet (the broker has no CreateAcls/DescribeAcls/"
                         "DeleteAcls yet); use --authorizer-properties zookeeper.connect=...")
    connect = _zk_connect(args.authorizer_properties)
    if args.add:
        acls = _bindings(args)
    elif args.remove and not args.force and not sys.stdin.isatty():
        raise UsageError("--remove asks for confirmation and stdin is not a terminal: add --force")
    from kazoo.client import KazooClient

    from broker.security.acl_zk_store import AclZkStore

    zk = KazooClient(hosts=connect)
    zk.start(timeout=15)
    try:
        store = AclZkStore(zk)
        if args.add:
            store.add(acls)
            for a in sorted(acls, key=repr):
                print(f"Added ACL: {_show(a)}")
            return 0
        current = {a for a in store.load() if _matches_resources(args, a)}
        if args.list:
            for a in sorted(current, key=repr):
                print(_show(a))
            return 0
        if args.allow_principal or args.deny_principal or args.operation:
            current = {a for a in current if _entry_selected(args, a)}
        if not args.force:
            answer = input(f"Remove {len(current)} ACL(s)? (y/n) ")
            if answer.strip().lower() != "y":
                return 1
        store.remove(current)
        for a in sorted(current, key=repr):
            print(f"Removed ACL: {_show(a)}")
        return 0
    finally:
        zk.stop()
        zk.close()


def _entry_selected(args, acl) -> bool:
    principals = ([("Allow", p) for p in args.allow_principal] + [("Deny", p) for p in args.deny_principal])
    if principals and (acl.permission, acl.principal) not in principals:
        return False
    ops = {_OPS.get(op.lower(), op) for op in args.operation}
    return not ops or acl.operation in ops


def _show(a) -> str:
    return (f"ResourcePattern(resourceType={a.resource_type}, name={a.name}, patternType={a.pattern_type.upper()})"
            f" principal={a.principal} host={a.host} operation={a.operation} permissionType={a.permission}")
