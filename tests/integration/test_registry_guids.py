"""Confluent 8's schema GUIDs and its full register answer, judged by confluent-kafka's serializers that carry the
schema's GUID in a record header (``header_schema_id_serializer``) and deserializers that fetch the schema by it
(``GET /schemas/guids/{guid}``), against a registry process and a broker process."""

from __future__ import annotations

import hashlib
import json
import uuid

import pytest
import requests
from confluent_kafka import Producer
from confluent_kafka.schema_registry import (
    Schema,
    SchemaRegistryClient,
    header_schema_id_serializer,
)
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.schema_registry.json_schema import JSONDeserializer, JSONSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from support import read_topic

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

CLICK = {"type": "record", "name": "Click", "namespace": "web",
         "fields": [{"name": "url", "type": "string"}, {"name": "n", "type": "int"}]}
CLICK_TEXT = json.dumps(CLICK, separators=(",", ":"))  # Avro's Schema.toString() of CLICK
VIEW = {"type": "object", "properties": {"url": {"type": "string"}}, "required": ["url"]}


def start(registry, broker, topic: str) -> str:
    return registry(broker.bootstrap, kafkastore_topic=topic).url


def confluent_guid(text: str, refs: list[tuple[str, str, int]] = ()) -> str:
    """Confluent's ``Schema.getGuid``: MD5 over the text, then each reference's name, subject and 4-byte version."""
    md5 = hashlib.md5(text.encode(), usedforsecurity=False)
    for name, subject, version in refs:
        md5.update(name.encode() + subject.encode() + version.to_bytes(4, "big"))
    return str(uuid.UUID(bytes=md5.digest()))


def test_register_answers_the_whole_schema_and_guids_find_it(broker, registry):
    url = start(registry, broker, "_schemas_guids")
    sent = json.dumps(CLICK, indent=2)  # stored (and hashed) as Avro's canonical text
    first = requests.post(f"{url}/subjects/clicks-value/versions", json={"schema": sent}, timeout=30).json()
    guid = confluent_guid(CLICK_TEXT)
    assert first == {"id": 1, "version": 1, "guid": guid, "schemaType": "AVRO", "schema": CLICK_TEXT}
    again = requests.post(f"{url}/subjects/clicks-value/versions", json={"schema": sent}, timeout=30).json()
    assert again == first  # already registered: the same answer, no new version
    other = requests.post(f"{url}/subjects/other-value/versions", json={"schema": CLICK_TEXT}, timeout=30).json()
    assert (other["id"], other["version"], other["guid"]) == (1, 1, guid)  # one schema, one id, one GUID

    # every answer that carries the schema carries its GUID
    assert requests.get(f"{url}/schemas/ids/1", timeout=10).json()["guid"] == guid
    assert requests.get(f"{url}/subjects/clicks-value/versions/1", timeout=10).json()["guid"] == guid
    looked_up = requests.post(f"{url}/subjects/clicks-value", json={"schema": sent}, timeout=10).json()
    assert (looked_up["id"], looked_up["guid"]) == (1, guid)

    by_guid = requests.get(f"{url}/schemas/guids/{guid}", timeout=10)
    assert by_guid.status_code == 200 and by_guid.json() == {"schema": CLICK_TEXT, "guid": guid}
    assert requests.get(f"{url}/schemas/guids/{guid.replace('-', '')}", timeout=10).json()["guid"] == guid
    assert requests.get(f"{url}/schemas/guids/{guid}/ids", timeout=10).json() == [{"context": ".", "id": 1}]
    for unknown in (str(uuid.uuid4()), "not-a-guid"):
        r = requests.get(f"{url}/schemas/guids/{unknown}", timeout=10)
        assert (r.status_code, r.json()) == (404, {"error_code": 40403, "message": f"Schema {unknown} not found"})
        assert requests.get(f"{url}/schemas/guids/{unknown}/ids", timeout=10).json() == []

    # references are part of the GUID; the type's name is not in it, but a JSON schema's text differs anyway
    requests.post(f"{url}/subjects/view/versions", json={"schema": json.dumps(VIEW), "schemaType": "JSON"},
                  timeout=30).raise_for_status()
    page = {"type": "object", "properties": {"view": {"$ref": "view.json"}}}
    refs = [{"name": "view.json", "subject": "view", "version": 1}]
    with_refs = requests.post(f"{url}/subjects/page-value/versions", timeout=30,
                              json={"schema": json.dumps(page), "schemaType": "JSON", "references": refs}).json()
    page_text = json.dumps(page, separators=(",", ":"))
    assert with_refs["schemaType"] == "JSON" and with_refs["references"] == refs
    assert with_refs["guid"] == confluent_guid(page_text, [("view.json", "view", 1)]) != confluent_guid(page_text)

    # a second instance rebuilds the same GUIDs from _schemas
    reader = start(registry, broker, "_schemas_guids")
    assert requests.get(f"{reader}/schemas/guids/{guid}", timeout=30).json()["schema"] == CLICK_TEXT
    assert requests.get(f"{reader}/schemas/guids/{with_refs['guid']}/ids", timeout=30).json() == \
        [{"context": ".", "id": with_refs["id"]}]


