"""Protobuf in the registry (schemaType PROTOBUF): text and base64 descriptors to one stored text (Confluent's way
of writing a descriptor), imports of references and of well-known types, and Confluent's protobuf compatibility
rules, one family per case; then the registry's domain over an in-memory store."""

from __future__ import annotations


import pytest
from registry_memory import memory_registry, run
from google.protobuf import descriptor_pb2

from schema_registry import protobuf_diff, protobuf_schema, protobuf_text
from schema_registry.compatibility import InvalidSchema
from schema_registry.core import INCOMPATIBLE, INVALID_SCHEMA, RegistryError

pytestmark = [pytest.mark.unit, pytest.mark.timeout(120)]

P3 = 'syntax = "proto3";\n'


def side(text: str, refs: dict | None = None, versions: dict | None = None) -> protobuf_diff.Side:
    fd, deps = protobuf_schema.parse(text, refs or {})
    return protobuf_diff.Side(fd, deps, versions or {})


def diff(original: str, update: str, **kw) -> list[str]:
    return sorted(f"{k} {p}" for k, p in protobuf_diff.differences(side(original, **kw), side(update, **kw)))


def test_text_and_base64_descriptor_are_one_stored_text():
    text = (P3 + 'package shop;\nimport "google/protobuf/timestamp.proto";\noption java_package = "com.shop";\n'
            "message Order {\n  reserved 9;\n  string id = 1;\n  map<string, int64> lines = 2;\n"
            "  optional int64 coupon = 3;\n  google.protobuf.Timestamp at = 4;\n"
            "  oneof pay { string card = 5; string iban = 6; }\n  repeated int32 codes = 7 [packed = false];\n"
            "  enum State { NEW = 0; PAID = 1; }\n  State state = 8;\n}\n")
    fd, deps = protobuf_schema.parse(text, {})
    assert "google/protobuf/timestamp.proto" in deps
    stored = protobuf_text.render(fd)
    assert stored == (
        'syntax = "proto3";\npackage shop;\n\nimport "google/protobuf/timestamp.proto";\n\n'
        'option java_package = "com.shop";\n\nmessage Order {\n  reserved 9;\n\n  string id = 1;\n'
        "  map<string, int64> lines = 2;\n  optional int64 coupon = 3;\n  .google.protobuf.Timestamp at = 4;\n"
        "  repeated int32 codes = 7 [packed = false];\n  .shop.Order.State state = 8;\n\n  oneof pay {\n"
        "    string card = 5;\n    string iban = 6;\n  }\n\n  enum State {\n    NEW = 0;\n    PAID = 1;\n  }\n}\n")
    encoded = protobuf_schema.serialized(fd)
    assert protobuf_text.render(protobuf_schema.parse(encoded, {})[0]) == stored
    assert protobuf_text.render(protobuf_schema.parse(stored, {})[0]) == stored  # protoc takes it back


def test_proto2_defaults_required_and_extensions():
    text = ('syntax = "proto2";\nmessage P {\n  required string a = 1 [default = "x\\"y"];\n'
            "  optional int32 b = 2 [default = 5];\n  extensions 100 to max;\n}\n"
            "extend P {\n  optional string note = 100;\n}\n")
    stored = protobuf_text.render(protobuf_schema.parse(text, {})[0])
    assert '  required string a = 1 [default = "x\\"y"];\n' in stored
    assert "  extensions 100 to max;\n" in stored and "extend .P {\n  optional string note = 100;\n}\n" in stored
    assert protobuf_text.render(protobuf_schema.parse(stored, {})[0]) == stored


