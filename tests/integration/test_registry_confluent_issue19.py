"""Issue 19's findings against a real registry process and broker, over HTTP (requests) and confluent-kafka's
SchemaRegistryClient: subjects with '/', canonical schema identity, a stored schema that no longer parses,
Confluent's error codes and bodies."""

from __future__ import annotations

import json

import pytest
import requests
from confluent_kafka import Producer
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.error import SchemaRegistryError
from support import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]
CT = "application/vnd.schemaregistry.v1+json"
RECORD = {"type": "record", "name": "PageView", "namespace": "web",
          "fields": [{"name": "url", "type": "string"}, {"name": "ms", "type": "long", "default": 0}]}


def call(method: str, url: str, body=None):
    r = requests.request(method, url, data=None if body is None else json.dumps(body),
                         headers={"Content-Type": CT}, timeout=30)
    assert r.headers["content-type"].startswith(("application/vnd.schemaregistry", "application/json")), r.text
    return r.status_code, r.json()


def registered(*args, **kwargs):
    """A registration's status and schema id (the whole answer is checked in tests/integration/test_registry_guids.py)."""
    status, answer = call(*args, **kwargs)
    return status, answer.get("id") if status == 200 else answer


def start(registry, broker, topic: str):
    return registry(broker.bootstrap, kafkastore_topic=topic).url


def test_subjects_with_a_slash_work_on_every_route(broker, registry):
    u = start(registry, broker, "_schemas_slash")
    s = "team/pv-value"
    enc = "team%2Fpv-value"
    schema = json.dumps(RECORD)
    assert registered("POST", f"{u}/subjects/{enc}/versions", {"schema": schema}) == (200, 1)
    assert call("GET", f"{u}/subjects")[1] == [s]
    assert call("GET", f"{u}/subjects/{enc}/versions") == (200, [1])
    assert call("GET", f"{u}/subjects/{enc}/versions/latest")[1]["subject"] == s
    assert call("GET", f"{u}/subjects/{enc}/versions/1/schema")[1] == RECORD
    assert call("GET", f"{u}/subjects/{enc}/versions/1/referencedby") == (200, [])
    assert call("POST", f"{u}/subjects/{enc}", {"schema": schema})[1]["version"] == 1
    assert call("POST", f"{u}/compatibility/subjects/{enc}/versions/latest", {"schema": schema}) == \
        (200, {"is_compatible": True})
    assert call("PUT", f"{u}/config/{enc}", {"compatibility": "FULL"}) == (200, {"compatibility": "FULL"})
    assert call("GET", f"{u}/config/{enc}") == (200, {"compatibilityLevel": "FULL"})
    assert call("PUT", f"{u}/mode/{enc}", {"mode": "READWRITE"}) == (200, {"mode": "READWRITE"})
    assert call("GET", f"{u}/subjects/other%2Fx/versions") == \
        (404, {"error_code": 40401, "message": "Subject 'other/x' not found."})
    client = SchemaRegistryClient({"url": u})
    assert client.get_latest_version(s).schema_id == 1
    assert client.lookup_schema(s, Schema(schema, "AVRO")).version == 1
    assert call("DELETE", f"{u}/subjects/{enc}") == (200, [1])
    assert call("DELETE", f"{u}/subjects/{enc}?permanent=true") == (200, [1])


def test_the_stored_text_is_avros_and_normalize_sorts_what_confluent_sorts(broker, registry):
    """Confluent stores and serves Avro's Schema.toString() of what it was sent (its canonicalString), and with
    normalize=true AvroSchema.normalize() of it; equivalent texts find the same id."""
    u = start(registry, broker, "_schemas_avro_text")
    sent = ('{ "fields": [ {"type": {"type": "int"}, "name": "n", "doc": "d"}, {"name": "t", "type": '
            '{"logicalType": "timestamp-millis", "type": "long"}} ], "doc": "caf\u00e9", "name": "web.Hit", '
            '"type": "record" }')
    avro = ('{"type":"record","name":"Hit","namespace":"web","doc":"café","fields":[{"name":"n","type":"int",'
            '"doc":"d"},{"name":"t","type":{"type":"long","logicalType":"timestamp-millis"}}]}')
    assert registered("POST", f"{u}/subjects/hit-value/versions", {"schema": sent}) == (200, 1)
    assert call("GET", f"{u}/schemas/ids/1")[1]["schema"] == avro
    assert call("GET", f"{u}/subjects/hit-value/versions/1")[1]["schema"] == avro
    assert call("POST", f"{u}/subjects/hit-value", {"schema": sent})[1]["schema"] == avro
    client = SchemaRegistryClient({"url": u})
    assert client.get_schema(1).schema_str == avro
    assert client.register_schema("hit-value", Schema(avro, "AVRO")) == 1  # the served text finds the same id
    props = ('{"type":"record","name":"P","fields":[{"name":"amt","type":"double","default":0}],'
             '"zeta":"z","alpha":{"y":1,"x":2}}')
    assert registered("POST", f"{u}/subjects/p-value/versions?normalize=true", {"schema": props}) == (200, 2)
    assert call("GET", f"{u}/schemas/ids/2")[1]["schema"] == (
        '{"type":"record","name":"P","fields":[{"name":"amt","type":"double","default":0.0}],'
        '"alpha":{"x":2,"y":1},"zeta":"z"}')
    assert registered("POST", f"{u}/subjects/p-value/versions?normalize=true", {"schema": props}) == (200, 2)


