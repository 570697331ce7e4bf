"""Kafka's ZooKeeper ACL layout and JSON (broker.security.acl_codec)."""

from __future__ import annotations

import json

import pytest

from broker.security.acl_codec import change_data, decode, encode, resource_path
from broker.security.authorizer import Acl

pytestmark = pytest.mark.unit


def test_paths_and_name_encoding():
    assert resource_path("Topic", "orders", "Literal") == "/kafka-acl/Topic/orders"
    assert resource_path("Group", "g", "Prefixed") == "/kafka-acl-extended/prefixed/Group/g"
    assert resource_path("Topic", "a/b", "Literal") == "/kafka-acl/Topic/a%2Fb"
    with pytest.raises(ValueError):
        resource_path("Nope", "x", "Literal")
    with pytest.raises(ValueError):
        resource_path("Topic", "", "Literal")


def test_json_round_trip_in_kafkas_shape():
    acl = Acl("Topic", "a/b", "Literal", "User:alice", "*", "Read", "Allow")
    data = encode([acl])
    assert json.loads(data) == {"version": 1, "acls": [
        {"principal": "User:alice", "permissionType": "Allow", "operation": "Read", "host": "*"}]}
    assert decode("Topic", "a%2Fb", "Literal", data) == [acl]
    assert change_data("Topic", "orders", "Literal") == b"Topic:orders"


def test_standalone_file_store_round_trip(tmp_path):
    from broker.security.acl_file_store import AclFileStore

    store = AclFileStore(tmp_path)
    assert store.load() == set()
    acls = {Acl("Topic", "orders", "Literal", "User:alice", "*", "Read", "Allow"),
            Acl("Group", "g", "Prefixed", "User:*", "10.0.0.1", "All", "Deny")}
    store.save(acls)
    assert AclFileStore(tmp_path).load() == acls
    store.save(set())
    assert store.load() == set()
