"""Data contracts (schema_registry.contracts): Confluent's written form of metadata and rule sets, its rule set
validation and the bytes they add to a schema's GUID."""

import hashlib

import pytest

from schema_registry.contracts import ContractError, metadata, rule_set, update_hash

pytestmark = [pytest.mark.unit, pytest.mark.timeout(10)]


def test_metadata_is_written_sorted_with_empty_parts_left_out():
    assert metadata(None) is None and metadata({}) == {}
    assert metadata({"properties": {"b": "2", "a": "1"}, "tags": {}, "sensitive": ["z", "a", "z"]}) == \
        {"properties": {"a": "1", "b": "2"}, "sensitive": ["a", "z"]}
    for bad in ([], {"properties": {"a": 1}}, {"tags": {"f": "PII"}}, {"sensitive": "x"}):
        with pytest.raises(ContractError) as err:
            metadata(bad)
        assert err.value.code == 422


def test_rules_get_confluents_defaults_and_validation():
    out = rule_set({"domainRules": [{"name": "r", "type": "CEL", "tags": ["b", "a"], "doc": ""}],
                    "migrationRules": [], "enableAt": "CLIENT"})
    assert out == {"domainRules": [{"name": "r", "kind": "TRANSFORM", "mode": "WRITEREAD", "type": "CEL",
                                    "tags": ["a", "b"], "disabled": False}], "enableAt": "CLIENT"}
    with pytest.raises(ContractError) as err:  # read whole before validation: a shape error wins (422)
        rule_set({"migrationRules": [{"name": "m", "type": "X", "mode": "WRITE"}], "domainRules": [{"mode": "?"}]})
    assert err.value.code == 422
    cases = [({"name": None}, "Missing rule name"), ({"name": ""}, "Empty rule name"),
             ({"name": "x" * 257}, "Rule name too long"), ({"type": None}, "Missing rule type"),
             ({"name": "_ok-1", "mode": "WRITEREAD", "onSuccess": "A,B"}, None)]
    for change, message in cases:
        rule = {"name": "r", "type": "CEL", "mode": "WRITE", **change}
        if message is None:
            assert rule_set({"domainRules": [rule]})
            continue
        with pytest.raises(ContractError) as err:
            rule_set({"domainRules": [rule]})
        assert (err.value.code, str(err.value)) == (42210, message)


def test_the_guid_bytes_of_a_contract():
    md5 = hashlib.md5()
    update_hash(md5, {"tags": {"f": ["A"]}, "properties": {"k": "v"}},
                {"encodingRules": [{"name": "e", "kind": "TRANSFORM", "mode": "WRITE", "type": "ENCRYPT",
                                    "disabled": True}], "enableAt": "ALL"})
    assert md5.digest() == hashlib.md5(b"\x01fAkv\x01eTRANSFORMWRITEENCRYPT\x01ALL").digest()
    untouched = hashlib.md5()
    update_hash(untouched, None, None)
    assert untouched.digest() == hashlib.md5().digest()
