"""Confluent's DEK registry, judged by confluent-kafka's client-side field level encryption (FieldEncryptionExecutor
with the local KMS driver, Tink inside): an ENCRYPT rule on a PII-tagged field makes AvroSerializer create its KEK
and DEK in the registry and write the field encrypted; AvroDeserializer reads the DEK back and decrypts it. For a
shared KEK the registry makes and wraps the DEK itself, and Tink's local KMS unwraps what it wrapped. Plus the REST
answers and error codes of Confluent's DekRegistryResource, and the keys surviving in the store."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys

import pytest
import requests
from confluent_kafka.schema_registry import Rule, RuleKind, RuleMode, RuleParams, RuleSet, Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.schema_registry.rule_registry import RuleRegistry
from confluent_kafka.serialization import MessageField, SerializationContext

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

SECRET = "a-local-kms-secret"
ORDER = {"type": "record", "name": "Order", "fields": [
    {"name": "id", "type": "string"},
    {"name": "ssn", "type": "string", "confluent:tags": ["PII"]}]}
RECORD = {"id": "order-17", "ssn": "123-45-6789"}
KEKS = "/dek-registry/v1/keks"
WRONG_SECRET_READER = """
import sys
from confluent_kafka.error import SerializationError
from test_registry_deks import serde, SerializationContext, MessageField
try:
    serde(sys.argv[1], {"secret": "not-the-secret"})[1](bytes.fromhex(sys.argv[2]),
                                                        SerializationContext("orders", MessageField.VALUE))
except SerializationError as exc:
    print(exc.__cause__)
    sys.exit(3)
"""


def rules(days_ahead: int = 0) -> RuleRegistry:
    """A rule registry of its own per client (the global one keeps its first registry URL), its encryption
    executor's clock ``days_ahead`` of ours; the local KMS driver."""
    from confluent_kafka.schema_registry.rules.encryption.encrypt_executor import Clock, FieldEncryptionExecutor
    from confluent_kafka.schema_registry.rules.encryption.localkms.local_driver import LocalKmsDriver

    class Later(Clock):
        def now(self) -> int:
            return super().now() + days_ahead * 86_400_000

    LocalKmsDriver.register()
    registry = RuleRegistry()
    registry.register_executor(FieldEncryptionExecutor(Later()))
    return registry


def encrypt_rule(kek: str, on_failure: str = "ERROR,ERROR", **more: str) -> RuleSet:
    params = {"encrypt.kek.name": kek, "encrypt.kms.type": "local-kms", "encrypt.kms.key.id": f"local-kms://{kek}",
              **more}
    return RuleSet(None, [Rule("encrypt-pii", "", RuleKind.TRANSFORM, RuleMode.WRITEREAD, "ENCRYPT", ["PII"],
                               RuleParams(params), None, None, on_failure, False)])


def serde(url: str, rule_conf: dict | None, days_ahead: int = 0) -> tuple[AvroSerializer, AvroDeserializer]:
    client = SchemaRegistryClient({"url": url})
    conf = {"auto.register.schemas": False, "use.latest.version": True}
    return (AvroSerializer(client, json.dumps(ORDER), conf=conf, rule_conf=rule_conf,
                           rule_registry=rules(days_ahead)),
            AvroDeserializer(client, rule_conf=rule_conf, rule_registry=rules()))


def call(method: str, url: str, body: dict | None = None) -> tuple[int, dict | list | None]:
    r = requests.request(method, url, json=body, timeout=30)
    return r.status_code, (r.json() if r.content else None)


