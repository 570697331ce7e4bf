"""Schema identity: two texts are the same schema when Avro writes them the same way, as Confluent compares a
schema's canonical string rather than the text a client sent. Key order, whitespace, ``{"type": "int"}`` vs
``"int"``, a namespace written in the name or beside it, an alias written in full or relative to its namespace, the
order of aliases and the case of a field's ``order`` do not make a new schema; field order does. No I/O."""

from __future__ import annotations

import json

from schema_registry.avro_json import write
from schema_registry.compatibility import InvalidSchema, parse


def identity(text: str, references: list[str] = ()) -> str:
    """The canonical string of ``text`` (referenced schemas' texts, dependencies first, give named types): the
    schema as Avro writes it (:func:`avro_json.write`), with sorted object keys. A text that does not parse is its
    own identity (compact JSON, or the text itself), so stored data that no longer parses still compares."""
    try:
        parse(text, references)
        written = write(json.loads(text), [json.loads(r) for r in references])
        return json.dumps(_aliases_sorted(json.loads(written)), sort_keys=True, separators=(",", ":"),
                          ensure_ascii=False)
    except InvalidSchema:
        try:
            return json.dumps(json.loads(text), sort_keys=True, separators=(",", ":"))
        except ValueError:
            return text


def _aliases_sorted(node):
    """Aliases are sets to Avro (Schema.equals, Confluent's lookup): their order makes no other schema."""
    if isinstance(node, list):
        return [_aliases_sorted(n) for n in node]
    if isinstance(node, dict):
        return {k: sorted(v) if k == "aliases" and isinstance(v, list) else _aliases_sorted(v) for k, v in node.items()}
    return node
