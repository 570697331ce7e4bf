"""JSON Schema in the registry (schemaType JSON): the stored text, validation, $ref resolution and Confluent's
compatibility rules (its SchemaDiff), one family of rules per case; then the registry's domain over an in-memory
store: register, look up, levels and messages, mixed schema types."""

from __future__ import annotations

import json
import sys

import pytest
from registry_memory import memory_registry, run

from schema_registry import json_diff, json_schema
from schema_registry.compatibility import InvalidSchema
from schema_registry.core import INCOMPATIBLE, INVALID_SCHEMA, RegistryError

pytestmark = [pytest.mark.unit, pytest.mark.timeout(60)]


def diff(original: dict | bool, update: dict | bool) -> list[str]:
    found = json_diff.differences(json_schema.parse(json.dumps(original)), json_schema.parse(json.dumps(update)))
    return sorted(f"{kind} {path}" for kind, path in found)


def obj(properties: dict, **more) -> dict:
    return {"type": "object", "properties": properties, **more}


S, N, I = {"type": "string"}, {"type": "number"}, {"type": "integer"}

CASES = [  # (what, original, update, differences, compatible as BACKWARD reads it)
    ("same schema", obj({"a": S}), obj({"a": S}), [], True),
    ("optional property added to an open object", obj({"a": S}), obj({"a": S, "b": N}),
     ["OPTIONAL_PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL #/properties/b"], False),
    ("property removed from an open object", obj({"a": S, "b": N}), obj({"a": S}),
     ["PROPERTY_REMOVED_FROM_OPEN_CONTENT_MODEL #/properties/b"], True),
    ("optional property added to a closed object", obj({"a": S}, additionalProperties=False),
     obj({"a": S, "b": N}, additionalProperties=False),
     ["OPTIONAL_PROPERTY_ADDED_TO_UNOPEN_CONTENT_MODEL #/properties/b"], True),
    ("required property added to a closed object", obj({"a": S}, additionalProperties=False),
     obj({"a": S, "b": N}, additionalProperties=False, required=["b"]),
     ["REQUIRED_PROPERTY_ADDED_TO_UNOPEN_CONTENT_MODEL #/properties/b"], False),
    ("required property with a default added to a closed object", obj({"a": S}, additionalProperties=False),
     obj({"a": S, "b": {"type": "number", "default": 1}}, additionalProperties=False, required=["b"]),
     ["REQUIRED_PROPERTY_WITH_DEFAULT_ADDED_TO_UNOPEN_CONTENT_MODEL #/properties/b"], True),
    ("property removed from a closed object", obj({"a": S, "b": N}, additionalProperties=False),
     obj({"a": S}, additionalProperties=False), ["PROPERTY_REMOVED_FROM_CLOSED_CONTENT_MODEL #/properties/b"], False),
    ("property removed, covered by additionalProperties", obj({"a": S, "b": S}, additionalProperties=False),
     obj({"a": S}, additionalProperties=S),
     ["ADDITIONAL_PROPERTIES_ADDED #/additionalProperties",
      "PROPERTY_REMOVED_IS_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL #/properties/b"], True),
    ("property removed, not covered by a pattern", obj({"a": S, "x1": S}, additionalProperties=False),
     obj({"a": S}, patternProperties={"^x": N}, additionalProperties=False),
     ["PROPERTY_REMOVED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL #/properties/x1", "TYPE_CHANGED #/properties/x1"],
     False),
    ("an existing property made required", obj({"a": S}), obj({"a": S}, required=["a"]),
     ["REQUIRED_ATTRIBUTE_ADDED #/required/a"], False),
    ("a requirement dropped", obj({"a": S}, required=["a"]), obj({"a": S}),
     ["REQUIRED_ATTRIBUTE_REMOVED #/required/a"], True),
    ("type changed", S, N, ["TYPE_CHANGED #/"], False),
    ("integer widened to number", I, N, ["TYPE_EXTENDED #/"], True),
    ("number narrowed to integer", N, I, ["TYPE_NARROWED #/"], False),
    ("anything from a type", S, {}, [], True),
    ("a type from anything", {}, S, ["TYPE_CHANGED #/"], False),
    ("a type list grows", {"type": ["string"]}, {"type": ["string", "null"]}, ["SUM_TYPE_EXTENDED #/"], True),
    ("a type list shrinks", {"type": ["string", "null"]}, {"type": ["string"]}, ["SUM_TYPE_NARROWED #/"], False),
    ("a string joins a oneOf", S, {"oneOf": [S, N]}, ["SUM_TYPE_EXTENDED #/"], True),
    ("maxLength lowered", {"type": "string", "maxLength": 10}, {"type": "string", "maxLength": 5},
     ["MAX_LENGTH_DECREASED #/maxLength"], False),
    ("maxLength raised", {"type": "string", "maxLength": 5}, {"type": "string", "maxLength": 10},
     ["MAX_LENGTH_INCREASED #/maxLength"], True),
    ("pattern added", S, {"type": "string", "pattern": "^a"}, ["PATTERN_ADDED #/pattern"], False),
    ("minimum added", N, {"type": "number", "minimum": 0}, ["MINIMUM_ADDED #/minimum"], False),
    ("maximum removed", {"type": "number", "maximum": 9}, N, ["MAXIMUM_REMOVED #/maximum"], True),
    ("multipleOf reduced (2.5 to 0.5)", {"type": "number", "multipleOf": 2.5}, {"type": "number", "multipleOf": 0.5},
     ["MULTIPLE_OF_REDUCED #/multipleOf"], True),
    ("multipleOf of another scale is the same", {"type": "number", "multipleOf": 0.5},
     {"type": "number", "multipleOf": 0.50}, [], True),
    ("enum extended", {"enum": ["A", "B"]}, {"enum": ["A", "B", "C"]}, ["ENUM_ARRAY_EXTENDED #/enum"], True),
    ("enum narrowed", {"enum": ["A", "B"]}, {"enum": ["A"]}, ["ENUM_ARRAY_NARROWED #/enum"], False),
    ("items type changed", {"type": "array", "items": S}, {"type": "array", "items": N},
     ["TYPE_CHANGED #/items"], False),
    ("uniqueItems added", {"type": "array"}, {"type": "array", "uniqueItems": True},
     ["UNIQUE_ITEMS_ADDED #/uniqueItems"], False),
    ("a tuple item added to a closed tuple", {"type": "array", "items": [S], "additionalItems": False},
     {"type": "array", "items": [S, N], "additionalItems": False}, ["ITEM_ADDED_TO_CLOSED_CONTENT_MODEL #/items/1"],
     True),
    ("description and title changes are compatible", {"type": "string", "title": "a", "description": "x"},
     {"type": "string", "title": "b", "description": "y"}, ["DESCRIPTION_CHANGED #/", "TITLE_CHANGED #/"], True),
    ("a nested property's type changed", obj({"a": obj({"b": S})}), obj({"a": obj({"b": N})}),
     ["TYPE_CHANGED #/properties/a/properties/b"], False),
    # Confluent compares the two "not" schemas the other way round (update's against original's)
    ("not: fewer types excluded", {"not": {"type": ["string", "null"]}}, {"not": S}, ["NOT_TYPE_NARROWED #/not"], True),
    ("not: more types excluded", {"not": S}, {"not": {"type": ["string", "null"]}}, ["NOT_TYPE_EXTENDED #/not"],
     False),
    ("allOf member dropped", {"allOf": [obj({"a": S}), obj({"b": S})]}, {"allOf": [obj({"a": S})]},
     ["PRODUCT_TYPE_NARROWED #/"], True),
    ("2020-12: a prefix item removed, the rest open", {"$schema": "https://json-schema.org/draft/2020-12/schema",
                                                      "type": "array", "prefixItems": [S, N]},
     {"$schema": "https://json-schema.org/draft/2020-12/schema", "type": "array", "prefixItems": [S]},
     ["ITEM_REMOVED_FROM_OPEN_CONTENT_MODEL #/items/1"], True),
]


