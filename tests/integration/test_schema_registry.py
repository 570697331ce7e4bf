"""The schema registry over real HTTP (requests, confluent-kafka's SchemaRegistryClient) against a registry
process and a broker process: every endpoint, the error codes, compatibility levels, restart, read-only
followers, the broker going away."""

from __future__ import annotations

import json
import time

import pytest
import requests
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from schema_registry.guids import schema_guid
from support import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]
CT = "application/vnd.schemaregistry.v1+json"


def record(name: str, *fields: dict) -> str:
    return json.dumps({"type": "record", "name": name, "fields": list(fields)})


V1 = record("PageView", {"name": "url", "type": "string"})
V2 = record("PageView", {"name": "url", "type": "string"}, {"name": "ms", "type": "long", "default": 0})


def call(method: str, url: str, body=None, content_type: str = CT, raw: bytes | None = None):
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    r = requests.request(method, url, data=data, headers={"Content-Type": content_type}, timeout=30)
    return r.status_code, (r.json() if r.content else None)


def registered(*args, **kwargs):
    """A registration's status and schema id (the whole answer is checked in tests/integration/test_registry_guids.py)."""
    status, answer = call(*args, **kwargs)
    return status, answer.get("id") if status == 200 else answer


def expect_error(result, code: int) -> None:
    status, body = result
    assert body["error_code"] == code, body
    assert status == (code if code < 1000 else code // 100)
    assert isinstance(body["message"], str) and body["message"]


def test_every_endpoint_and_error_code(broker, registry):
    u = registry(broker.bootstrap).url
    assert call("GET", u + "/") == (200, {})
    assert call("GET", u + "/schemas/types") == (200, ["JSON", "PROTOBUF", "AVRO"])
    for ct in (CT, "application/vnd.schemaregistry+json", "application/json"):
        assert registered("POST", u + "/subjects/pv-value/versions", {"schema": V1}, ct) == (200, 1)
    r = requests.get(u + "/subjects/pv-value/versions", timeout=10)
    assert r.headers["content-type"].startswith(CT) and r.json() == [1]  # registering again adds no version
    assert registered("POST", u + "/subjects/pv-value/versions", {"schema": V2}) == (200, 2)
    assert registered("POST", u + "/subjects/other-value/versions", {"schema": V1}) == (200, 1)  # global ids
    v2_text = json.dumps(json.loads(V2), separators=(",", ":"))
    assert call("GET", u + "/schemas/ids/2")[1] == {"schema": v2_text, "guid": schema_guid(v2_text, [])}
    assert call("GET", u + "/schemas/ids/2/schema")[1] == json.loads(V2)
    assert call("GET", u + "/schemas/ids/1/subjects")[1] == ["other-value", "pv-value"]
    assert call("GET", u + "/schemas/ids/1/versions")[1] == [{"subject": "other-value", "version": 1},
                                                              {"subject": "pv-value", "version": 1}]
    assert call("GET", u + "/subjects")[1] == ["other-value", "pv-value"]
    for ref in ("2", "latest", "-1"):
        assert call("GET", u + f"/subjects/pv-value/versions/{ref}")[1]["id"] == 2
    assert call("GET", u + "/subjects/pv-value/versions/1/schema")[1] == json.loads(V1)
    assert call("POST", u + "/subjects/pv-value", {"schema": V1})[1]["version"] == 1  # lookup
    expect_error(call("POST", u + "/subjects/pv-value", {"schema": record("X", {"name": "a", "type": "int"})}), 40403)
    expect_error(call("POST", u + "/subjects/nobody", {"schema": V1}), 40401)
    expect_error(call("GET", u + "/subjects/nobody/versions"), 40401)
    expect_error(call("GET", u + "/subjects/pv-value/versions/99"), 40402)
    expect_error(call("GET", u + "/subjects/pv-value/versions/abc"), 42202)
    expect_error(call("GET", u + "/schemas/ids/999"), 40403)
    expect_error(call("POST", u + "/subjects/bad/versions", {"schema": '{"type": "record", "name": "X"}'}), 42201)
    expect_error(call("POST", u + "/subjects/bad/versions", {"schema": "not json"}), 42201)
    expect_error(call("POST", u + "/subjects/bad/versions", raw=b"{not json"), 400)
    expect_error(call("POST", u + "/subjects/bad/versions", raw=b'{"schema": "' + b"x" * (11 << 20) + b'"}'), 413)
    assert call("GET", u + "/subjects?deleted=true")[1] == ["other-value", "pv-value"]  # nothing written
    # compatibility
    breaking = record("PageView", {"name": "url", "type": "int"})
    status, body = call("POST", u + "/subjects/pv-value/versions", {"schema": breaking})
    assert (status, body["error_code"]) == (409, 409)
    assert call("POST", u + "/compatibility/subjects/pv-value/versions", {"schema": V2})[1] == {"is_compatible": True}
    verdict = call("POST", u + "/compatibility/subjects/pv-value/versions/latest?verbose=true", {"schema": breaking})[1]
    assert verdict["is_compatible"] is False and verdict["messages"]
    # config
    assert call("GET", u + "/config")[1] == {"compatibilityLevel": "BACKWARD"}
    assert call("PUT", u + "/config", {"compatibility": "FULL"})[1] == {"compatibility": "FULL"}
    assert call("GET", u + "/config")[1] == {"compatibilityLevel": "FULL"}
    expect_error(call("PUT", u + "/config", {"compatibility": "SIDEWAYS"}), 42203)
    expect_error(call("GET", u + "/config/pv-value"), 40408)
    assert call("GET", u + "/config/pv-value?defaultToGlobal=true")[1] == {"compatibilityLevel": "FULL"}
    assert call("PUT", u + "/config/pv-value", {"compatibility": "NONE"})[1] == {"compatibility": "NONE"}
    assert call("GET", u + "/config/pv-value")[1] == {"compatibilityLevel": "NONE"}
    assert call("DELETE", u + "/config/pv-value")[1] == {"compatibilityLevel": "NONE"}
    assert call("DELETE", u + "/config")[1] == {"compatibilityLevel": "FULL"}
    assert call("GET", u + "/config")[1] == {"compatibilityLevel": "BACKWARD"}
    # references between subjects
    address = record("Address", {"name": "city", "type": "string"})
    assert registered("POST", u + "/subjects/address/versions", {"schema": address}) == (200, 3)
    user = record("User", {"name": "home", "type": "Address"})
    refs = [{"name": "Address", "subject": "address", "version": 1}]
    status, body = call("POST", u + "/subjects/user/versions", {"schema": user, "references": refs})
    assert status == 200
    assert call("GET", u + "/subjects/address/versions/1/referencedby")[1] == [body["id"]]
    assert call("GET", u + "/subjects/user/versions/1")[1]["references"] == refs
    expect_error(call("POST", u + "/subjects/user2/versions", {"schema": user}), 42201)  # Address unknown
    # modes
    assert call("GET", u + "/mode")[1] == {"mode": "READWRITE"}
    assert call("PUT", u + "/mode/other-value", {"mode": "READONLY"})[1] == {"mode": "READONLY"}
    assert call("GET", u + "/mode/other-value")[1] == {"mode": "READONLY"}
    expect_error(call("POST", u + "/subjects/other-value/versions", {"schema": V2}), 42205)
    expect_error(call("PUT", u + "/mode", {"mode": "SOMETIMES"}), 42204)
    expect_error(call("GET", u + "/mode/pv-value"), 40409)
    # deletes: soft then permanent, in that order only
    expect_error(call("DELETE", u + "/subjects/pv-value/versions/1?permanent=true"), 40407)
    assert call("DELETE", u + "/subjects/pv-value/versions/1") == (200, 1)
    expect_error(call("GET", u + "/subjects/pv-value/versions/1"), 40402)
    assert call("GET", u + "/subjects/pv-value/versions/1?deleted=true")[1]["id"] == 1
    assert call("DELETE", u + "/subjects/pv-value/versions/1?permanent=true") == (200, 1)
    expect_error(call("DELETE", u + "/subjects/pv-value?permanent=true"), 40405)
    assert call("DELETE", u + "/subjects/pv-value") == (200, [2])
    expect_error(call("DELETE", u + "/subjects/pv-value"), 40404)
    assert call("DELETE", u + "/subjects/pv-value?permanent=true") == (200, [2])
    assert "pv-value" not in call("GET", u + "/subjects?deleted=true")[1]
    assert call("GET", u + "/schemas/ids/1")[0] == 200  # still used by other-value


def test_confluent_client_and_avro_round_trip_through_a_topic(broker, registry):
    u = registry(broker.bootstrap).url
    client = SchemaRegistryClient({"url": u})
    sid = client.register_schema("clicks-value", Schema(V2, "AVRO"))
    assert client.get_schema(sid).schema_str == json.dumps(json.loads(V2), separators=(",", ":"))
    assert client.lookup_schema("clicks-value", Schema(V2, "AVRO")).version == 1
    assert client.get_latest_version("clicks-value").schema_id == sid
    serializer = AvroSerializer(client, V2, conf={"auto.register.schemas": False, "use.latest.version": True})
    deserializer = AvroDeserializer(client)
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    events = [{"url": f"/page/{i}", "ms": i} for i in range(50)]
    for event in events:
        producer.produce("clicks", serializer(event, SerializationContext("clicks", MessageField.VALUE)))
    assert producer.flush(10) == 0
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "sr", "enable.auto.commit": False})
    consumer.assign([TopicPartition("clicks", 0, 0)])
    got = []
    while len(got) < 50:
        for msg in consumer.consume(50, timeout=5):
            assert msg.value()[0] == 0 and int.from_bytes(msg.value()[1:5], "big") == sid  # Confluent framing
            got.append(deserializer(msg.value(), SerializationContext("clicks", MessageField.VALUE)))
    consumer.close()
    assert got == events
    assert client.delete_version("clicks-value", 1) == 1
    assert client.delete_subject("clicks-value", permanent=True) == [1]


