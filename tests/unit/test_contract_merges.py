"""The config's contracts merged into a schema's as Confluent's ``Metadata.mergeMetadata`` and
``RuleSet.mergeRuleSets`` do (``contracts.with_config``)."""

from __future__ import annotations

import pytest

from schema_registry import contracts

pytestmark = [pytest.mark.unit, pytest.mark.timeout(30)]


def rule(name: str, expr: str = "true") -> dict:
    return {"name": name, "kind": "CONDITION", "mode": "WRITE", "type": "CEL", "expr": expr, "disabled": False}


def test_metadata_merges_properties_and_tags_by_name_and_sensitive_names_together():
    old = {"tags": {"a": ["X"], "b": ["Y"]}, "properties": {"k": "1", "owner": "x"}, "sensitive": ["s1"]}
    new = {"tags": {"b": ["Z"]}, "properties": {"owner": "y"}, "sensitive": ["s0"]}
    assert contracts.merge_metadata(old, new) == {"tags": {"a": ["X"], "b": ["Z"]},
                                                  "properties": {"k": "1", "owner": "y"},
                                                  "sensitive": ["s0", "s1"]}
    assert contracts.merge_metadata(None, new) is new and contracts.merge_metadata(old, None) is old


def test_rule_sets_replace_rules_by_name_and_keep_the_older_ones_first():
    old = {"domainRules": [rule("a"), rule("b")], "enableAt": "CLIENT"}
    new = {"domainRules": [rule("b", "false"), rule("c")], "migrationRules": [dict(rule("m"), mode="UPGRADE")]}
    merged = contracts.merge_rule_sets(old, new)
    assert [(r["name"], r["expr"]) for r in merged["domainRules"]] == [("a", "true"), ("b", "false"), ("c", "true")]
    assert merged["migrationRules"][0]["name"] == "m" and merged["enableAt"] == "CLIENT"
    assert contracts.merge_rule_sets({"domainRules": [rule("a")]}, {"enableAt": "ALL"}) == {
        "domainRules": [rule("a")], "enableAt": "ALL"}


def test_default_under_the_schema_and_override_over_both():
    config = {"defaultMetadata": {"properties": {"owner": "default", "tier": "gold"}},
              "overrideMetadata": {"properties": {"tier": "silver"}},
              "defaultRuleSet": {"domainRules": [rule("check", "default")]},
              "overrideRuleSet": {"domainRules": [rule("forced")]}}
    meta, rules = contracts.with_config(config, {"properties": {"owner": "schema"}},
                                        {"domainRules": [rule("check", "schema")]})
    assert meta == {"properties": {"owner": "schema", "tier": "silver"}}
    assert [(r["name"], r["expr"]) for r in rules["domainRules"]] == [("check", "schema"), ("forced", "true")]
    assert contracts.with_config({}, None, None) == (None, None)