def test_custom_and_confluent_meta_options_are_written_from_text_and_descriptor():
    text = (P3 + 'package x;\nimport "google/protobuf/descriptor.proto";\nimport "confluent/meta.proto";\n'
            "extend google.protobuf.FieldOptions { string pii = 50001; }\n"
            'message M {\n  string s = 1 [(pii) = "email", (confluent.field_meta) = { doc: "d", '
            'params: [{key: "precision", value: "5"}], tags: ["PII"] }];\n}\n')
    fd, deps = protobuf_schema.parse(text, {})
    stored = protobuf_text.render(fd, dependencies=deps)
    assert ('  string s = 1 [\n    (confluent.field_meta) = {\n      doc: "d",\n      params: [\n        {\n'
            '          value: "5",\n          key: "precision"\n        }\n      ],\n      tags: [\n        "PII"\n'
            '      ]\n    },\n    (x.pii) = "email"\n  ];\n') in stored
    again, again_deps = protobuf_schema.parse(protobuf_schema.serialized(fd), {})
    assert protobuf_text.render(again, dependencies=again_deps) == stored
    assert "pii" not in protobuf_text.render(fd).split("extend")[0]  # without the imports: standard options only


def test_normalize_sorts_fields_oneofs_constants_and_imports():
    text = (P3 + 'import "google/protobuf/timestamp.proto";\nimport "google/protobuf/duration.proto";\n'
            "message M {\n  oneof b { int32 z = 9; int32 y = 2; }\n  string s = 5;\n  oneof a { string q = 1; }\n"
            "  enum E { A = 0; C = 2; B = 1; }\n}\n")
    fd = protobuf_schema.parse(text, {})[0]
    normalized = protobuf_text.render(fd, normalize=True)
    assert normalized.index("duration.proto") < normalized.index("timestamp.proto")
    assert normalized.index("oneof a") < normalized.index("oneof b") < normalized.index("B = 1")
    assert normalized.index("int32 y = 2") < normalized.index("int32 z = 9")
    assert protobuf_text.render(fd) != normalized


def test_imports_of_references_and_builtins():
    common = P3 + "package c;\nmessage Geo { double lat = 1; }\n"
    view = P3 + 'import "c/common.proto";\nimport "google/type/date.proto";\nimport "confluent/meta.proto";\n' \
        "message V { c.Geo geo = 1; google.type.Date day = 2; }\n"
    fd, deps = protobuf_schema.parse(view, {"c/common.proto": common})
    assert {"c/common.proto", "google/type/date.proto", "confluent/meta.proto"} <= set(deps)
    assert "  .c.Geo geo = 1;\n" in protobuf_text.render(fd)
    with pytest.raises(InvalidSchema, match="c/common.proto"):
        protobuf_schema.parse(view, {})


@pytest.mark.parametrize("text, message", [
    (P3 + "message {", "Expected message name"),
    (P3 + "message A { string a = 1; int32 b = 1; }", "already been used"),
    (P3 + "message A { Missing m = 1; }", "not defined"),
])
def test_bad_schemas_are_refused_with_protocs_message(text, message):
    with pytest.raises(InvalidSchema, match=message):
        protobuf_schema.parse(text, {})


M = P3 + "package p;\nmessage M {\n  string a = 1;\n  int64 b = 2;\n}\n"