CASES = {  # name: (old schema, new schema, {level: compatible})
    "add field with default": (V1, V2, {"BACKWARD": True, "FORWARD": True, "FULL": True}),
    "add field without default": (V1, record("PageView", {"name": "url", "type": "string"},
                                                 {"name": "ms", "type": "long"}),
                                  {"BACKWARD": False, "FORWARD": True, "FULL": False}),
    "remove field without default": (record("PageView", {"name": "url", "type": "string"},
                                            {"name": "ms", "type": "long"}), V1,
                                     {"BACKWARD": True, "FORWARD": False, "FULL": False}),
    "remove field with default": (V2, V1, {"BACKWARD": True, "FORWARD": True, "FULL": True}),
    "widen int to long": (record("N", {"name": "n", "type": "int"}), record("N", {"name": "n", "type": "long"}),
                          {"BACKWARD": True, "FORWARD": False, "FULL": False}),
    "change string to int": (record("N", {"name": "n", "type": "string"}), record("N", {"name": "n", "type": "int"}),
                             {"BACKWARD": False, "FORWARD": False, "FULL": False}),
    "add enum symbol": (json.dumps({"type": "enum", "name": "E", "symbols": ["A", "B"]}),
                        json.dumps({"type": "enum", "name": "E", "symbols": ["A", "B", "C"]}),
                        {"BACKWARD": True, "FORWARD": False, "FULL": False}),
    "add union branch": (record("U", {"name": "u", "type": ["null", "string"]}),
                         record("U", {"name": "u", "type": ["null", "string", "int"]}),
                         {"BACKWARD": True, "FORWARD": False, "FULL": False}),
}


