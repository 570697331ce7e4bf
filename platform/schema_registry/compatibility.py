"""Avro schema parsing and compatibility: fastavro parses and validates, Apache Avro's
ReaderWriterCompatibilityChecker decides compatibility. No I/O."""

from __future__ import annotations

import json

import avro.schema
import fastavro
from avro.compatibility import ReaderWriterCompatibilityChecker, SchemaCompatibilityType
from avro.name import Names


class InvalidSchema(ValueError):
    pass


def canonical(text: str) -> str:
    """``text`` as compact JSON (the stored form is :func:`schema_registry.avro_json.write`'s); InvalidSchema if it
    is not JSON."""
    try:
        obj = json.loads(text)
    except (TypeError, ValueError) as exc:
        raise InvalidSchema(f"Invalid schema: not JSON ({exc})") from None
    return json.dumps(obj, separators=(",", ":"))


def _as_java_reads(node):
    """What Apache Avro's Java parser reads the same way as the Python libraries' spelling: a field's ``order`` in
    any case (``Field.Order.valueOf(order.toUpperCase())``), so ``"DESCENDING"`` is ``"descending"``."""
    if isinstance(node, list):
        return [_as_java_reads(n) for n in node]
    if not isinstance(node, dict):
        return node
    out = {k: _as_java_reads(v) for k, v in node.items()}
    if isinstance(out.get("fields"), list):
        out["fields"] = [dict(f, order=f["order"].lower()) if isinstance(f, dict) and isinstance(f.get("order"), str)
                         else f for f in out["fields"]]
    return out


def parse(text: str, references: list[str] = ()):
    """An avro.schema.Schema; referenced schemas (their texts, dependencies first) provide named types."""
    names = Names()
    try:
        for ref in references:
            avro.schema.make_avsc_object(_as_java_reads(json.loads(ref)), names)
        named: dict = {}
        for ref in references:
            fastavro.parse_schema(_as_java_reads(json.loads(ref)), named_schemas=named)
        fastavro.parse_schema(_as_java_reads(json.loads(text)), named_schemas=named)
        return avro.schema.make_avsc_object(_as_java_reads(json.loads(text)), names)
    except Exception as exc:  # both libraries raise many kinds of errors on bad schemas
        raise InvalidSchema(f"Invalid schema: {exc}") from None


def incompatibilities(new, existing: list, level: str) -> list[str]:
    """Messages explaining why ``new`` is not compatible with ``existing`` (newest last) under ``level``."""
    level = level.upper()
    if level == "NONE" or not existing:
        return []
    against = existing if level.endswith("_TRANSITIVE") else existing[-1:]
    checker = ReaderWriterCompatibilityChecker()
    messages = []
    for old in against:
        checks = []
        if level.startswith(("BACKWARD", "FULL")):
            checks.append(("reader", new, old))  # new schema reads data written with the old one
        if level.startswith(("FORWARD", "FULL")):
            checks.append(("writer", old, new))  # old schema reads data written with the new one
        for _role, reader, writer in checks:
            result = checker.get_compatibility(reader, writer)
            if result.compatibility != SchemaCompatibilityType.compatible:
                detail = "; ".join(sorted(str(m) for m in result.messages)) or "incompatible"
                messages.append(f"{'BACKWARD' if reader is new else 'FORWARD'} incompatibility: {detail} "
                                f"(at {', '.join(sorted(result.locations))})")
    return messages
