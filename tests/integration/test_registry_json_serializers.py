"""JSON Schema (schemaType JSON) in the schema registry, judged by confluent-kafka's JSONSerializer and
JSONDeserializer and its SchemaRegistryClient against a registry process and a broker process: records through a
topic, a schema with a reference to another subject, Confluent's compatibility answers and error codes, and a
second registry instance reading the JSON schemas back from ``_schemas``."""

from __future__ import annotations

import json

import pytest
import requests
from confluent_kafka import Producer
from confluent_kafka.error import SerializationError
from confluent_kafka.schema_registry import Schema, SchemaReference, SchemaRegistryClient
from confluent_kafka.schema_registry.error import SchemaRegistryError
from confluent_kafka.schema_registry.json_schema import JSONDeserializer, JSONSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from support import read_topic, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

VIEW = {"$schema": "http://json-schema.org/draft-07/schema#", "title": "PageView", "type": "object",
        "properties": {"url": {"type": "string"}, "ms": {"type": "integer", "minimum": 0}},
        "required": ["url"], "additionalProperties": False}
ADDRESS = {"type": "object", "properties": {"street": {"type": "string"}, "city": {"type": "string"}},
           "required": ["city"]}
PERSON = {"type": "object", "properties": {"name": {"type": "string"}, "home": {"$ref": "address.json"}},
          "required": ["name", "home"]}



def test_json_records_through_a_topic_with_confluents_serializers(broker, registry):
    url = registry(broker.bootstrap).url
    client = SchemaRegistryClient({"url": url})
    serializer = JSONSerializer(json.dumps(VIEW), client)  # registers views-value as a JSON schema
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    events = [{"url": f"/page/{i}", "ms": i} for i in range(40)]
    ctx = SerializationContext("views", MessageField.VALUE)
    for event in events:
        producer.produce("views", serializer(event, ctx))
    assert producer.flush(10) == 0
    with pytest.raises(SerializationError):  # the client validates against the schema it registered
        serializer({"ms": 1}, ctx)

    registered = client.get_latest_version("views-value")
    assert registered.schema.schema_type == "JSON"
    assert json.loads(registered.schema.schema_str) == VIEW
    deserializer = JSONDeserializer(None, schema_registry_client=client)  # the writer's schema, fetched by id
    got = []
    for msg in read_topic(broker.bootstrap, "views"):
        assert msg.value()[0] == 0 and int.from_bytes(msg.value()[1:5], "big") == registered.schema_id
        got.append(deserializer(msg.value(), ctx))
    assert got == events

    # REST: the schema type on every answer that carries a schema
    assert requests.get(f"{url}/schemas/types", timeout=10).json() == ["JSON", "PROTOBUF", "AVRO"]
    by_id = requests.get(f"{url}/schemas/ids/{registered.schema_id}", timeout=10).json()
    assert by_id["schemaType"] == "JSON" and by_id["schema"] == json.dumps(VIEW, separators=(",", ":"))
    version = requests.get(f"{url}/subjects/views-value/versions/1", timeout=10).json()
    assert version["schemaType"] == "JSON" and version["id"] == registered.schema_id
    # the same document with other whitespace is the registered schema
    assert client.lookup_schema("views-value", Schema(json.dumps(VIEW, indent=2), "JSON")).version == 1


def test_a_reference_to_another_subject(broker, registry):
    url = registry(broker.bootstrap).url
    client = SchemaRegistryClient({"url": url})
    client.register_schema("address", Schema(json.dumps(ADDRESS), "JSON"))
    person = Schema(json.dumps(PERSON), "JSON", [SchemaReference("address.json", "address", 1)])
    serializer = JSONSerializer(person, client)
    ctx = SerializationContext("people", MessageField.VALUE)
    value = serializer({"name": "ada", "home": {"city": "London"}}, ctx)
    with pytest.raises(SerializationError):  # the referenced schema's "required" holds, through the $ref
        serializer({"name": "bob", "home": {"street": "x"}}, ctx)
    sid = int.from_bytes(value[1:5], "big")
    assert requests.get(f"{url}/subjects/address/versions/1/referencedby", timeout=10).json() == [sid]
    assert JSONDeserializer(None, schema_registry_client=client)(value, ctx) == {"name": "ada",
                                                                                 "home": {"city": "London"}}
    # a $ref that resolves nowhere is an invalid schema
    with pytest.raises(SchemaRegistryError) as err:
        client.register_schema("people2-value", Schema(json.dumps(PERSON), "JSON"))
    assert err.value.error_code == 42201


def test_compatibility_answers_and_errors_as_confluents(broker, registry):
    url = registry(broker.bootstrap).url
    client = SchemaRegistryClient({"url": url})
    v1 = client.register_schema("clicks-value", Schema(json.dumps(VIEW), "JSON"))
    # closed content model: an optional property is a compatible change, a required one is not
    with_ref = dict(VIEW, properties=dict(VIEW["properties"], ref={"type": "string"}))
    assert client.test_compatibility("clicks-value", Schema(json.dumps(with_ref), "JSON")) is True
    v2 = client.register_schema("clicks-value", Schema(json.dumps(with_ref), "JSON"))
    assert v2 != v1 and client.get_latest_version("clicks-value").version == 2
    required = dict(with_ref, required=["url", "ref"])
    assert client.test_compatibility("clicks-value", Schema(json.dumps(required), "JSON")) is False
    r = requests.post(f"{url}/compatibility/subjects/clicks-value/versions/latest?verbose=true",
                      json={"schemaType": "JSON", "schema": json.dumps(required)}, timeout=10).json()
    assert r["is_compatible"] is False
    assert r["messages"][0] == ('{errorType:"REQUIRED_ATTRIBUTE_ADDED", description:"The keyword at path '
                                "'#/required/ref' in the new schema is not present in the old schema'}")
    assert r["messages"][1] == "{oldSchemaVersion: 2}"
    with pytest.raises(SchemaRegistryError) as err:
        client.register_schema("clicks-value", Schema(json.dumps(required), "JSON"))
    assert err.value.http_status_code == 409 and "REQUIRED_ATTRIBUTE_ADDED" in err.value.error_message
    # an Avro schema in a JSON subject; an unknown schema type; a document that is no schema
    with pytest.raises(SchemaRegistryError) as err:
        client.register_schema("clicks-value", Schema('"string"', "AVRO"))
    assert err.value.http_status_code == 409 and "different schema type" in err.value.error_message
    for body in ({"schemaType": "XML", "schema": "<schema/>"},
                 {"schemaType": "JSON", "schema": '{"type": "text"}'},
                 {"schemaType": "JSON", "schema": "[1]"}):
        got = requests.post(f"{url}/subjects/bad-value/versions", json=body, timeout=10)
        assert (got.status_code, got.json()["error_code"]) == (422, 42201), got.text
    assert requests.get(f"{url}/subjects", timeout=10).json().count("bad-value") == 0
    # NONE lets anything follow
    client.set_compatibility("clicks-value", "NONE")
    assert client.register_schema("clicks-value", Schema(json.dumps(required), "JSON")) not in (v1, v2)

    # a second instance (read-only) rebuilds the JSON schemas from _schemas, types and ids intact
    follower = registry(broker.bootstrap, mode="READONLY").url
    wait_until(lambda: requests.get(f"{follower}/subjects/clicks-value/versions", timeout=10).json() == [1, 2, 3],
               timeout=30)
    again = requests.get(f"{follower}/schemas/ids/{v1}", timeout=10).json()
    assert again["schemaType"] == "JSON" and json.loads(again["schema"]) == VIEW
