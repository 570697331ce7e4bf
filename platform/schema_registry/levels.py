"""Compatibility levels over a schema type's diff, as Confluent's SchemaValidatorBuilder runs them for its JSON
Schema and Protobuf providers: which previous versions a new schema is checked against, in which direction, and
the messages of the first one that fails. No I/O."""

from __future__ import annotations

from typing import Callable


def incompatibilities(new, previous: list[tuple[int, str, object]], level: str,
                      incompatible: Callable[[object, object], list[str]]) -> list[str]:
    """Messages for registering ``new`` under ``level`` after ``previous`` (version, stored text, parsed schema;
    oldest first). ``incompatible(original, update)`` gives the messages, each with two %s for the reader's and
    the writer's role, for a reader of ``update`` taking data written with ``original``. The newest previous
    schema is checked first and the first that fails gives the answer, ending with the old schema's version and
    text."""
    level = level.upper()
    if level == "NONE" or not previous:
        return []
    against = previous if level.endswith("_TRANSITIVE") else previous[-1:]
    for version, text, old in reversed(against):
        appendix = [f"{{oldSchemaVersion: {version}}}", f"{{oldSchema: '{text}'}}"]
        if level.startswith("BACKWARD"):
            reads = _roles(incompatible(old, new), "new", "old")
            out = reads + appendix if reads else []
        elif level.startswith("FORWARD"):
            read = _roles(incompatible(new, old), "old", "new")
            out = read + appendix if read else []
        else:  # FULL: the appendix only after the second half, as Confluent's mutualReadStrategy
            reads = _roles(incompatible(old, new), "new", "old")
            out = _roles(incompatible(new, old), "old", "new") + (reads + appendix if reads else [])
        if out:
            return out
    return []


def _roles(messages: list[str], reader: str, writer: str) -> list[str]:
    return [m.replace("%s", reader, 1).replace("%s", writer, 1) for m in messages]
