"""Kafka's ACL codes and DescribeAcls/DeleteAcls filters (broker.security.acl_filter)."""

from __future__ import annotations

import pytest

from broker.security.acl_filter import ANY, MATCH, AclFilter
from broker.security.authorizer import Acl

pytestmark = pytest.mark.unit

LIT = Acl("Topic", "orders", "Literal", "User:alice", "*", "Read", "Allow")
STAR = Acl("Topic", "*", "Literal", "User:bob", "*", "Write", "Deny")
PRE = Acl("Topic", "ord", "Prefixed", "User:alice", "*", "Write", "Allow")
GROUP = Acl("Group", "orders", "Literal", "User:alice", "*", "Read", "Allow")
ALL = [LIT, STAR, PRE, GROUP]


def pick(f):
    return [a for a in ALL if f.matches(a)]


def test_any_matches_everything_and_validity():
    f = AclFilter(ANY, None, ANY, None, None, ANY, ANY)
    assert f.valid() and pick(f) == ALL
    assert not AclFilter(0, None, ANY, None, None, ANY, ANY).valid()
    assert not AclFilter(ANY, None, 9, None, None, ANY, ANY).valid()
    assert not AclFilter(ANY, None, ANY, None, None, 99, ANY).valid()


def test_literal_prefixed_and_match():
    assert pick(AclFilter(2, "orders", 3, None, None, ANY, ANY)) == [LIT]
    assert pick(AclFilter(2, "ord", 4, None, None, ANY, ANY)) == [PRE]
    assert pick(AclFilter(2, "orders", MATCH, None, None, ANY, ANY)) == [LIT, STAR, PRE]
    assert pick(AclFilter(2, "payments", MATCH, None, None, ANY, ANY)) == [STAR]


def test_entry_fields():
    assert pick(AclFilter(ANY, None, ANY, "User:alice", None, 3, 3)) == [LIT, GROUP]
    assert pick(AclFilter(ANY, None, ANY, None, None, ANY, 2)) == [STAR]
