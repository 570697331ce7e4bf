"""Schema identity: two texts are the same schema when their parsed forms are equal, as Confluent compares a
schema's canonical string rather than the text a client sent. Key order, whitespace, ``{"type": "int"}`` vs
``"int"`` and a namespace written in the name or beside it do not make a new schema; field order does. No I/O."""

from __future__ import annotations

import json

from schema_registry.compatibility import InvalidSchema, parse


def identity(text: str, references: list[str] = ()) -> str:
    """The canonical string of ``text`` (referenced schemas' texts, dependencies first, give named types):
    the parsed schema written back as JSON with sorted object keys. A text that does not parse is its own
    identity (compact JSON, or the text itself), so stored data that no longer parses still compares."""
    try:
        return json.dumps(parse(text, references).to_json(), sort_keys=True, separators=(",", ":"))
    except InvalidSchema:
        try:
            return json.dumps(json.loads(text), sort_keys=True, separators=(",", ":"))
        except ValueError:
            return text