def test_confluent_field_encryption_keeps_its_keys_here(broker, registry):
    url = registry(broker.bootstrap, kafkastore_topic="_schemas_deks").url
    SchemaRegistryClient({"url": url}).register_schema("orders-value", Schema(json.dumps(ORDER), "AVRO", [],
                                                                              None, encrypt_rule("orders-kek")))
    ctx = SerializationContext("orders", MessageField.VALUE)
    serializer, deserializer = serde(url, {"secret": SECRET})
    payload = serializer(dict(RECORD), ctx)  # (the serializer encrypts in place)
    assert b"order-17" in payload and b"123-45-6789" not in payload  # the PII field only is encrypted

    # the serializer made its KEK (unshared: the registry never sees a key in clear) and a wrapped DEK
    assert call("GET", url + KEKS) == (200, ["orders-kek"])
    status, kek = call("GET", f"{url}{KEKS}/orders-kek")
    assert status == 200 and kek["kmsType"] == "local-kms" and kek["kmsKeyId"] == "local-kms://orders-kek"
    assert kek["shared"] is False and kek["kmsProps"] == {} and isinstance(kek["ts"], int)
    assert call("GET", f"{url}{KEKS}/orders-kek/deks") == (200, ["orders-value"])
    status, dek = call("GET", f"{url}{KEKS}/orders-kek/deks/orders-value/versions/latest")
    assert status == 200 and (dek["version"], dek["algorithm"]) == (1, "AES256_GCM")
    assert "keyMaterial" not in dek and len(base64.b64decode(dek["encryptedKeyMaterial"])) > 32

    # a second client reads: the DEK comes back from the registry and opens with the KEK's secret
    assert serde(url, {"secret": SECRET})[1](payload, ctx) == RECORD
    # another secret: the DEK does not unwrap (in a process of its own: Tink keeps the first local KMS client)
    reader = subprocess.run([sys.executable, "-c", WRONG_SECRET_READER, url, payload.hex()], capture_output=True,
                            text=True, timeout=120, env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)))
    assert reader.returncode == 3 and "failed to decrypt" in reader.stdout, reader.stdout + reader.stderr

    # the keys are records of the store: a read-only registry replaying the topic serves them, and the reader too
    replica = registry(broker.bootstrap, kafkastore_topic="_schemas_deks", mode="READONLY").url
    assert call("GET", f"{replica}{KEKS}/orders-kek/deks/orders-value/versions/1") == (200, dek)
    assert serde(replica, {"secret": SECRET})[1](payload, ctx) == RECORD
    status, refused = call("POST", f"{replica}{KEKS}", {"name": "k2", "kmsType": "local-kms", "kmsKeyId": "x"})
    assert (status, refused["error_code"]) == (422, 42205)


def test_a_shared_kek_has_the_registry_make_and_wrap_its_deks(broker, registry):
    from confluent_kafka.schema_registry.rules.encryption.localkms.local_client import LocalKmsClient

    url = registry(broker.bootstrap, kafkastore_topic="_schemas_shared_deks").url
    shared = {"name": "shared-kek", "kmsType": "local-kms", "kmsKeyId": "local-kms://shared-kek",
              "kmsProps": {"secret": SECRET}, "shared": True}
    status, kek = call("POST", f"{url}{KEKS}?testSharing=true", shared)
    assert status == 200 and kek["shared"] is True and kek["kmsProps"] == {"secret": SECRET}
    assert call("POST", f"{url}{KEKS}/shared-kek/test")[0] == 200
    SchemaRegistryClient({"url": url}).register_schema("users-value", Schema(json.dumps(ORDER), "AVRO", [],
                                                                             None, encrypt_rule("shared-kek")))
    ctx = SerializationContext("users", MessageField.VALUE)
    serializer, deserializer = serde(url, None)  # no secret on the client: the registry holds the KMS access
    payload = serializer(dict(RECORD), ctx)  # (the serializer encrypts in place)
    assert b"123-45-6789" not in payload
    assert deserializer(payload, ctx) == RECORD

    status, dek = call("GET", f"{url}{KEKS}/shared-kek/deks/users-value")
    assert status == 200 and dek["keyMaterial"]
    raw = LocalKmsClient(SECRET).get_aead("local-kms://shared-kek").decrypt(
        base64.b64decode(dek["encryptedKeyMaterial"]), b"")  # Tink opens what the registry wrapped
    assert raw == base64.b64decode(dek["keyMaterial"])

    # a shared KEK whose KMS the registry cannot reach: testSharing refuses it, DEK generation fails with 50070
    aws = {"name": "aws-kek", "kmsType": "aws-kms", "kmsKeyId": "arn:aws:kms:eu-west-1:1:key/k", "shared": True}
    status, failed = call("POST", f"{url}{KEKS}?testSharing=true", aws)
    assert (status, failed["error_code"]) == (500, 50070)
    assert call("POST", f"{url}{KEKS}", aws)[0] == 200
    status, failed = call("POST", f"{url}{KEKS}/aws-kek/deks/s1", {})
    assert (status, failed["error_code"]) == (500, 50070) and "Could not generate encrypted dek for s1" in \
        failed["message"]
    status, failed = call("POST", f"{url}{KEKS}/orders/test")
    assert (status, failed["error_code"]) == (404, 40470)


