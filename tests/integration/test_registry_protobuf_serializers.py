"""Protobuf schemas (schemaType PROTOBUF) in the schema registry, judged by confluent-kafka's ProtobufSerializer
and ProtobufDeserializer and its SchemaRegistryClient against a registry process and a broker process: records of
a message that imports another file (registered as a reference) and a well-known type, through a topic; the
descriptor served back with ``format=serialized``; Confluent's compatibility answers and error codes; a second
registry instance rebuilding the schemas from ``_schemas``."""

from __future__ import annotations

import base64
import os
import subprocess
import sys

import grpc_tools
import pytest
import requests
from confluent_kafka import Producer
from confluent_kafka.schema_registry import Schema, SchemaReference, SchemaRegistryClient
from confluent_kafka.schema_registry.error import SchemaRegistryError
from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer, ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from support import read_topic, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

COMMON = """syntax = "proto3";
package logbus.common;

message Geo {
  double lat = 1;
  double lon = 2;
}
enum Device {
  DEVICE_UNKNOWN = 0;
  DEVICE_PHONE = 1;
}
"""
VIEW = """syntax = "proto3";
package logbus.views;

import "logbus/common.proto";
import "google/protobuf/timestamp.proto";

message PageView {
  string url = 1;
  int64 ms = 2;
  logbus.common.Geo geo = 3;
  map<string, string> tags = 4;
  google.protobuf.Timestamp at = 5;
  oneof who {
    string member = 6;
    logbus.common.Device device = 7;
  }
}
"""


@pytest.fixture(scope="module")
def page_view(tmp_path_factory):
    """The PageView message class, built the way generated code builds it: protoc's descriptors in a pool."""
    src = tmp_path_factory.mktemp("proto")
    (src / "logbus").mkdir()
    (src / "logbus" / "common.proto").write_text(COMMON)
    (src / "logbus" / "views.proto").write_text(VIEW)
    out = src / "set.pb"
    include = os.path.join(os.path.dirname(grpc_tools.__file__), "_proto")
    subprocess.run([sys.executable, "-m", "grpc_tools.protoc", f"-I{src}", f"-I{include}",
                    f"--descriptor_set_out={out}", "--include_imports", "logbus/views.proto"], check=True)
    files = descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes())
    pool = descriptor_pool.DescriptorPool()
    for fd in files.file:
        pool.Add(fd)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("logbus.views.PageView"))



def test_protobuf_records_through_a_topic_with_confluents_serializers(broker, registry, page_view):
    url = registry(broker.bootstrap).url
    client = SchemaRegistryClient({"url": url})
    serializer = ProtobufSerializer(page_view, client)  # registers logbus/common.proto, then views-proto-value
    ctx = SerializationContext("views-proto", MessageField.VALUE)
    events = []
    for i in range(30):
        event = page_view(url=f"/page/{i}", ms=i, tags={"ab": str(i % 2)})
        event.geo.lat, event.geo.lon = 51.5 + i, -0.1
        event.at.seconds = 1_700_000_000 + i
        if i % 2:
            event.member = f"m{i}"
        else:
            event.device = 1
        events.append(event)
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for event in events:
        producer.produce("views-proto", serializer(event, ctx))
    assert producer.flush(10) == 0

    deserializer = ProtobufDeserializer(page_view, {}, schema_registry_client=client)  # fetches the descriptor
    got = [deserializer(msg.value(), ctx) for msg in read_topic(broker.bootstrap, "views-proto")]
    assert got == events

    # the subject holds Confluent's text of the descriptor, with the reference the serializer registered
    latest = requests.get(f"{url}/subjects/views-proto-value/versions/latest", timeout=10).json()
    assert latest["schemaType"] == "PROTOBUF"
    assert latest["references"] == [{"name": "logbus/common.proto", "subject": "logbus/common.proto", "version": 1}]
    assert latest["schema"].startswith('syntax = "proto3";\npackage logbus.views;\n\nimport "logbus/common.proto";\n')
    assert "  .logbus.common.Geo geo = 3;\n" in latest["schema"]
    assert "  map<string, string> tags = 4;\n" in latest["schema"]
    raw = requests.get(f"{url}/subjects/views-proto-value/versions/latest/schema", timeout=10)
    assert raw.text == latest["schema"]
    served = requests.get(f"{url}/schemas/ids/{latest['id']}?format=serialized", timeout=10).json()
    fd = descriptor_pb2.FileDescriptorProto.FromString(base64.b64decode(served["schema"]))
    assert [m.name for m in fd.message_type] == ["PageView"] and fd.package == "logbus.views"
    # the .proto text as written finds the version the serializer registered as a descriptor
    found = client.lookup_schema("views-proto-value", Schema(VIEW, "PROTOBUF", [
        SchemaReference("logbus/common.proto", "logbus/common.proto", 1)]))
    assert found.version == 1 and found.schema_id == latest["id"]


