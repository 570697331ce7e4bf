"""The registry's non-Avro schema types, one handler each with the same five operations, so that the registry's
domain (core.py) treats them alike: JSON Schema (:mod:`json_schema`, :mod:`json_diff`) and Protobuf
(:mod:`protobuf_schema`, :mod:`protobuf_text`, :mod:`protobuf_diff`). Avro keeps its own path in core.py. No network I/O (Protobuf text
is compiled by a protoc child process).

Each handler gets a schema's references as ``named`` (import or ``$ref`` name -> the referenced schema's stored
text, references of references included) and ``versions`` (name -> (subject, version)).
"""

from __future__ import annotations

from schema_registry import json_diff, json_schema, protobuf_diff, protobuf_schema, protobuf_text
from schema_registry.compatibility import InvalidSchema


def refusing(parse):
    """A parse whose unexpected failures on hostile input (nesting past Python's recursion limit, bytes no file
    may hold) are InvalidSchema (42201), not a 500."""
    def guarded(*args, **kwargs):
        try:
            return parse(*args, **kwargs)
        except InvalidSchema:
            raise
        except (RecursionError, ValueError, TypeError, UnicodeError) as exc:
            raise InvalidSchema(f"Invalid schema: {type(exc).__name__}: {exc}"[:500]) from None
    return guarded


class JsonKind:
    name = "JSON"

    @refusing
    def prepare(self, text: str, named: dict, versions: dict, normalize: bool):
        """(stored text, parsed) of a schema sent; InvalidSchema if it is none."""
        return json_schema.stored_text(text, normalize), json_schema.parse(text, named)

    @refusing
    def parse_stored(self, text: str, named: dict, versions: dict):
        return json_schema.parse(text, named)

    def identity(self, text: str) -> str:
        """Confluent's canonical string: the document written compactly, key order kept."""
        try:
            return json_schema.dumps(json_schema.loads(text))
        except InvalidSchema:
            return text

    def incompatible(self, original, update) -> list[str]:
        return json_diff.incompatible(original, update)

    def serialized(self, parsed) -> str | None:
        return None


class ProtobufKind:
    name = "PROTOBUF"

    def _side(self, text: str, named: dict, versions: dict) -> protobuf_diff.Side:
        fd, dependencies = protobuf_schema.parse(text, named)
        return protobuf_diff.Side(fd, dependencies, versions)

    @refusing
    def prepare(self, text: str, named: dict, versions: dict, normalize: bool):
        """The descriptor written as Confluent writes one; the written text is compiled once more, so what is
        stored is text protoc takes back (a base64 descriptor that is no valid schema is refused here)."""
        side = self._side(text, named, versions)
        stored = protobuf_text.render(side.fd, normalize, side.dependencies)
        again = self._side(stored, named, versions)
        if protobuf_text.render(again.fd, normalize, again.dependencies) != stored:
            raise InvalidSchema("Invalid schema: the descriptor does not survive being written as text")
        return stored, again

    @refusing
    def parse_stored(self, text: str, named: dict, versions: dict):
        return self._side(text, named, versions)

    def identity(self, text: str) -> str:
        return text  # the stored text is already the canonical one

    def incompatible(self, original, update) -> list[str]:
        return protobuf_diff.incompatible(original, update)

    def serialized(self, parsed) -> str | None:
        return protobuf_schema.serialized(parsed.fd)


KINDS = {kind.name: kind for kind in (JsonKind(), ProtobufKind())}