def test_compatibility_matrix(broker, registry):
    u = registry(broker.bootstrap).url
    for i, (name, (old, new, expected)) in enumerate(CASES.items()):
        for level in ("NONE", "BACKWARD", "FORWARD", "FULL", "BACKWARD_TRANSITIVE", "FORWARD_TRANSITIVE",
                      "FULL_TRANSITIVE"):
            subject = f"m{i}-{level}"
            assert call("PUT", u + f"/config/{subject}", {"compatibility": "NONE"})[0] == 200
            assert call("POST", u + f"/subjects/{subject}/versions", {"schema": old})[0] == 200
            assert call("PUT", u + f"/config/{subject}", {"compatibility": level})[0] == 200
            want = True if level == "NONE" else expected[level.replace("_TRANSITIVE", "")]
            verdict = call("POST", u + f"/compatibility/subjects/{subject}/versions", {"schema": new})[1]
            assert verdict["is_compatible"] is want, (name, level)
            status, _ = call("POST", u + f"/subjects/{subject}/versions", {"schema": new})
            assert status == (200 if want else 409), (name, level)
    # transitive levels look at every version, the others at the latest only
    b1 = record("T", {"name": "a", "type": "int"})
    b2 = record("T", {"name": "a", "type": "int"}, {"name": "b", "type": "int", "default": 0})
    b3 = record("T", {"name": "a", "type": "int"}, {"name": "b", "type": "int"})
    for level, ok in (("BACKWARD", True), ("BACKWARD_TRANSITIVE", False)):
        subject = f"t-{level}"
        call("PUT", u + f"/config/{subject}", {"compatibility": level})
        for schema in (b1, b2):
            assert call("POST", u + f"/subjects/{subject}/versions", {"schema": schema})[0] == 200
        assert call("POST", u + f"/subjects/{subject}/versions", {"schema": b3})[0] == (200 if ok else 409)


