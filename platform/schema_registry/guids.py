"""Confluent 8's schema GUIDs: a schema's second identity, the same in every registry that holds the same schema.

A GUID is the MD5 of the stored (canonical) text followed by each reference's name, subject and version (a 4-byte
big-endian int), then the metadata and rule set (``contracts.update_hash``), read as a UUID, as Confluent's
``Schema.getGuid``/``MD5.ofSchema`` compute it. Serializers that
put the schema id in a record header (confluent-kafka's ``header_schema_id_serializer``) write this GUID, and
deserializers fetch the schema with ``GET /schemas/guids/{guid}``. The schema type is not part of it (nor in
Confluent's)."""

from __future__ import annotations

import hashlib
import uuid

from schema_registry import contracts


def schema_guid(text: str, references: list[dict], metadata: dict | None = None,
                rule_set: dict | None = None) -> str:
    md5 = hashlib.md5(text.encode("utf-8"), usedforsecurity=False)
    for ref in references or []:
        for part in (ref.get("name"), ref.get("subject")):
            if part is not None:
                md5.update(str(part).encode("utf-8"))
        version = ref.get("version")
        if version is not None:
            try:  # a 4-byte int, as Java's putInt writes it; never raises (a record's GUID must always exist)
                md5.update((int(version) & 0xFFFFFFFF).to_bytes(4, "big"))
            except (TypeError, ValueError):
                md5.update(str(version).encode("utf-8"))  # "latest": logbus resolves it; Confluent has no such
    contracts.update_hash(md5, metadata, rule_set)
    return str(uuid.UUID(bytes=md5.digest()))


def parse_guid(text: str) -> str | None:
    """A GUID as Confluent reads one (a UUID, or 32 hex digits), in its canonical form; None when it is neither."""
    try:
        return str(uuid.UUID(text))  # also takes 32 bare hex digits, braces and the urn: form
    except (ValueError, TypeError, AttributeError):
        return None