def test_compatibility_answers_and_errors_as_confluents(broker, registry):
    url = registry(broker.bootstrap).url
    client = SchemaRegistryClient({"url": url})
    v1 = 'syntax = "proto3";\nmessage Click {\n  string url = 1;\n  int64 ms = 2;\n}\n'
    client.register_schema("clicks-proto-value", Schema(v1, "PROTOBUF"))
    added = v1.replace("}\n", "  repeated string tags = 3;\n}\n")
    assert client.test_compatibility("clicks-proto-value", Schema(added, "PROTOBUF")) is True
    client.register_schema("clicks-proto-value", Schema(added, "PROTOBUF"))
    changed = added.replace("int64 ms = 2", "string ms = 2")
    r = requests.post(f"{url}/compatibility/subjects/clicks-proto-value/versions/latest?verbose=true",
                      json={"schemaType": "PROTOBUF", "schema": changed}, timeout=10).json()
    assert r["is_compatible"] is False
    assert r["messages"][0] == ('{errorType:"FIELD_SCALAR_KIND_CHANGED", description:"The kind of a SCALAR field at '
                                "path '#/Click/2' in the new schema does not match its kind in the old schema\"}")
    assert r["messages"][1] == "{oldSchemaVersion: 2}"
    with pytest.raises(SchemaRegistryError) as err:
        client.register_schema("clicks-proto-value", Schema(changed, "PROTOBUF"))
    assert err.value.http_status_code == 409 and "FIELD_SCALAR_KIND_CHANGED" in err.value.error_message
    # a field renumbered is a removal and an addition: compatible, as in Confluent
    assert client.test_compatibility("clicks-proto-value", Schema(added.replace("= 3;", "= 4;"), "PROTOBUF"))
    # text that does not compile, base64 that is no descriptor, an import nobody registered: 42201
    for text in ('syntax = "proto3";\nmessage {', "not-a-descriptor====",
                 'syntax = "proto3";\nimport "other.proto";\nmessage A { Other o = 1; }\n'):
        got = requests.post(f"{url}/subjects/bad-proto/versions", json={"schemaType": "PROTOBUF", "schema": text},
                            timeout=10)
        assert (got.status_code, got.json()["error_code"]) == (422, 42201), got.text
    assert "bad-proto" not in requests.get(f"{url}/subjects", timeout=10).json()

    follower = registry(broker.bootstrap, mode="READONLY").url
    wait_until(lambda: requests.get(f"{follower}/subjects/clicks-proto-value/versions", timeout=10).json() == [1, 2],
               timeout=30)
    again = requests.get(f"{follower}/subjects/clicks-proto-value/versions/2?format=serialized", timeout=10).json()
    fd = descriptor_pb2.FileDescriptorProto.FromString(base64.b64decode(again["schema"]))
    assert [f.name for f in fd.message_type[0].field] == ["url", "ms", "tags"]