def test_confluents_serializers_carry_the_guid_in_a_header_and_deserializers_fetch_by_it(broker, registry):
    url = start(registry, broker, "_schemas_guid_headers")
    conf = {"schema.id.serializer": header_schema_id_serializer}
    avro = AvroSerializer(SchemaRegistryClient({"url": url}), json.dumps(CLICK), conf=conf)
    as_json = JSONSerializer(json.dumps(VIEW), SchemaRegistryClient({"url": url}), conf=conf)
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    clicks = [{"url": f"/c/{i}", "n": i} for i in range(20)]
    views = [{"url": f"/v/{i}"} for i in range(20)]
    for topic, serializer, events in (("guid-clicks", avro, clicks), ("guid-views", as_json, views)):
        for event in events:
            headers: list = []
            ctx = SerializationContext(topic, MessageField.VALUE, headers)
            producer.produce(topic, serializer(event, ctx), headers=headers)
    assert producer.flush(15) == 0

    for topic, deserializer_of, events, subject in (
            ("guid-clicks", lambda c: AvroDeserializer(c), clicks, "guid-clicks-value"),
            ("guid-views", lambda c: JSONDeserializer(None, schema_registry_client=c), views, "guid-views-value")):
        fresh = SchemaRegistryClient({"url": url})  # nothing cached: the GUID in the header is all it has
        deserializer = deserializer_of(fresh)
        guid = SchemaRegistryClient({"url": url}).get_latest_version(subject).guid
        got = []
        for msg in read_topic(broker.bootstrap, topic):
            header = dict(msg.headers())["__value_schema_id"]
            assert header == b"\x01" + uuid.UUID(guid).bytes  # version 1, then the 16 bytes of the GUID
            assert msg.value()[:1] != b"\x00"  # no id prefix in the payload
            ctx = SerializationContext(topic, MessageField.VALUE, msg.headers())
            got.append(deserializer(msg.value(), ctx))
        assert got == events
        assert fresh.get_schema_by_guid(guid).schema_type == ("AVRO" if topic == "guid-clicks" else "JSON")


def test_the_clients_register_answer_is_used_whole(broker, registry):
    """``register_schema_full_response`` takes the version and GUID from the answer itself."""
    url = start(registry, broker, "_schemas_guid_client")
    client = SchemaRegistryClient({"url": url})
    first = client.register_schema_full_response("a-value", Schema(json.dumps(CLICK), "AVRO"))
    assert (first.schema_id, first.version, first.guid) == (1, 1, confluent_guid(CLICK_TEXT))
    assert first.schema.schema_str == CLICK_TEXT
    grown = dict(CLICK, fields=CLICK["fields"] + [{"name": "ref", "type": ["null", "string"], "default": None}])
    second = client.register_schema_full_response("a-value", Schema(json.dumps(grown), "AVRO"))
    assert (second.schema_id, second.version) == (2, 2) and second.guid != first.guid
    assert client.get_schema_by_guid(second.guid).schema_str == second.schema.schema_str


def test_a_protobuf_descriptor_is_answered_as_one(broker, registry):
    """The one deviation from Confluent 8's register answer: a base64 descriptor (what ProtobufSerializer sends)
    is answered in that form, not as .proto text (see the register route)."""
    url = start(registry, broker, "_schemas_guid_proto")
    text = 'syntax = "proto3";\npackage web;\n\nmessage Hit {\n  string url = 1;\n}\n'
    as_text = requests.post(f"{url}/subjects/hit-value/versions", json={"schema": text, "schemaType": "PROTOBUF"},
                            timeout=30).json()
    assert as_text["schemaType"] == "PROTOBUF" and "message Hit" in as_text["schema"]
    encoded = requests.get(f"{url}/schemas/ids/{as_text['id']}?format=serialized", timeout=30).json()["schema"]
    as_descriptor = requests.post(f"{url}/subjects/hit2-value/versions", timeout=30,
                                  json={"schema": encoded, "schemaType": "PROTOBUF"}).json()
    assert as_descriptor == dict(as_text, schema=encoded)  # same id, version and GUID (that of the stored text)
    asked = requests.post(f"{url}/subjects/hit2-value/versions?format=serialized", timeout=30,
                          json={"schema": text, "schemaType": "PROTOBUF"}).json()
    assert asked["schema"] == encoded and asked["guid"] == as_text["guid"]