def test_the_normalize_config_normalizes_without_the_query_parameter(broker, registry):
    """Confluent's ``normalize`` config: per subject or global, merged with the compatibility level, echoed by PUT,
    shown by GET; a subject setting wins over the global one."""
    u = start(registry, broker, "_schemas_normalize_config")
    props = '{"type":"record","name":"Q","fields":[{"name":"x","type":"float","default":1}],"b":1,"a":2}'
    normalized = '{"type":"record","name":"Q","fields":[{"name":"x","type":"float","default":1.0}],"a":2,"b":1}'
    assert call("PUT", f"{u}/config/q-value", {"normalize": True}) == (200, {"normalize": True})
    # a subject config without a level shows (and has) the server's default, as Confluent fills it in
    assert call("GET", f"{u}/config/q-value") == (200, {"compatibilityLevel": "BACKWARD", "normalize": True})
    assert call("PUT", f"{u}/config/q-value", {"compatibility": "full"}) == (
        200, {"compatibility": "FULL", "normalize": True})  # the config the update leaves
    assert call("GET", f"{u}/config/q-value") == (200, {"compatibilityLevel": "FULL", "normalize": True})
    assert registered("POST", f"{u}/subjects/q-value/versions", {"schema": props}) == (200, 1)
    assert call("GET", f"{u}/schemas/ids/1")[1]["schema"] == normalized
    assert call("POST", f"{u}/subjects/q-value", {"schema": props})[1]["version"] == 1  # lookup normalizes too
    assert call("PUT", f"{u}/config/q-value", {"normalize": "yes"})[0] == 400
    assert call("DELETE", f"{u}/config/q-value") == (200, {"compatibilityLevel": "FULL", "normalize": True})
    # the global setting, and a subject's false over it
    assert call("PUT", f"{u}/config", {"normalize": True}) == (200, {"normalize": True})
    assert call("GET", f"{u}/config") == (200, {"compatibilityLevel": "BACKWARD", "normalize": True})
    assert call("PUT", f"{u}/config/r-value", {"normalize": False}) == (200, {"normalize": False})
    assert registered("POST", f"{u}/subjects/s-value/versions", {"schema": props.replace('"Q"', '"S"')}) == \
        (200, 2)
    assert call("GET", f"{u}/schemas/ids/2")[1]["schema"] == normalized.replace('"Q"', '"S"')
    assert registered("POST", f"{u}/subjects/r-value/versions", {"schema": props.replace('"Q"', '"R"')}) == \
        (200, 3)
    assert call("GET", f"{u}/schemas/ids/3")[1]["schema"] == props.replace('"Q"', '"R"')
    assert call("PUT", f"{u}/config", {"compatibility": "nonsense"})[1]["error_code"] == 42203
    assert call("PUT", f"{u}/config", {}) == (200, {"normalize": True})  # nothing named: nothing changes
    assert call("PUT", f"{u}/config/r-value", {"normalize": None}) == (200, {})  # null clears a setting
    assert call("GET", f"{u}/config/r-value") == (200, {"compatibilityLevel": "BACKWARD"})
    assert call("GET", f"{u}/config/r-value?defaultToGlobal=true") == (
        200, {"compatibilityLevel": "BACKWARD", "normalize": True})
    assert call("DELETE", f"{u}/config") == (200, {"compatibilityLevel": "BACKWARD", "normalize": True})
    assert call("GET", f"{u}/config") == (200, {"compatibilityLevel": "BACKWARD"})


