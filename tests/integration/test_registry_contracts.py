"""Confluent's data contracts in the registry (metadata and rule sets on a schema), judged by confluent-kafka: a CEL
condition the registry stores is run by AvroSerializer on every record, a JSONata migration between two versions is
run by AvroDeserializer, ``use.latest.with.metadata`` finds a version by its metadata; plus the REST answers, rule
set validation (42210 with Confluent's messages) and the GUID over the contract."""

from __future__ import annotations

import hashlib
import json
import sys
import uuid

import pytest
import requests
from confluent_kafka.error import SerializationError
from confluent_kafka.schema_registry import Metadata, MetadataProperties, Rule, RuleKind, RuleMode, RuleParams
from confluent_kafka.schema_registry import RuleSet, Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]


@pytest.fixture(autouse=True)
def python_recursion_limit():
    """jsonata-python (10,000) and cel-python (2,500) raise the interpreter's recursion limit as a side effect; put
    back for the tests that run after these in the same worker (a registry refuses too-deep JSON by that limit)."""
    limit = sys.getrecursionlimit()
    try:
        yield
    finally:
        sys.setrecursionlimit(limit)


def executors() -> None:
    """confluent-kafka's CEL and JSONata rule executors, registered (imported here, not at collection)."""
    from confluent_kafka.schema_registry.rules.cel.cel_executor import CelExecutor
    from confluent_kafka.schema_registry.rules.jsonata.jsonata_executor import JsonataExecutor

    CelExecutor.register()
    JsonataExecutor.register()

ORDER = {"type": "record", "name": "Order", "fields": [{"name": "id", "type": "string"}, {"name": "n", "type": "int"}]}
ORDER_TEXT = json.dumps(ORDER, separators=(",", ":"))
CHECK = {"name": "checkN", "kind": "CONDITION", "mode": "WRITE", "type": "CEL", "expr": "message.n >= 0"}


def start(registry, broker, topic: str) -> str:
    return registry(broker.bootstrap, kafkastore_topic=topic).url


def post(url: str, body: dict) -> tuple[int, dict]:
    r = requests.post(url, json=body, timeout=30)
    return r.status_code, r.json()


def test_the_registry_keeps_metadata_and_rule_sets_as_confluent_does(broker, registry):
    url = start(registry, broker, "_schemas_contracts")
    contract = {"metadata": {"properties": {"owner": "team-a", "application.major.version": "1"},
                             "tags": {"Order.id": ["PII", "ID"]}, "sensitive": ["id"]},
                "ruleSet": {"domainRules": [dict(CHECK, params={"b": "2", "a": "1"})]}}
    status, first = post(f"{url}/subjects/orders-value/versions", {"schema": ORDER_TEXT, **contract})
    assert status == 200, first
    assert first["metadata"] == {"tags": {"Order.id": ["ID", "PII"]},  # maps and sets sorted, as Confluent's
                                 "properties": {"application.major.version": "1", "owner": "team-a"},
                                 "sensitive": ["id"]}
    assert first["ruleSet"] == {"domainRules": [{"name": "checkN", "kind": "CONDITION", "mode": "WRITE",
                                                 "type": "CEL", "params": {"a": "1", "b": "2"},
                                                 "expr": "message.n >= 0", "disabled": False}]}
    md5 = hashlib.md5(ORDER_TEXT.encode() + b"\x01" + b"Order.id" + b"ID" + b"PII"  # Confluent's Schema.updateHash
                      + b"application.major.version" + b"1" + b"owner" + b"team-a" + b"id" + b"\x01"
                      + b"checkN" + b"CONDITION" + b"WRITE" + b"CEL" + b"a1" + b"b2" + b"message.n >= 0")
    assert first["guid"] == str(uuid.UUID(bytes=md5.digest()))
    for path in ("/subjects/orders-value/versions/1", f"/schemas/ids/{first['id']}", f"/schemas/guids/{first['guid']}"):
        got = requests.get(url + path, timeout=10).json()
        assert (got["metadata"], got["ruleSet"]) == (first["metadata"], first["ruleSet"]), path

    # the same text without a contract: the latest version's contract is taken, so it is already registered
    status, again = post(f"{url}/subjects/orders-value/versions", {"schema": ORDER_TEXT})
    assert (status, again["version"], again["id"]) == (200, 1, first["id"])
    # another contract is another schema: a new version and a new id
    other = {"properties": {"owner": "team-b", "application.major.version": "1"}}
    status, second = post(f"{url}/subjects/orders-value/versions", {"schema": ORDER_TEXT, "metadata": other})
    assert (status, second["version"]) == (200, 2) and second["id"] != first["id"]
    assert second["ruleSet"] == first["ruleSet"]  # the rule set not sent is the previous version's
    # a lookup without a contract finds the latest version of the text; with one, the version with it
    assert post(f"{url}/subjects/orders-value", {"schema": ORDER_TEXT})[1]["version"] == 2
    assert post(f"{url}/subjects/orders-value", {"schema": ORDER_TEXT, **contract})[1]["version"] == 1

    # GET /subjects/{s}/metadata: the latest version whose properties hold every pair asked
    def latest(query: str):
        r = requests.get(f"{url}/subjects/orders-value/metadata?{query}", timeout=10)
        return r.status_code, r.json()

    assert latest("key=owner&value=team-a")[1]["version"] == 1
    assert latest("key=owner&value=team-b&key=application.major.version&value=1")[1]["version"] == 2
    assert latest("")[1]["version"] == 2
    assert latest("key=owner&value=nobody") == (404, {"error_code": 40403, "message": "Schema not found"})
    r = requests.get(f"{url}/subjects/nobody/metadata?key=owner&value=team-a", timeout=10)
    assert (r.status_code, r.json()["error_code"]) == (404, 40401)

    # rule sets Confluent refuses: 42210 with its messages; shapes it cannot read: 422
    refused = [
        ({"domainRules": [CHECK, CHECK]}, "Found rule with duplicate name 'checkN'"),
        ({"migrationRules": [dict(CHECK, name="m")]}, "Migration rules can only be UPGRADE, DOWNGRADE, UPDOWN"),
        ({"domainRules": [dict(CHECK, mode="UPGRADE")]}, "Domain rules can only be WRITE, READ, WRITEREAD"),
        ({"domainRules": [{"name": "t", "kind": "CONDITION", "mode": "WRITE"}]}, "Missing rule type"),
        ({"domainRules": [dict(CHECK, name="9lives")]}, "Illegal initial character in rule name: 9lives"),
        ({"domainRules": [dict(CHECK, name="a b")]}, "Illegal character in rule name: a b"),
        ({"domainRules": [dict(CHECK, onFailure="ERROR,DLQ")]}, "Multiple actions only valid with WRITEREAD and UPDOWN"),
    ]
    for rule_set, message in refused:
        status, body = post(f"{url}/subjects/bad-value/versions", {"schema": ORDER_TEXT, "ruleSet": rule_set})
        assert (status, body) == (422, {"error_code": 42210, "message": message}), rule_set
    status, body = post(f"{url}/subjects/bad-value/versions",
                        {"schema": ORDER_TEXT, "ruleSet": {"domainRules": [dict(CHECK, mode="SOMETIMES")]}})
    assert (status, body["error_code"]) == (422, 422)
    assert requests.get(f"{url}/subjects", timeout=10).json() == ["orders-value"]  # nothing of the refused ones

    # a second instance rebuilds the contracts from _schemas
    reader = start(registry, broker, "_schemas_contracts")
    got = requests.get(f"{reader}/subjects/orders-value/versions/1", timeout=30).json()
    assert (got["metadata"], got["ruleSet"], got["guid"]) == (first["metadata"], first["ruleSet"], first["guid"])


