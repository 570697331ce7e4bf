"""ACL matching (broker.security.authorizer): Kafka's rules for literal/prefixed/wildcard patterns, principals,
hosts, Deny over Allow, implied operations, super users and allow.everyone.if.no.acl.found."""

from __future__ import annotations

import pytest

from broker.security.authorizer import Acl, authorize, parse_super_users

pytestmark = pytest.mark.unit


def acl(name="orders", op="Read", perm="Allow", principal="User:alice", host="*", rtype="Topic", pattern="Literal"):
    return Acl(rtype, name, pattern, principal, host, op, perm)


def check(acls, op="Read", name="orders", principal="User:alice", host="10.0.0.1", rtype="Topic", **kw):
    return authorize(acls, principal, host, op, rtype, name, **kw)


def test_literal_allow_and_other_principal_refused():
    acls = [acl()]
    assert check(acls)
    assert not check(acls, principal="User:bob")
    assert not check(acls, name="orders2")
    assert not check(acls, op="Write")


def test_prefixed_and_wildcards():
    assert check([acl(name="ord", pattern="Prefixed")], name="orders")
    assert not check([acl(name="ord", pattern="Prefixed")], name="pay")
    assert check([acl(name="*")], name="anything")
    assert check([acl(principal="User:*")], principal="User:bob")
    assert not check([acl(rtype="Group")], rtype="Topic")


def test_host_exact_or_wildcard():
    assert check([acl(host="10.0.0.1")])
    assert not check([acl(host="10.0.0.2")])


def test_deny_beats_allow_and_all():
    assert not check([acl(), acl(perm="Deny", principal="User:*")])
    assert not check([acl(op="All"), acl(op="All", perm="Deny")])
    assert check([acl(op="All")], op="Alter")


def test_implied_operations():
    for op in ("Read", "Write", "Delete", "Alter"):
        assert check([acl(op=op)], op="Describe")
    assert check([acl(op="AlterConfigs")], op="DescribeConfigs")
    assert not check([acl(op="Describe")], op="Read")
    # A Deny on Read does not deny Describe (Kafka: implied only for Allow).
    assert check([acl(op="Describe"), acl(op="Read", perm="Deny")], op="Describe")


def test_super_users_and_no_acl_found():
    supers = parse_super_users(" User:admin ; User:broker;")
    assert supers == {"User:admin", "User:broker"}
    assert check([], principal="User:admin", super_users=supers)
    assert not check([])
    assert check([], allow_if_no_acl=True)
    # The resource has ACLs (for someone else): no-acl-found no longer applies.
    assert not check([acl(principal="User:bob")], allow_if_no_acl=True)


def test_config_keys_kafkas_names_and_defaults():
    from broker.config import BrokerConfig, ConfigError

    default = BrokerConfig.from_strings({})
    assert default["authorizer.class.name"] == "" and default["super.users"] == ""
    assert default["allow.everyone.if.no.acl.found"] is False
    for name in ("kafka.security.authorizer.AclAuthorizer", "org.apache.kafka.metadata.authorizer.StandardAuthorizer"):
        assert BrokerConfig.from_strings({"authorizer.class.name": name})["authorizer.class.name"] == name
    # an authorizer the broker does not have refuses to start (fail closed: it must not run unprotected)
    with pytest.raises((ConfigError, ValueError)):
        BrokerConfig.from_strings({"authorizer.class.name": "com.example.Nope"})


def test_a_reload_deletes_old_change_notifications():
    """After each reload of the ACLs the authorizer asks its store to delete old change notifications (Kafka's
    purge of obsolete notifications); a store that fails to delete keeps the ACLs just read."""
    import asyncio

    from broker.security.acl_authorizer import AclAuthorizer

    class Store:
        def __init__(self, fail=False):
            self.purged, self.fail = 0, fail

        def load(self):
            return {acl()}

        def purge_changes(self):
            self.purged += 1
            if self.fail:
                raise OSError("ZooKeeper went away")

    for fail in (False, True):
        store = Store(fail)
        authorizer = AclAuthorizer(store, frozenset(), False)
        asyncio.run(authorizer._reload())
        assert store.purged == 1 and len(authorizer.acls) == 1