CASES = [  # (what, original, update, differences)
    ("same", M, M, []),
    ("field added", M, M.replace("}\n", "  bool c = 3;\n}\n"), ["FIELD_ADDED #/M/3"]),
    ("field removed", M, M.replace("  int64 b = 2;\n", ""), ["FIELD_REMOVED #/M/2"]),
    ("field renamed", M, M.replace("int64 b", "int64 bee"), ["FIELD_NAME_CHANGED #/M/2"]),
    ("int64 to int32: one wire family", M, M.replace("int64 b", "int32 b"), []),
    ("int64 to sint64", M, M.replace("int64 b", "sint64 b"), ["FIELD_SCALAR_KIND_CHANGED #/M/2"]),
    ("string to bytes", M, M.replace("string a", "bytes a"), []),
    ("scalar to message", M, M.replace("string a = 1;", "M a = 1;"), ["FIELD_KIND_CHANGED #/M/1"]),
    ("package changed", M, M.replace("package p;", "package q;"), ["PACKAGE_CHANGED #/"]),
    ("message removed", M + "message N {}\n", M, ["MESSAGE_REMOVED #/N"]),
    ("message added before another: moved", M, M.replace("message M", "message A {}\nmessage M"),
     ["MESSAGE_ADDED #/A", "MESSAGE_MOVED #/M"]),
    ("enum constant added", M + "enum E { X = 0; }\n", M + "enum E { X = 0; Y = 1; }\n", ["ENUM_CONST_ADDED #/E/1"]),
    ("field moved into a new oneof", M, M.replace("  int64 b = 2;\n", "  oneof o { int64 b = 2; }\n"),
     ["ONEOF_ADDED #/M/o"]),
    ("two fields moved into a oneof", M, P3 + "package p;\nmessage M {\n  oneof o { string a = 1; int64 b = 2; }\n}\n",
     ["MULTIPLE_FIELDS_MOVED_TO_ONEOF #/M/o", "ONEOF_ADDED #/M/o"]),
    ("oneof field removed", P3 + "message M { oneof o { string a = 1; int64 b = 2; } }\n",
     P3 + "message M { oneof o { string a = 1; } }\n", ["ONEOF_FIELD_REMOVED #/M/o/2"]),
    ("map value type changed", P3 + "message M { map<string, int64> m = 1; }\n",
     P3 + "message M { map<string, string> m = 1; }\n", ["FIELD_SCALAR_KIND_CHANGED #/M/1"]),
    ("proto2 optional to repeated number", 'syntax = "proto2";\nmessage M { optional int32 n = 1; }\n',
     'syntax = "proto2";\nmessage M { repeated int32 n = 1; }\n', ["FIELD_NUMERIC_LABEL_CHANGED #/M/1"]),
    ("proto2 required field added", 'syntax = "proto2";\nmessage M { optional int32 n = 1; }\n',
     'syntax = "proto2";\nmessage M { optional int32 n = 1; required string s = 2; }\n',
     ["REQUIRED_FIELD_ADDED #/M/2"]),
    ("nested message's field changed", P3 + "message M { message N { int32 x = 1; } N n = 1; }\n",
     P3 + "message M { message N { string x = 1; } N n = 1; }\n", ["FIELD_SCALAR_KIND_CHANGED #/M/N/1"]),
]


@pytest.mark.parametrize("what, original, update, expected", CASES, ids=[c[0] for c in CASES])
def test_confluents_protobuf_differences(what, original, update, expected):
    assert diff(original, update) == sorted(expected)


def test_a_referenced_message_is_compared_unless_it_is_the_same_reference_version():
    v1 = P3 + "package c;\nmessage Geo { double lat = 1; }\n"
    v2 = P3 + "package c;\nmessage Geo { string lat = 1; }\n"
    view = P3 + 'import "c.proto";\nmessage V { c.Geo geo = 1; }\n'
    old = side(view, {"c.proto": v1}, {"c.proto": ("c", 1)})
    new = side(view, {"c.proto": v2}, {"c.proto": ("c", 2)})
    assert sorted(protobuf_diff.differences(old, new)) == [("FIELD_NAMED_TYPE_CHANGED", "#/V/1"),
                                                           ("FIELD_SCALAR_KIND_CHANGED", "#/Geo/1")]
    assert protobuf_diff.incompatible(old, new)[0] == (
        '{errorType:"FIELD_SCALAR_KIND_CHANGED", description:"The kind of a SCALAR field at path \'#/Geo/1\' in the '
        '%s schema does not match its kind in the %s schema"}')
    same = side(view, {"c.proto": v2}, {"c.proto": ("c", 1)})  # the same reference version: not compared again
    assert protobuf_diff.differences(old, same) == []