def test_confluents_serializers_run_the_rules_the_registry_keeps(broker, registry):
    executors()
    url = start(registry, broker, "_schemas_contract_rules")
    client = SchemaRegistryClient({"url": url})
    rule = Rule("checkN", None, RuleKind.CONDITION, RuleMode.WRITE, "CEL", None, None, "message.n >= 0", None, None,
                False)
    client.register_schema("orders-value", Schema(ORDER_TEXT, "AVRO", rule_set=RuleSet(None, [rule]),
                                                  metadata=Metadata(None, MetadataProperties({"major": "1"}), None)))
    ctx = SerializationContext("orders", MessageField.VALUE)
    serializer = AvroSerializer(client, ORDER_TEXT, conf={"auto.register.schemas": False, "use.latest.version": True})
    good = serializer({"id": "a", "n": 3}, ctx)  # the latest version's rule set, fetched and run: CEL
    with pytest.raises(SerializationError) as refused:  # the rule's ERROR action, caused by its condition
        serializer({"id": "b", "n": -1}, ctx)
    assert str(refused.value.__cause__) == "Rule expr failed: message.n >= 0"

    # a second major version renames n to count; a JSONata UPGRADE rule migrates old records when read
    v2 = {"type": "record", "name": "Order", "fields": [{"name": "id", "type": "string"},
                                                          {"name": "count", "type": "int"}]}
    upgrade = Rule("toCount", None, RuleKind.TRANSFORM, RuleMode.UPGRADE, "JSONATA", None, None,
                   "$merge([$sift($, function($v, $k) {$k != 'n'}), {'count': $.'n'}])", None, None, False)
    requests.put(f"{url}/config/orders-value", json={"compatibility": "NONE"}, timeout=10).raise_for_status()
    client.register_schema("orders-value", Schema(json.dumps(v2), "AVRO", rule_set=RuleSet([upgrade], None),
                                                  metadata=Metadata(None, MetadataProperties({"major": "2"}), None)))
    old_writer = AvroSerializer(SchemaRegistryClient({"url": url}), None,
                                conf={"auto.register.schemas": False, "use.latest.with.metadata": {"major": "1"}})
    old = old_writer({"id": "c", "n": 7}, ctx)  # written with version 1, found by its metadata
    reader = AvroDeserializer(SchemaRegistryClient({"url": url}), conf={"use.latest.version": True})
    assert reader(old, ctx) == {"id": "c", "count": 7}  # version 1's record, migrated to version 2 by the rule
    assert reader(good, ctx) == {"id": "a", "count": 3}
    assert SchemaRegistryClient({"url": url}).get_latest_with_metadata("orders-value", {"major": "1"}).version == 1


