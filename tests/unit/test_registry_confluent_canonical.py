"""Schema identity compares the parsed schema's canonical form, not the text (issue 19, finding 2)."""

from __future__ import annotations

import json

import pytest
from schema_registry.avro_json import write
from schema_registry.canonical import identity
from schema_registry.compatibility import InvalidSchema, parse

pytestmark = [pytest.mark.unit, pytest.mark.timeout(30)]

RECORD = {"type": "record", "name": "PageView", "namespace": "web",
          "fields": [{"name": "url", "type": "string"}, {"name": "ms", "type": "long", "default": 0}]}

SAME = [
    ("reordered keys", json.dumps(RECORD),
     json.dumps({"fields": [{"type": "string", "name": "url"}, {"default": 0, "type": "long", "name": "ms"}],
                 "namespace": "web", "name": "PageView", "type": "record"})),
    ("whitespace", json.dumps(RECORD), json.dumps(RECORD, indent=4)),
    ("namespace in the name", json.dumps(RECORD), json.dumps({**{k: v for k, v in RECORD.items()
                                                                 if k != "namespace"}, "name": "web.PageView"})),
    ("primitive shorthand", '"int"', '{"type": "int"}'),
    ("primitive shorthand in a field",
     '{"type":"record","name":"A","fields":[{"name":"x","type":"int"}]}',
     '{"type":"record","name":"A","fields":[{"name":"x","type":{"type":"int"}}]}'),
    ("normalize=true text", json.dumps(RECORD), write(RECORD, normalize=True)),
    ("stored text", json.dumps(RECORD), write(json.loads(json.dumps(RECORD, indent=2)))),
]

DIFFERENT = [
    ("field order", json.dumps(RECORD),
     json.dumps({**RECORD, "fields": list(reversed(RECORD["fields"]))})),
    ("another namespace", json.dumps(RECORD), json.dumps({**RECORD, "namespace": "app"})),
    ("another default", json.dumps(RECORD),
     json.dumps({**RECORD, "fields": [RECORD["fields"][0], {**RECORD["fields"][1], "default": 1}]})),
    ("int vs long", '"int"', '"long"'),
]


@pytest.mark.parametrize("case,a,b", SAME, ids=[c[0] for c in SAME])
def test_equivalent_texts_have_one_identity(case, a, b):
    assert identity(a) == identity(b)


@pytest.mark.parametrize("case,a,b", DIFFERENT, ids=[c[0] for c in DIFFERENT])
def test_different_schemas_have_different_identities(case, a, b):
    assert identity(a) != identity(b)


def test_a_text_that_does_not_parse_is_its_own_identity():
    assert identity('{"type": "nonsense"}') == identity('{ "type":"nonsense" }')
    assert identity("not json") == "not json"


# ---- the stored text: Avro's Schema.toString() (Confluent's canonicalString), and normalize ----------------------
STORED = [
    ("primitive shorthand and whitespace", '{ "type" : "int" }', '"int"'),
    ("Avro's key order, namespace beside the name",
     '{"fields":[{"type":"string","name":"url","doc":"d"}],"name":"web.PageView","doc":"x","type":"record"}',
     '{"type":"record","name":"PageView","namespace":"web","doc":"x","fields":[{"name":"url","type":"string",'
     '"doc":"d"}]}'),
    ("nested types: the namespace only where it changes, references by short name in their namespace",
     '{"type":"record","name":"A","namespace":"n","fields":[{"name":"e","type":{"type":"enum","name":"E",'
     '"symbols":["X","Y"],"default":"X","aliases":["n.Old"]}},{"name":"e2","type":"n.E"},'
     '{"name":"f","type":{"type":"fixed","name":"o.F","size":4}},{"name":"f2","type":"o.F"}]}',
     '{"type":"record","name":"A","namespace":"n","fields":[{"name":"e","type":{"type":"enum","name":"E",'
     '"symbols":["X","Y"],"default":"X","aliases":["Old"]}},{"name":"e2","type":"E"},{"name":"f","type":{'
     '"type":"fixed","name":"F","namespace":"o","size":4}},{"name":"f2","type":"o.F"}]}'),
    ("field attributes in Avro's order, properties last, in their order, ascending left out",
     '{"type":"record","name":"R","fields":[{"zz":1,"order":"descending","aliases":["b","a","b"],"default":5,'
     '"type":{"logicalType":"timestamp-millis","type":"long"},"name":"t","aa":2},{"name":"u","type":"int",'
     '"order":"ascending"}]}',
     '{"type":"record","name":"R","fields":[{"name":"t","type":{"type":"long","logicalType":"timestamp-millis"},'
     '"default":5,"order":"descending","aliases":["b","a"],"zz":1,"aa":2},{"name":"u","type":"int"}]}'),
    ("arrays, maps and unions; non-ASCII text as it is",
     '{"type":"record","name":"R","doc":"caf\u00e9","fields":[{"name":"a","type":{"items":["null","string"],'
     '"type":"array"},"default":[]},{"name":"m","type":{"values":"long","type":"map","x":1}}]}',
     '{"type":"record","name":"R","doc":"café","fields":[{"name":"a","type":{"type":"array","items":["null",'
     '"string"]},"default":[]},{"name":"m","type":{"type":"map","values":"long","x":1}}]}'),
]


@pytest.mark.parametrize("case,given,stored", STORED, ids=[c[0] for c in STORED])
def test_the_stored_text_is_avros_writer_form(case, given, stored):
    assert write(json.loads(given)) == stored
    assert identity(given) == identity(stored)


