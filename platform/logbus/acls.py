"""``logbus acls``: add, remove and list ACLs, in the shape of kafka-acls.sh.

Two ways in, as kafka-acls.sh: ``--authorizer-properties zookeeper.connect=HOST:PORT[/chroot]`` writes Kafka's
ZooKeeper ACL znodes directly, with change notifications (works before any broker runs), and ``--bootstrap-server``
(with ``--command-config`` for a secured listener) goes through a broker's CreateAcls/DescribeAcls/DeleteAcls
(confluent-kafka's admin client), which needs Alter (Describe for --list) on the cluster.
"""

from __future__ import annotations

import argparse
import sys

OPERATIONS = ("All", "Read", "Write", "Create", "Delete", "Alter", "Describe", "ClusterAction", "DescribeConfigs",
              "AlterConfigs", "IdempotentWrite", "CreateTokens", "DescribeTokens")
_OPS = {op.lower(): op for op in OPERATIONS}
REQUEST_TIMEOUT_S = 15


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
        err = exc.args[0] if exc.args and hasattr(exc.args[0], "str") else None  # a KafkaException's KafkaError
        print(f"logbus: acls: {err.name()}: {err.str()}" if err is not None else
              f"logbus: acls: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1


def _run(args) -> int:
    if args.add:
        acls = _bindings(args)
    elif args.remove and not args.force and not sys.stdin.isatty():
        raise UsageError("--remove asks for confirmation and stdin is not a terminal: add --force")
    store = _BrokerStore(args.bootstrap_server, args.command_config) if args.bootstrap_server else \
        _ZkStore(_zk_connect(args.authorizer_properties))
    try:
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
        store.close()


class _ZkStore:
    def __init__(self, connect: str):
        from kazoo.client import KazooClient

        from broker.security.acl_zk_store import AclZkStore

        self.zk = KazooClient(hosts=connect)
        self.zk.start(timeout=15)
        store = AclZkStore(self.zk)
        self.load, self.add, self.remove = store.load, store.add, store.remove

    def close(self) -> None:
        self.zk.stop()
        self.zk.close()


class _BrokerStore:
    """The same three operations through a broker's ACL APIs (each answer checked: an error is one line)."""

    def __init__(self, bootstrap: str, command_config: str | None):
        from confluent_kafka.admin import AdminClient

        from logbus.user_configs import client_config

        # log_level 0: librdkafka's connection-failure lines would break the one-line error on stderr
        self.admin = AdminClient({**client_config(bootstrap, command_config), "socket.timeout.ms": 10000,
                                  "log_level": 0})

    @staticmethod
    def _binding(a):
        from confluent_kafka.admin import AclBinding, AclOperation, AclPermissionType, ResourcePatternType, ResourceType

        return AclBinding(ResourceType[_UPPER[a.resource_type]], a.name, ResourcePatternType[a.pattern_type.upper()],
                          a.principal, a.host, AclOperation[_UPPER[a.operation]],
                          AclPermissionType[a.permission.upper()])

    def add(self, acls) -> None:
        bindings = [self._binding(a) for a in acls]
        for future in self.admin.create_acls(bindings, request_timeout=REQUEST_TIMEOUT_S).values():
            future.result()

    def load(self):
        from confluent_kafka.admin import AclBindingFilter, AclOperation, AclPermissionType, ResourcePatternType, \
            ResourceType

        from broker.security.authorizer import Acl

        found = self.admin.describe_acls(AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None,
                                                          AclOperation.ANY, AclPermissionType.ANY),
                                         request_timeout=REQUEST_TIMEOUT_S).result()
        names = {v: k for k, v in _UPPER.items()}
        return {Acl(names[b.restype.name], b.name, b.resource_pattern_type.name.capitalize(), b.principal, b.host,
                    names[b.operation.name], b.permission_type.name.capitalize()) for b in found}

    def remove(self, acls) -> None:
        from confluent_kafka.admin import AclBindingFilter

        filters = []
        for a in acls:
            b = self._binding(a)
            filters.append(AclBindingFilter(b.restype, b.name, b.resource_pattern_type, b.principal, b.host,
                                            b.operation, b.permission_type))
        if filters:
            for future in self.admin.delete_acls(filters, request_timeout=REQUEST_TIMEOUT_S).values():
                future.result()

    def close(self) -> None:
        pass


# Kafka's names (ours) -> confluent-kafka's enum member names
_UPPER = {"Topic": "TOPIC", "Group": "GROUP", "Cluster": "BROKER", "TransactionalId": "TRANSACTIONAL_ID",
          **{op: "".join("_" + c if c.isupper() and i else c for i, c in enumerate(op)).upper() for op in OPERATIONS}}


def _entry_selected(args, acl) -> bool:
    principals = ([("Allow", p) for p in args.allow_principal] + [("Deny", p) for p in args.deny_principal])
    if principals and (acl.permission, acl.principal) not in principals:
        return False
    ops = {_OPS.get(op.lower(), op) for op in args.operation}
    return not ops or acl.operation in ops


def _show(a) -> str:
    return (f"ResourcePattern(resourceType={a.resource_type}, name={a.name}, patternType={a.pattern_type.upper()})"
            f" principal={a.principal} host={a.host} operation={a.operation} permissionType={a.permission}")