def test_equivalent_schema_texts_get_the_same_id_and_no_new_version(broker, registry):
    u = start(registry, broker, "_schemas_canonical")
    first = json.dumps(RECORD)
    reordered = json.dumps({"fields": [{"type": "string", "name": "url"}, {"default": 0, "type": {"type": "long"},
                                                                         "name": "ms"}],
                            "name": "web.PageView", "type": "record"}, indent=3)
    assert registered("POST", f"{u}/subjects/pv-value/versions", {"schema": first}) == (200, 1)
    assert registered("POST", f"{u}/subjects/pv-value/versions", {"schema": reordered}) == (200, 1)
    assert registered("POST", f"{u}/subjects/other-value/versions", {"schema": reordered}) == (200, 1)
    assert call("GET", f"{u}/subjects/pv-value/versions") == (200, [1])
    for suffix in ("", "?normalize=true"):
        status, body = call("POST", f"{u}/subjects/pv-value{suffix}", {"schema": reordered})
        assert status == 200 and (body["id"], body["version"]) == (1, 1)
    # the text served for the id stays the one first registered
    assert json.loads(call("GET", f"{u}/schemas/ids/1")[1]["schema"]) == RECORD
    client = SchemaRegistryClient({"url": u})
    assert client.register_schema("third-value", Schema(reordered, "AVRO")) == 1
    assert client.lookup_schema("pv-value", Schema(reordered, "AVRO")).schema_id == 1


def test_a_stored_schema_that_no_longer_parses_does_not_break_compatibility_checks(broker, registry):
    topic = "_schemas_unparsable"
    u = start(registry, broker, topic)
    assert registered("POST", f"{u}/subjects/bad-value/versions", {"schema": json.dumps(RECORD)}) == (200, 1)
    # a version 2 whose schema does not parse (a named type nobody defines), as an older registry might have
    # written it, straight into the topic
    bad = {"type": "record", "name": "PageView", "namespace": "web",
           "fields": [{"name": "url", "type": "web.Missing"}]}
    p = Producer({"bootstrap.servers": broker.bootstrap})
    p.produce(topic, key=json.dumps({"keytype": "SCHEMA", "subject": "bad-value", "version": 2, "magic": 1}),
              value=json.dumps({"subject": "bad-value", "version": 2, "id": 7, "schema": json.dumps(bad),
                                "deleted": False}))
    p.flush(30)
    wait_until(lambda: call("GET", f"{u}/subjects/bad-value/versions")[1] == [1, 2], timeout=30)
    for path in ("versions", "versions/latest", "versions/1"):
        status, body = call("POST", f"{u}/compatibility/subjects/bad-value/{path}", {"schema": json.dumps(RECORD)})
        assert status == 200 and body["is_compatible"] is True, (path, body)
    assert registered("POST", f"{u}/subjects/bad-value/versions", {"schema": json.dumps(RECORD)}) == (200, 1)


def test_confluent_error_codes_and_json_bodies(broker, registry):
    u = start(registry, broker, "_schemas_errors")
    assert registered("POST", f"{u}/subjects/e-value/versions", {"schema": json.dumps(RECORD)}) == (200, 1)
    assert call("DELETE", f"{u}/subjects/e-value/versions/1") == (200, 1)
    status, body = call("DELETE", f"{u}/subjects/e-value/versions/1")
    assert (status, body["error_code"]) == (404, 40406), body
    assert call("GET", f"{u}/schemas/ids/abc") == (404, {"error_code": 404, "message": "HTTP 404 Not Found"})
    assert call("GET", f"{u}/no/such/route") == (404, {"error_code": 404, "message": "HTTP 404 Not Found"})
    status, body = call("PATCH", f"{u}/subjects")
    assert status == 405 and body == {"error_code": 405, "message": "HTTP 405 Method Not Allowed"}
    assert call("GET", f"{u}/schemas/ids/99") == (404, {"error_code": 40403, "message": "Schema not found"})
    client = SchemaRegistryClient({"url": u})
    with pytest.raises(SchemaRegistryError) as err:
        client.get_version("e-value", 1)
    assert err.value.error_code == 40402


def test_compatibility_against_a_version_of_an_unknown_subject(broker, registry):
    u = start(registry, broker, "_schemas_compat_unknown")
    body = {"schema": json.dumps(RECORD)}
    status, err = call("POST", f"{u}/compatibility/subjects/nobody-value/versions/3", body)
    assert (status, err["error_code"]) == (404, 40402), err
    assert call("POST", f"{u}/compatibility/subjects/nobody-value/versions/latest", body) == \
        (200, {"is_compatible": True})