def test_the_configs_default_and_override_contracts_and_compatibility_group(broker, registry):
    """Confluent's config-level contracts, set with confluent-kafka's ``set_config``: a default rule set and metadata
    go under every schema registered in the scope, an override over it (the subject's config over the global one),
    and the serializer runs the rule it never sent; ``compatibilityGroup`` checks only versions of the same value."""
    from confluent_kafka.schema_registry import ServerConfig

    executors()
    url = start(registry, broker, "_schemas_config_contracts")
    client = SchemaRegistryClient({"url": url})
    rule = Rule("checkN", None, RuleKind.CONDITION, RuleMode.WRITE, "CEL", None, None, "message.n >= 0", None, None,
                False)
    client.set_config(config=ServerConfig(default_rule_set=RuleSet(None, [rule]), default_metadata=Metadata(
        None, MetadataProperties({"owner": "platform", "tier": "gold"}), None)))
    client.set_config("orders-value", ServerConfig(override_metadata=Metadata(None, MetadataProperties(
        {"tier": "silver"}), None)))
    shown = requests.get(f"{url}/config", timeout=10).json()
    assert shown["defaultRuleSet"] == {"domainRules": [{"name": "checkN", "kind": "CONDITION", "mode": "WRITE",
                                                        "type": "CEL", "expr": "message.n >= 0", "disabled": False}]}
    assert client.get_config().default_metadata.properties.properties == {"owner": "platform", "tier": "gold"}

    # registered without a contract: the global default under it, the subject's override over it
    sid = client.register_schema("orders-value", Schema(ORDER_TEXT, "AVRO"))
    got = requests.get(f"{url}/subjects/orders-value/versions/1", timeout=10).json()
    assert got["id"] == sid and got["metadata"] == {"properties": {"owner": "platform", "tier": "silver"}}
    assert got["ruleSet"] == shown["defaultRuleSet"]
    assert client.register_schema("orders-value", Schema(ORDER_TEXT, "AVRO")) == sid  # the same: no new version
    serializer = AvroSerializer(client, ORDER_TEXT, conf={"auto.register.schemas": False, "use.latest.version": True})
    ctx = SerializationContext("orders", MessageField.VALUE)
    serializer({"id": "a", "n": 1}, ctx)
    with pytest.raises(SerializationError):  # the config's rule, run by the client
        serializer({"id": "b", "n": -1}, ctx)
    # a schema's own rule of the same name replaces the default's; an override rule set replaces both
    own = {"name": "checkN", "kind": "CONDITION", "mode": "WRITE", "type": "CEL", "expr": "message.n < 100"}
    status, body = post(f"{url}/subjects/other-value/versions",
                        {"schema": ORDER_TEXT, "ruleSet": {"domainRules": [own]}})
    assert status == 200 and body["ruleSet"]["domainRules"][0]["expr"] == "message.n < 100"
    assert body["metadata"] == {"properties": {"owner": "platform", "tier": "gold"}}
    r = requests.put(f"{url}/config/other-value", json={"overrideRuleSet": {"domainRules": [dict(own, expr="true")]}},
                     timeout=10)
    assert r.status_code == 200 and r.json()["overrideRuleSet"]["domainRules"][0]["expr"] == "true"
    status, body = post(f"{url}/subjects/other-value/versions", {"schema": ORDER_TEXT})
    assert status == 200 and body["version"] == 2 and body["ruleSet"]["domainRules"][0]["expr"] == "true"
    bad = requests.put(f"{url}/config", json={"defaultRuleSet": {"domainRules": [dict(own, name="9")]}}, timeout=10)
    assert (bad.status_code, bad.json()["error_code"]) == (422, 42210)

    # compatibilityGroup: a new major version starts its own line of compatibility
    requests.put(f"{url}/config", json={"defaultRuleSet": None, "defaultMetadata": None}, timeout=10)
    requests.put(f"{url}/config/users-value", json={"compatibility": "BACKWARD",
                                                    "compatibilityGroup": "application.major.version"}, timeout=10)
    v1 = {"type": "record", "name": "User", "fields": [{"name": "a", "type": "string"}]}
    v2 = {"type": "record", "name": "User", "fields": [{"name": "b", "type": "int"}]}  # not BACKWARD of v1

    def register(schema: dict, major: str) -> tuple[int, dict]:
        return post(f"{url}/subjects/users-value/versions", {"schema": json.dumps(schema), "metadata": {
            "properties": {"application.major.version": major}}})

    assert register(v1, "1")[0] == 200
    assert register(v2, "1")[0] == 409  # the same group: checked against v1
    assert register(v2, "2")[0] == 200  # another group: nothing to be compatible with
    assert requests.get(f"{url}/config/users-value", timeout=10).json()["compatibilityGroup"] == \
        "application.major.version"