def test_normalize_sorts_properties_aliases_and_default_objects_and_types_defaults():
    given = ('{"namespace":"com.acme","type":"record","name":"Order","doc":"","fields":[{"name":"amt","type":'
             '"double","default":0},{"name":"m","type":{"type":"map","values":"string"},"default":{"b":"2","a":"1"}},'
             '{"name":"d","type":{"connect.name":"dec","type":"bytes","scale":2,"precision":6,'
             '"logicalType":"decimal"}}],"zeta":"z","alpha":{"y":1,"x":2},"aliases":["Old2","Old1"]}')
    assert write(json.loads(given), normalize=True) == (
        '{"type":"record","name":"Order","namespace":"com.acme","fields":[{"name":"amt","type":"double",'
        '"default":0.0},{"name":"m","type":{"type":"map","values":"string"},"default":{"a":"1","b":"2"}},'
        '{"name":"d","type":{"type":"bytes","logicalType":"decimal","precision":6,"scale":2,'
        '"connect.name":"dec"}}],"alpha":{"x":2,"y":1},"zeta":"z","aliases":["Old1","Old2"]}')
    # without normalize only Avro's writer applies: the empty doc, the int default and every order stay
    assert write(json.loads(given)).startswith('{"type":"record","name":"Order","namespace":"com.acme","doc":"",'
                                               '"fields":[{"name":"amt","type":"double","default":0},')


def test_named_types_of_referenced_schemas_are_written_by_name():
    ref = {"type": "record", "name": "Address", "namespace": "geo", "fields": [{"name": "city", "type": "string"}]}
    user = {"type": "record", "name": "User", "namespace": "geo",
            "fields": [{"name": "home", "type": "geo.Address"}, {"name": "work", "type": ["null", "Address"]}]}
    assert write(user, [ref]) == ('{"type":"record","name":"User","namespace":"geo","fields":[{"name":"home",'
                                  '"type":"Address"},{"name":"work","type":["null","Address"]}]}')


def test_numbers_are_written_as_jackson_writes_them():
    """Floating-point numbers as Java's Double.toString (Avro's writer goes through Jackson), integers as they
    are, in defaults and in properties alike."""
    given = ('{"type":"record","name":"R","big":1e7,"small":0.0001,"mid":2.50,"n":10000000,"fields":['
             '{"name":"a","type":"double","default":10000000.0},{"name":"b","type":"double","default":-1.5E-7},'
             '{"name":"c","type":"long","default":12345678901}]}')
    assert write(json.loads(given)) == (
        '{"type":"record","name":"R","fields":[{"name":"a","type":"double","default":1.0E7},'
        '{"name":"b","type":"double","default":-1.5E-7},{"name":"c","type":"long","default":12345678901}],'
        '"big":1.0E7,"small":1.0E-4,"mid":2.5,"n":10000000}')


def test_a_doc_that_is_not_a_string_is_dropped():
    given = '{"type":"record","name":"R","doc":5,"fields":[{"name":"a","type":"int","doc":{"x":1}}]}'
    assert write(json.loads(given)) == '{"type":"record","name":"R","fields":[{"name":"a","type":"int"}]}'


def test_a_field_order_in_upper_case_is_read_as_avros_java_parser_reads_it():
    given = '{"type":"record","name":"R","fields":[{"name":"a","type":"int","order":"DESCENDING"}]}'
    parse(given)  # Avro's Java parser: Field.Order.valueOf(order.toUpperCase())
    assert write(json.loads(given)) == ('{"type":"record","name":"R","fields":[{"name":"a","type":"int",'
                                        '"order":"descending"}]}')
    with pytest.raises(InvalidSchema):
        parse(given.replace("DESCENDING", "sideways"))


def test_normalize_reads_defaults_against_their_schema_at_every_level():
    """Avro's JacksonUtils.toObject: into arrays, maps, records (named types too) and the first union branch that
    reads the value; a float schema's number becomes a 32-bit float, a double schema's integer a double."""
    given = ('{"type":"record","name":"R","namespace":"n","fields":['
             '{"name":"inner","type":{"type":"record","name":"In","fields":[{"name":"f","type":"float"},'
             '{"name":"i","type":"int"}]},"default":{"i":1,"f":2}},'
             '{"name":"again","type":"In","default":{"f":16777217,"i":3}},'
             '{"name":"fs","type":{"type":"array","items":"float"},"default":[1,0.30000001192092896]},'
             '{"name":"ds","type":{"type":"map","values":"double"},"default":{"b":1,"a":10000000}},'
             '{"name":"u","type":["double","null"],"default":7},'
             '{"name":"nu","type":["null","double"],"default":null},'
             '{"name":"branch","type":["null","string","float"],"default":2},'
             '{"name":"text","type":"float","default":"1.5"}]}')
    assert write(json.loads(given), normalize=True) == (
        '{"type":"record","name":"R","namespace":"n","fields":['
        '{"name":"inner","type":{"type":"record","name":"In","fields":[{"name":"f","type":"float"},'
        '{"name":"i","type":"int"}]},"default":{"f":2.0,"i":1}},'
        '{"name":"again","type":"In","default":{"f":1.6777216E7,"i":3}},'
        '{"name":"fs","type":{"type":"array","items":"float"},"default":[1.0,0.3]},'
        '{"name":"ds","type":{"type":"map","values":"double"},"default":{"a":1.0E7,"b":1.0}},'
        '{"name":"u","type":["double","null"],"default":7.0},'
        '{"name":"nu","type":["null","double"],"default":null},'
        '{"name":"branch","type":["null","string","float"],"default":2.0},'  # the first branch that reads 2
        '{"name":"text","type":"float"}]}')  # a text Avro does not read as a float: no default
    assert identity(given) != identity(write(json.loads(given), normalize=True))  # normalize makes another text
