"""Schema contexts (Confluent's): judged by confluent-kafka's SchemaRegistryClient and Avro serde with a base URL
``.../contexts/.prod`` (the registry rewrites such paths as Confluent's ContextFilter does), and by the REST
answers: ids are per context, subjects are listed qualified (``:.prod:orders``), ``/schemas/ids/{id}`` reads the
context its ``subject`` names, a context's config and mode apply to its subjects, references resolve in the
referring schema's context (and are answered qualified with ``referenceFormat=qualified``), a context is deleted
only when empty, and all of it is rebuilt from ``_schemas`` by a replica (Confluent's CONTEXT records)."""

from __future__ import annotations

import json

import pytest
import requests
from confluent_kafka.schema_registry import Schema, SchemaReference, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]
CT = {"Content-Type": "application/vnd.schemaregistry.v1+json"}


def record(name: str, *fields: str) -> str:
    return json.dumps({"type": "record", "name": name,
                       "fields": [{"name": f, "type": "string"} for f in fields]}, separators=(",", ":"))


def test_contexts_keep_their_own_ids_subjects_and_settings(broker, registry):
    url = registry(broker.bootstrap, kafkastore_topic="_schemas_contexts").url
    prod = SchemaRegistryClient({"url": f"{url}/contexts/.prod"})
    default = SchemaRegistryClient({"url": url})
    # ids are per context: each context's first schema is id 1, the same text gets an id in each
    assert default.register_schema("orders-value", Schema(record("Order", "id"), "AVRO")) == 1
    assert prod.register_schema("orders-value", Schema(record("Order", "id", "sku"), "AVRO")) == 1
    assert prod.register_schema("other-value", Schema(record("Order", "id"), "AVRO")) == 2
    assert default.get_schema(1).schema_str == record("Order", "id")
    assert json.loads(prod.get_schema(1).schema_str) == json.loads(record("Order", "id", "sku"))
    # the serde through the context's URL: ids written and read back in that context
    serializer = AvroSerializer(prod, record("Order", "id", "sku"), conf={"auto.register.schemas": False,
                                                                          "use.latest.version": True})
    ctx = SerializationContext("orders", MessageField.VALUE)
    payload = serializer({"id": "o1", "sku": "s9"}, ctx)
    assert payload[1:5] == (1).to_bytes(4, "big")
    assert AvroDeserializer(SchemaRegistryClient({"url": f"{url}/contexts/.prod"}))(payload, ctx) == {
        "id": "o1", "sku": "s9"}
    # the REST answers
    assert requests.get(f"{url}/contexts").json() == [".", ".prod"]
    assert requests.get(f"{url}/subjects").json() == [":.prod:orders-value", ":.prod:other-value", "orders-value"]
    assert requests.get(f"{url}/subjects", params={"subjectPrefix": ""}).json() == ["orders-value"]
    assert requests.get(f"{url}/contexts/.prod/subjects").json() == [":.prod:orders-value", ":.prod:other-value"]
    assert requests.get(f"{url}/subjects", params={"subjectPrefix": ":*:orders"}).json() == [
        ":.prod:orders-value", "orders-value"]
    assert [s["subject"] for s in requests.get(f"{url}/schemas").json()] == ["orders-value"]
    assert requests.get(f"{url}/schemas/ids/2").json()["error_code"] == 40403  # not in the default context
    assert requests.get(f"{url}/schemas/ids/2", params={"subject": ":.prod:"}).json()["schema"] == record("Order", "id")
    assert requests.get(f"{url}/schemas/ids/1/subjects").json() == ["orders-value"]
    assert requests.get(f"{url}/contexts/.prod/schemas/ids/1/versions").json() == [
        {"subject": ":.prod:orders-value", "version": 1}]
    assert requests.get(f"{url}/subjects/:.prod:orders-value/versions/1").json()["id"] == 1
    # a plain name found in no default-context subject is looked for in the named contexts (getUsingContexts)
    found = requests.get(f"{url}/subjects/other-value/versions/latest").json()
    assert (found["subject"], found["id"]) == (":.prod:other-value", 2)
    found = requests.post(f"{url}/subjects/other-value", json={"schema": record("Order", "id")}, headers=CT).json()
    assert (found["subject"], found["version"]) == (":.prod:other-value", 1)
    assert requests.get(f"{url}/subjects/nowhere/versions/1").json()["error_code"] == 40401
    # a context's config and mode: its subjects follow them, the default context does not
    assert requests.put(f"{url}/contexts/.prod/config", json={"compatibility": "NONE"}, headers=CT).ok
    assert requests.get(f"{url}/config/:.prod:").json()["compatibilityLevel"] == "NONE"
    unrelated = json.dumps({"type": "record", "name": "Order", "fields": [{"name": "n", "type": "int"}]},
                           separators=(",", ":"))
    assert prod.register_schema("orders-value", Schema(unrelated, "AVRO")) == 3
    refused = requests.post(f"{url}/subjects/orders-value/versions", json={"schema": unrelated}, headers=CT)
    assert refused.status_code == 409
    assert requests.put(f"{url}/mode/:.prod:", json={"mode": "READONLY"}, headers=CT).ok
    refused = requests.post(f"{url}/contexts/.prod/subjects/third/versions", json={"schema": unrelated}, headers=CT)
    assert refused.json()["error_code"] == 42205
    assert requests.post(f"{url}/subjects/third/versions", json={"schema": unrelated}, headers=CT).json()["id"] == 2
    assert requests.delete(f"{url}/mode/:.prod:").ok
    # references resolve in the referring schema's context
    prod.register_schema("common", Schema(record("Common", "c"), "AVRO"))
    holder = json.dumps({"type": "record", "name": "Holder", "fields": [{"name": "c", "type": "Common"}]},
                        separators=(",", ":"))
    reference = SchemaReference("Common", "common", 1)
    registered = prod.register_schema("holder", Schema(holder, "AVRO", [reference]))
    assert requests.get(f"{url}/subjects/:.prod:common/versions/1/referencedby").json() == [registered]
    # referenceFormat=qualified: the references named with the referrer's context (Confluent's getSchema and
    # getSchemaByVersion); without it, as stored
    as_stored = [{"name": "Common", "subject": "common", "version": 1}]
    in_context = [{"name": "Common", "subject": ":.prod:common", "version": 1}]
    by_id = f"{url}/schemas/ids/{registered}"
    assert requests.get(by_id, params={"subject": ":.prod:holder"}).json()["references"] == as_stored
    assert requests.get(by_id, params={"subject": ":.prod:holder", "referenceFormat": "qualified"}).json()[
        "references"] == in_context
    assert requests.get(f"{url}/subjects/:.prod:holder/versions/1", params={"referenceFormat": "qualified"}).json()[
        "references"] == in_context
    assert requests.get(f"{url}/contexts/.prod/subjects/holder/versions/latest",
                        params={"referenceFormat": "qualified"}).json()["references"] == in_context
    assert requests.get(f"{url}/subjects/:.prod:holder/versions/1").json()["references"] == as_stored
    refused = requests.post(f"{url}/subjects/holder/versions", json={"schema": holder, "references": [
        {"name": "Common", "subject": "common", "version": 1}]}, headers=CT)
    assert refused.json()["error_code"] == 42201  # no "common" in the default context
    # Confluent's refusals
    bad = requests.get(f"{url}/contexts/a:b/subjects")
    assert bad.status_code == 400 and bad.json() == {"error_code": 400,
                                                      "message": "Context name 'a:b' cannot contain a colon"}
    bad = requests.post(f"{url}/subjects/:.prod:/versions", json={"schema": unrelated}, headers=CT)
    assert bad.json()["error_code"] == 42208
    # a replica rebuilds it all from _schemas
    replica = registry(broker.bootstrap, kafkastore_topic="_schemas_contexts", mode="READONLY").url
    assert requests.get(f"{replica}/contexts").json() == [".", ".prod"]
    assert requests.get(f"{replica}/contexts/.prod/schemas/ids/2").json()["schema"] == record("Order", "id")
    assert requests.get(f"{replica}/schemas/ids/2").json()["schema"] == unrelated
    # a context is deleted only once it has no subject, soft-deleted ones included
    assert requests.delete(f"{url}/contexts/.prod").json()["error_code"] == 42211
    for subject in (":.prod:holder", ":.prod:orders-value", ":.prod:other-value", ":.prod:common"):
        assert requests.delete(f"{url}/subjects/{subject}").ok
    assert requests.delete(f"{url}/contexts/.prod").json() == {
        "error_code": 42211, "message": "The specified context ':.prod:' is not empty."}
    for subject in (":.prod:holder", ":.prod:orders-value", ":.prod:other-value", ":.prod:common"):
        assert requests.delete(f"{url}/subjects/{subject}", params={"permanent": "true"}).ok
    assert requests.delete(f"{url}/contexts/.prod").status_code == 204
    assert requests.get(f"{url}/contexts").json() == ["."]
