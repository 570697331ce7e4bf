"""The audit event: one Avro schema for the producers' monitoring events (kind PRODUCED) and the tiers' counts
(kind TIER), published to the ``_audit`` topic in Confluent's wire format (magic byte, schema id, Avro) with the
schema registered under the subject ``_audit-value``. Other languages take part by producing the same records and
the headers below on their messages."""

from __future__ import annotations

import json

AUDIT_TOPIC = "_audit"
HOST_HEADER, PRODUCER_HEADER, SEQUENCE_HEADER, TIME_HEADER = ("logbus.audit.host", "logbus.audit.producer",
                                                              "logbus.audit.seq", "logbus.audit.time")

SCHEMA = {
    "type": "record", "name": "AuditEvent", "namespace": "logbus.audit",
    "doc": "Messages produced (kind PRODUCED, one per producer, topic and window) or received by a tier (TIER).",
    "fields": [
        {"name": "kind", "type": {"type": "enum", "name": "Kind", "symbols": ["PRODUCED", "TIER"]}},
        {"name": "tier", "type": "string", "doc": "'producer' for PRODUCED events, else the tier's name"},
        {"name": "producer_id", "type": "string"},
        {"name": "host", "type": "string"},
        {"name": "topic", "type": "string"},
        {"name": "window_start", "type": "long", "doc": "ms since the epoch, event time, inclusive"},
        {"name": "window_end", "type": "long", "doc": "ms since the epoch, exclusive"},
        {"name": "count", "type": "long", "doc": "messages produced / received (with duplicates)"},
        {"name": "first_seq", "type": "long"},
        {"name": "last_seq", "type": "long"},
        {"name": "bytes", "type": "long"},
        {"name": "sequences", "type": {"type": "array", "items": {"type": "array", "items": "long"}},
         "default": [], "doc": "TIER: distinct sequence ranges seen, [[first, last], ...]"},
        {"name": "source", "default": [], "doc": "TIER: source offsets these counts cover",
         "type": {"type": "array", "items": {"type": "record", "name": "OffsetRange", "fields": [
             {"name": "partition", "type": "int"}, {"name": "first", "type": "long"},
             {"name": "last", "type": "long"}]}}},
        {"name": "emitted_at", "type": "long"},
    ],
}
SCHEMA_STR = json.dumps(SCHEMA)


def window_of(timestamp_ms: int, window_ms: int) -> tuple[int, int]:
    start = timestamp_ms - timestamp_ms % window_ms
    return start, start + window_ms