@pytest.mark.parametrize("what, original, update, expected, compatible", CASES, ids=[c[0] for c in CASES])
def test_confluents_differences_and_verdicts(what, original, update, expected, compatible):
    assert diff(original, update) == sorted(expected)
    found = json_diff.differences(json_schema.parse(json.dumps(original)), json_schema.parse(json.dumps(update)))
    assert all(kind in json_diff.COMPATIBLE for kind, _ in found) is compatible


def test_local_and_recursive_refs_are_followed():
    tree = {"type": "object", "properties": {"name": S, "children": {"type": "array", "items": {"$ref": "#"}}}}
    grown = json.loads(json.dumps(tree))
    grown["properties"]["name"] = {"type": "string", "maxLength": 3}
    assert diff(tree, tree) == []
    # the change is found again where the recursion re-enters the changed pair (Confluent's fixpoint feeds the
    # incompatible pairs of one pass into the next)
    assert diff(tree, grown) == ["MAX_LENGTH_ADDED #/properties/children/items/properties/name/maxLength",
                                 "MAX_LENGTH_ADDED #/properties/name/maxLength"]
    defs = {"definitions": {"Id": S}, "type": "object", "properties": {"id": {"$ref": "#/definitions/Id"}}}
    changed = json.loads(json.dumps(defs))
    changed["definitions"]["Id"] = N
    assert diff(defs, changed) == ["TYPE_CHANGED #/properties/id"]
    as_defs = {"$defs": {"Id": S}, "type": "object", "properties": {"id": {"$ref": "#/definitions/Id"}}}
    assert diff(defs, as_defs) == []  # Confluent's mergeDefBuckets: one bucket finds the other's entries