def test_get_schemas_with_prefix_latest_only_offset_and_limit(broker, registry):
    u = start(registry, broker, "_schemas_list")
    v2 = {**RECORD, "fields": RECORD["fields"] + [{"name": "ref", "type": "string", "default": ""}]}
    for subject, schema in (("a-value", RECORD), ("a-value", v2), ("b-value", RECORD)):
        assert call("POST", f"{u}/subjects/{subject}/versions", {"schema": json.dumps(schema)})[0] == 200
    listed = call("GET", f"{u}/schemas")[1]
    assert [(s["subject"], s["version"], s["id"]) for s in listed] == [("a-value", 1, 1), ("a-value", 2, 2),
                                                                       ("b-value", 1, 1)]
    assert [s["version"] for s in call("GET", f"{u}/schemas?subjectPrefix=a-&latestOnly=true")[1]] == [2]
    assert [s["subject"] for s in call("GET", f"{u}/schemas?offset=1&limit=1")[1]] == ["a-value"]
    assert call("DELETE", f"{u}/subjects/b-value")[0] == 200
    assert [s["subject"] for s in call("GET", f"{u}/schemas?subjectPrefix=b")[1]] == []
    assert [s["subject"] for s in call("GET", f"{u}/schemas?subjectPrefix=b&deleted=true")[1]] == ["b-value"]
    assert call("GET", f"{u}/subjects?deleted=true")[1] == ["a-value", "b-value"]


def test_a_record_that_cannot_be_applied_is_counted_and_logged_at_error(broker, registry):
    topic = "_schemas_skipped"
    proc = registry(broker.bootstrap, kafkastore_topic=topic)
    u = proc.url
    assert call("GET", f"{u}/status")[1]["records_skipped"] == 0
    p = Producer({"bootstrap.servers": broker.bootstrap})
    p.produce(topic, key=b"not json", value=b"{}")
    p.produce(topic, key=json.dumps({"keytype": "SCHEMA", "subject": "x", "version": 1, "magic": 1}),
              value=json.dumps({"subject": "x", "version": 1, "schema": '"int"'}))  # no "id"
    p.flush(30)
    wait_until(lambda: call("GET", f"{u}/status")[1]["records_skipped"] == 2, timeout=30)
    assert "KeyError" in call("GET", f"{u}/status")[1]["last_skipped"]["error"]
    assert proc.log_text().count(f"SKIPPED the {topic} record at offset") == 2, proc.log_text()[-3000:]
    # the registry keeps working
    assert registered("POST", f"{u}/subjects/y-value/versions", {"schema": '"int"'}) == (200, 1)


def test_delete_subject_mode_and_contexts(broker, registry):
    u = start(registry, broker, "_schemas_mode")
    assert call("GET", f"{u}/contexts") == (200, ["."])
    assert call("PUT", f"{u}/mode/m-value", {"mode": "READONLY"}) == (200, {"mode": "READONLY"})
    assert call("DELETE", f"{u}/mode/m-value") == (200, {"mode": "READONLY"})
    assert call("GET", f"{u}/mode/m-value")[1]["error_code"] == 40409
    assert call("DELETE", f"{u}/mode/m-value")[1]["error_code"] == 40401


def test_content_negotiation(broker, registry):
    u = start(registry, broker, "_schemas_negotiation")
    r = requests.get(f"{u}/subjects", headers={"Accept": "application/json"}, timeout=10)
    assert r.status_code == 200 and r.headers["content-type"].startswith("application/json")
    r = requests.get(f"{u}/subjects", headers={"Accept": "*/*"}, timeout=10)
    assert r.headers["content-type"].startswith(CT)
    r = requests.get(f"{u}/subjects", headers={"Accept": "text/html"}, timeout=10)
    assert r.status_code == 406 and r.json()["error_code"] == 406
    r = requests.post(f"{u}/subjects/n-value/versions", data=json.dumps({"schema": '"int"'}),
                      headers={"Content-Type": "text/plain"}, timeout=10)
    assert r.status_code == 415 and r.json()["error_code"] == 415
    r = requests.post(f"{u}/subjects/n-value/versions", data=json.dumps({"schema": '"int"'}),
                      headers={"Content-Type": "application/octet-stream"}, timeout=10)
    assert (r.status_code, r.json()["id"]) == (200, 1)
    assert SchemaRegistryClient({"url": u}).get_subjects() == ["n-value"]


def test_an_empty_schema_is_42201_empty_schema(broker, registry):
    u = start(registry, broker, "_schemas_empty")
    for body in ({"schema": ""}, {}):
        assert call("POST", f"{u}/subjects/x-value/versions", body) == \
            (422, {"error_code": 42201, "message": "Empty schema"})
