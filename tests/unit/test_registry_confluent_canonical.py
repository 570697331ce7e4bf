"""Schema identity compares the parsed schema's canonical form, not the text (issue 19, finding 2)."""

from __future__ import annotations

import json

import pytest
from schema_registry.canonical import identity
from schema_registry.compatibility import canonical

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
    ("normalize=true text", json.dumps(RECORD), canonical(json.dumps(RECORD, indent=2), normalize=True)),
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