def test_references_to_other_subjects_resolve_by_name():
    address = json.dumps(obj({"street": S}))
    person = json.dumps(obj({"home": {"$ref": "address.json"}}))
    node = json_schema.parse(person, {"address.json": address})
    assert node.properties["home"].properties["street"].kind == "string"
    with pytest.raises(InvalidSchema, match="neither in the schema nor a reference"):
        json_schema.parse(person)


@pytest.mark.parametrize("text, message", [
    ('{"type": "strin"}', "Invalid schema"),
    ('{"type": "string", "minLength": "x"}', "Invalid schema"),
    ('[1, 2]', "expected an object or boolean"),
    ('{"type": ', "not JSON"),
    ('{"$ref": "#/definitions/missing"}', "not found"),
])
def test_bad_schemas_are_refused(text, message):
    with pytest.raises(InvalidSchema, match=message):
        json_schema.parse(text)


def test_the_stored_text_is_jacksons_compact_form():
    text = '{ "type" : "object",\n "properties": {"é": {"type": "number", "multipleOf": 0.50, "maximum": 1E2}}}'
    assert json_schema.stored_text(text, normalize=False) == \
        '{"type":"object","properties":{"é":{"type":"number","multipleOf":0.50,"maximum":1E+2}}}'
    assert json_schema.stored_text('{"type":"string","$id":"x","description":"d"}', normalize=True) == \
        '{"$id":"x","description":"d","type":"string"}'