def test_dek_rotation_makes_the_next_version(broker, registry):
    """``encrypt.dek.expiry.days``: a writer finding its DEK older than that (by the registry's ``ts``) creates the
    next version; records written under either version stay readable."""
    url = registry(broker.bootstrap, kafkastore_topic="_schemas_dek_rotation").url
    SchemaRegistryClient({"url": url}).register_schema("rotated-value", Schema(
        json.dumps(ORDER), "AVRO", [], None, encrypt_rule("rotated-kek", **{"encrypt.dek.expiry.days": "1"})))
    ctx = SerializationContext("rotated", MessageField.VALUE)
    first = serde(url, {"secret": SECRET})[0](dict(RECORD), ctx)
    again = serde(url, {"secret": SECRET})[0](dict(RECORD), ctx)  # the same day: the same DEK
    assert call("GET", f"{url}{KEKS}/rotated-kek/deks/rotated-value/versions") == (200, [1])
    later = serde(url, {"secret": SECRET}, days_ahead=2)[0](dict(RECORD), ctx)
    assert call("GET", f"{url}{KEKS}/rotated-kek/deks/rotated-value/versions") == (200, [1, 2])
    reader = serde(url, {"secret": SECRET})[1]
    assert [reader(p, ctx) for p in (first, again, later)] == [RECORD] * 3