def test_restart_keeps_ids_and_a_readonly_follower_serves_reads(broker, registry):
    primary = registry(broker.bootstrap)
    ids = [call("POST", primary.url + f"/subjects/s{i}/versions", {"schema": record(f"R{i}", {
        "name": "x", "type": "int"})})[1]["id"] for i in range(5)]
    call("PUT", primary.url + "/config/s0", {"compatibility": "FULL"})
    primary.stop()
    primary.start()
    for i, sid in enumerate(ids):
        assert call("GET", primary.url + f"/subjects/s{i}/versions/latest")[1]["id"] == sid
    assert call("GET", primary.url + "/config/s0")[1] == {"compatibilityLevel": "FULL"}
    fresh = record("FreshAfterRestart", {"name": "x", "type": "int"})
    new = call("POST", primary.url + "/subjects/s9/versions", {"schema": fresh})[1]["id"]
    assert new == max(ids) + 1  # ids continue after the replayed ones
    follower = registry(broker.bootstrap, mode="READONLY")
    assert call("GET", follower.url + "/subjects/s9/versions/1")[1]["id"] == new
    assert call("GET", follower.url + "/mode")[1] == {"mode": "READONLY"}
    expect_error(call("POST", follower.url + "/subjects/s10/versions", {"schema": V1}), 42205)
    expect_error(call("PUT", follower.url + "/config", {"compatibility": "NONE"}), 42205)
    late = call("POST", primary.url + "/subjects/late/versions", {"schema": V2})[1]["id"]
    wait_until(lambda: call("GET", follower.url + "/schemas/ids/" + str(late))[0] == 200, 10,
               what="the follower reads new records")


def test_broker_down_gives_store_errors_and_the_registry_recovers(fresh_broker, registry):
    b = fresh_broker().start()
    reg = registry(b.bootstrap, kafkastore_timeout_ms="2000")
    assert call("POST", reg.url + "/subjects/a/versions", {"schema": V1})[0] == 200
    b.stop()
    started = time.monotonic()
    status, body = call("POST", reg.url + "/subjects/a/versions", {"schema": V2})
    assert body["error_code"] in (50001, 50002) and status == 500
    assert time.monotonic() - started < 10
    assert call("GET", reg.url + "/subjects/a/versions")[1] == [1]  # reads still served from memory
    b.start()
    wait_until(lambda: call("POST", reg.url + "/subjects/a/versions", {"schema": V2})[0] == 200, 60,
               interval=1, what="the registry writes again")
    assert call("GET", reg.url + "/subjects/a/versions")[1] == [1, 2]  # the failed attempt wrote nothing