# ---- the registry's domain over an in-memory store ----------------------------------------------------------
def test_register_look_up_serve_and_check_in_the_registry():
    r = memory_registry()
    text = P3 + "package p;\n\nmessage M {\n  string a = 1;\n  int64 b = 2;\n}\n"  # already Confluent's text
    sid = run(r.register("m-value", text, "PROTOBUF", [], False))[1].schema_id
    stored = r.schema(sid)
    assert stored.schema_type == "PROTOBUF" and stored.text == text
    encoded = r.serialized(stored, "serialized")
    fd = descriptor_pb2.FileDescriptorProto.FromString(__import__("base64").b64decode(encoded))
    assert fd.message_type[0].name == "M"
    assert r.serialized(stored, None) == text
    # the descriptor finds the text's version, and is the same schema
    assert run(r.register("m-value", encoded, "PROTOBUF", [], False))[1].schema_id == sid
    assert run(r.lookup("m-value", encoded, "PROTOBUF", [], False))[0].version == 1
    # a compatible change, then an incompatible one with Confluent's messages
    run(r.register("m-value", text.replace("}\n", "  bool c = 3;\n}\n"), "PROTOBUF", [], False))
    with pytest.raises(RegistryError) as err:
        run(r.register("m-value", text.replace("int64 b", "double b"), "PROTOBUF", [], False))
    assert err.value.code == INCOMPATIBLE and "FIELD_SCALAR_KIND_CHANGED" in err.value.message
    assert run(r.check("m-value", '{"type": "string"}', "JSON", [], None)) == [
        "Incompatible because of different schema type"]
    with pytest.raises(RegistryError) as err:
        run(r.register("bad", P3 + "message {", "PROTOBUF", [], False))
    assert err.value.code == INVALID_SCHEMA


def test_references_between_protobuf_subjects():
    r = memory_registry()
    run(r.register("c.proto", P3 + "package c;\nmessage Geo { double lat = 1; }\n", "PROTOBUF", [], False))
    refs = [{"name": "c.proto", "subject": "c.proto", "version": 1}]
    view = P3 + 'import "c.proto";\nmessage V { c.Geo geo = 1; }\n'
    sid = run(r.register("v-value", view, "PROTOBUF", refs, False))[1].schema_id
    assert r.referenced_by("c.proto", 1) == [sid]
    assert "  .c.Geo geo = 1;\n" in r.schema(sid).text
    with pytest.raises(RegistryError) as err:
        run(r.register("v2-value", view, "PROTOBUF", [], False))
    assert err.value.code == INVALID_SCHEMA


def test_proto2_corners_and_hostile_input():
    text = 'syntax = "proto2";\nmessage M { optional bytes b = 1 [default = "a\\001b\\"q"]; }\n'
    stored = protobuf_text.render(protobuf_schema.parse(text, {})[0])
    assert '  optional bytes b = 1 [default = "a\\001b\\"q"];\n' in stored
    assert protobuf_text.render(protobuf_schema.parse(stored, {})[0]) == stored
    enum = P3 + "enum E { A = 0; reserved 600000000 to 700000000; reserved 800000000 to max; }\n"
    written = protobuf_text.render(protobuf_schema.parse(enum, {})[0])
    assert "reserved 600000000 to 700000000;" in written and "reserved 800000000 to max;" in written
    with pytest.raises(InvalidSchema, match="group"):  # text too: a group would change the wire format
        protobuf_schema.parse('syntax = "proto2";\nmessage M { optional group G = 1 { optional int32 x = 2; } }\n',
                              {})
    r = memory_registry()
    run(r.register("c", P3 + "message C { int32 x = 1; }\n", "PROTOBUF", [], False))
    for text, refs in ((P3 + 'import "a\x00b";\n', [{"name": "a\x00b", "subject": "c", "version": 1}]),
                       (P3 + "message \ud800 {}\n", [])):
        with pytest.raises(RegistryError) as err:
            run(r.register("bad", text, "PROTOBUF", refs, False))
        assert err.value.code == INVALID_SCHEMA