def test_the_dek_registry_answers_as_confluents(broker, registry):
    url = registry(broker.bootstrap, kafkastore_topic="_schemas_dek_rest").url + KEKS
    kek = {"name": "k1", "kmsType": "local-kms", "kmsKeyId": "local-kms://k1", "doc": "first"}

    def refused(method: str, path: str, body: dict | None = None) -> tuple[int, int, str]:
        status, answer = call(method, url + path, body)
        return status, answer["error_code"], answer["message"]

    assert refused("POST", "", dict(kek, name="1k")) == (422, 42271, "Invalid or missing value for field 'name' of key")
    assert refused("POST", "", dict(kek, kmsKeyId=""))[:2] == (422, 42271)
    assert refused("POST", "", {"name": "k0", "kmsKeyId": "x"})[2] == \
        "Invalid or missing value for field 'kmsType' of key"
    assert refused("POST", "", dict(kek, kmsType="aws-kms", kmsKeyId="projects/x"))[2] == \
        "Invalid or missing value for field 'kmsKeyId' of key"
    status, made = call("POST", url, kek)
    assert status == 200 and made == {"name": "k1", "kmsType": "local-kms", "kmsKeyId": "local-kms://k1",
                                      "kmsProps": {}, "doc": "first", "shared": False, "ts": made["ts"]}
    assert refused("POST", "", kek) == (409, 40971, "Key 'k1' already exists; use a different value")
    assert refused("GET", "/nope") == (404, 40470, "Key 'nope' not found")
    assert refused("POST", "/k1/test") == (422, 42271, "Invalid or missing value for field 'shared' of key")

    # DEKs of an unshared KEK come wrapped by the client
    assert refused("POST", "/k1/deks/s1", {}) == (422, 42271,
                                                 "Invalid or missing value for field 'encryptedKeyMaterial' of key")
    wrapped = [base64.b64encode(bytes([n]) * 60).decode() for n in (1, 2, 3)]
    for version, material in ((1, wrapped[0]), (2, wrapped[1])):
        status, dek = call("POST", f"{url}/k1/deks/s1", {"version": version, "encryptedKeyMaterial": material})
        assert status == 200 and dek == {"kekName": "k1", "subject": "s1", "version": version,
                                         "algorithm": "AES256_GCM", "encryptedKeyMaterial": material,
                                         "ts": dek["ts"]}
    status, _ = call("POST", f"{url}/k1/deks", {"subject": "t/1", "algorithm": "AES256_SIV",
                                                "encryptedKeyMaterial": wrapped[2]})  # the older form
    assert status == 200
    assert refused("POST", "/k1/deks/s1", {"encryptedKeyMaterial": wrapped[2]})[:2] == (409, 40971)
    assert refused("POST", "/nope/deks/s1", {"encryptedKeyMaterial": wrapped[2]})[:2] == (404, 40470)
    assert call("GET", f"{url}/k1/deks") == (200, ["s1", "t/1"])
    assert call("GET", f"{url}/k1/deks?offset=1&limit=1") == (200, ["t/1"])
    assert call("GET", f"{url}/k1/deks/s1/versions") == (200, [1, 2])
    assert call("GET", f"{url}/k1/deks/t%2F1/versions?algorithm=AES256_SIV") == (200, [1])
    assert call("GET", f"{url}/k1/deks/t%2F1/versions") == (200, [])
    assert call("GET", f"{url}/k1/deks/s1/versions/latest")[1]["version"] == 2
    assert call("GET", f"{url}/k1/deks/s1")[1]["version"] == 1  # Confluent's GET of a subject's DEK: version 1
    assert refused("GET", "/k1/deks/s1/versions/0")[:2] == (422, 42202)
    assert refused("GET", "/k1/deks/s1/versions/3") == (404, 40470, "Key 's1' not found")
    assert call("GET", f"{url}/k1/deks/s1/versions/1?algorithm=AES512")[0] == 404
    assert call("GET", f"{url}?subjectPrefix=t") == (200, ["k1"])
    assert call("GET", f"{url}?subjectPrefix=x") == (200, [])

    # KEK updates: the fields sent, the rest kept
    status, updated = call("PUT", f"{url}/k1", {"doc": "second"})
    assert status == 200 and updated["doc"] == "second" and updated["kmsKeyId"] == "local-kms://k1"
    assert refused("PUT", "/nope", {"doc": "x"})[:2] == (404, 40470)

    # deletes: a KEK with DEKs stays, a permanent delete needs a soft one first, a DEK of a deleted KEK stays deleted
    assert refused("DELETE", "/k1") == (422, 42272, "One or more references exist to the key 'k1'")
    assert refused("DELETE", "/k1/deks/s1?permanent=true") == (
        404, 40471, "Key 's1' was not deleted first before being permanently deleted")
    assert call("DELETE", f"{url}/k1/deks/s1/versions/2") == (204, None)
    assert call("GET", f"{url}/k1/deks/s1/versions") == (200, [1])
    assert call("GET", f"{url}/k1/deks/s1/versions?deleted=true") == (200, [1, 2])
    assert call("GET", f"{url}/k1/deks/s1/versions/2?deleted=true")[1]["deleted"] is True
    assert call("DELETE", f"{url}/k1/deks/s1") == (204, None)
    assert call("DELETE", f"{url}/k1/deks/t%2F1?algorithm=AES256_SIV") == (204, None)
    assert refused("GET", "/k1/deks/s1/versions/1") == (404, 40470, "Key 's1' not found")
    assert call("DELETE", f"{url}/k1") == (204, None)
    assert call("GET", url) == (200, [])
    assert call("GET", f"{url}?deleted=true") == (200, ["k1"])
    assert refused("POST", "/k1/deks/s1/undelete") == (404, 40472, "Key 'k1' must be undeleted first")
    assert refused("DELETE", "/k1?permanent=true") == (422, 42272, "One or more references exist to the key 'k1'")
    assert call("POST", f"{url}/k1/undelete") == (204, None)
    assert call("POST", f"{url}/k1/deks/s1/versions/2/undelete") == (204, None)
    assert call("GET", f"{url}/k1/deks/s1/versions") == (200, [2])
    assert call("POST", f"{url}/k1/deks/s1/undelete") == (204, None)
    assert call("GET", f"{url}/k1/deks/s1/versions") == (200, [1, 2])

    # permanently: DEKs soft-deleted then removed, then the KEK; nothing is left, even among the deleted
    assert call("DELETE", f"{url}/k1/deks/s1") == (204, None)
    assert call("DELETE", f"{url}/k1/deks/s1?permanent=true") == (204, None)
    assert call("DELETE", f"{url}/k1/deks/t%2F1?algorithm=AES256_SIV&permanent=true") == (204, None)
    assert call("GET", f"{url}/k1/deks?deleted=true") == (200, [])
    assert refused("DELETE", "/k1?permanent=true")[:2] == (404, 40471)
    assert call("DELETE", f"{url}/k1") == (204, None)
    assert call("DELETE", f"{url}/k1?permanent=true") == (204, None)
    assert refused("GET", "/k1?deleted=true")[:2] == (404, 40470)
    # a deleted KEK created again with the same fields is undeleted; with other fields it is refused
    assert call("POST", url, kek)[0] == 200
    assert call("DELETE", f"{url}/k1") == (204, None)
    assert refused("POST", "", dict(kek, doc="other"))[:2] == (409, 40971)
    assert call("POST", url, kek)[0] == 200 and call("GET", url) == (200, ["k1"])