# ---- the registry's domain over an in-memory store ----------------------------------------------------------
def test_register_look_up_and_compatibility_in_the_registry():
    r = memory_registry()
    v1 = json.dumps(obj({"a": S}, additionalProperties=False))
    sid = run(r.register("t-value", v1, "JSON", [], False))[1].schema_id
    stored = r.schema(sid)
    assert stored.schema_type == "JSON" and stored.text == '{"type":"object","properties":{"a":{"type":"string"}},' \
        '"additionalProperties":false}'
    # the same document with other whitespace is the same schema; other key order is not (unless normalized)
    assert run(r.register("t-value", json.dumps(json.loads(v1), indent=2), "JSON", [], False))[1].schema_id == sid
    v, _ = run(r.lookup("t-value", json.dumps(json.loads(v1), indent=1), "JSON", [], False))
    assert v.version == 1
    # the same text as AVRO is another schema type: not found
    with pytest.raises(RegistryError) as err:
        run(r.lookup("t-value", '{"type":"string"}', "AVRO", [], False))
    assert err.value.code == 40403
    # a closed object can take an optional property; a required one without a default is refused with
    # Confluent's messages, the old version and text at the end
    v2 = json.dumps(obj({"a": S, "b": N}, additionalProperties=False))
    assert run(r.register("t-value", v2, "JSON", [], False))[1].schema_id == sid + 1
    v3 = json.dumps(obj({"a": S, "b": N, "c": S}, additionalProperties=False, required=["c"]))
    with pytest.raises(RegistryError) as err:
        run(r.register("t-value", v3, "JSON", [], False))
    assert err.value.code == INCOMPATIBLE
    details = json.loads(err.value.message.split("details: ", 1)[1])
    assert details[0] == ('{errorType:"REQUIRED_PROPERTY_ADDED_TO_UNOPEN_CONTENT_MODEL", description:"The new schema '
                          "has an unopen content model and has a required property at path '#/properties/c' which is "
                          "missing in the old schema'}")
    assert details[1:] == ["{oldSchemaVersion: 2}", "{oldSchema: '" + r.schema(sid + 1).text + "'}"]
    assert run(r.check("t-value", v3, "JSON", [], None))
    assert run(r.check("t-value", v3, "JSON", [], "1"))
    # FORWARD: the old schema must read the new one's data; the roles in the message swap
    run(r.set_config("t-value", {"compatibilityLevel": "FORWARD"}))
    assert run(r.check("t-value", json.dumps(obj({"a": S}, additionalProperties=False)), "JSON", [], None)) == []
    wider = json.dumps(obj({"a": S, "b": N, "d": S}, additionalProperties=False))
    messages = run(r.check("t-value", wider, "JSON", [], None))
    assert messages[0].startswith('{errorType:"PROPERTY_REMOVED_FROM_CLOSED_CONTENT_MODEL", description:"The old has '
                                  "a closed content model")
    # an Avro schema after JSON ones: Confluent's "different schema type"
    assert run(r.check("t-value", '"string"', "AVRO", [], None)) == ["Incompatible because of different schema type"]


def test_invalid_json_schemas_and_unknown_types_are_42201():
    r = memory_registry()
    for text, kind in (('{"type": "nope"}', "JSON"), ("{}", "PROTOBUF"), ("{}", "XML")):
        with pytest.raises(RegistryError) as err:
            run(r.register("bad", text, kind, [], False))
        assert err.value.code == INVALID_SCHEMA
    assert r.subject_names() == []


def test_references_between_json_subjects():
    r = memory_registry()
    run(r.register("address", json.dumps(obj({"street": S})), "JSON", [], False))
    ref = [{"name": "address.json", "subject": "address", "version": 1}]
    person = json.dumps(obj({"home": {"$ref": "address.json"}}))
    sid = run(r.register("person", person, "JSON", ref, False))[1].schema_id
    assert r.schema(sid).references == ref
    assert r.referenced_by("address", 1) == [sid]
    with pytest.raises(RegistryError) as err:
        run(r.register("person2", person, "JSON", [], False))
    assert err.value.code == INVALID_SCHEMA


def test_hostile_documents_are_refused_or_compared_without_a_crash():
    # a multipleOf ratio past Decimal's default precision: compared exactly, not a 500
    assert diff({"type": "number", "multipleOf": 0.0001}, {"type": "number", "multipleOf": 1e30}) == \
        ["MULTIPLE_OF_EXPANDED #/multipleOf"]
    # dependentRequired is not checked by the draft-07 meta-schema: items that are no names are ignored
    json_schema.parse('{"dependentRequired": {"a": [{}, "b"]}}')
    r = memory_registry()
    deep = '{"type": "object", "properties": {"a": ' * 400 + "{}" + "}}" * 400
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(1000)  # the registry process's (a library imported by another test may have raised it)
    try:
        with pytest.raises(RegistryError) as err:
            run(r.register("deep", deep, "JSON", [], False))
    finally:
        sys.setrecursionlimit(limit)
    assert err.value.code == INVALID_SCHEMA
