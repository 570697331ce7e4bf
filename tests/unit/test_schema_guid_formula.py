"""Confluent 8's schema GUIDs (schema_registry.guids): its formula, and the GUIDs Confluent's client reads."""

import hashlib
import uuid

import pytest

from schema_registry.guids import parse_guid, schema_guid

pytestmark = [pytest.mark.unit, pytest.mark.timeout(10)]


def test_the_guid_is_the_md5_of_the_text_then_each_references_name_subject_and_version():
    assert schema_guid('"int"', []) == str(uuid.UUID(bytes=hashlib.md5(b'"int"').digest()))
    refs = [{"name": "a.avsc", "subject": "a", "version": 2}, {"name": "b.avsc", "subject": "b", "version": 258}]
    expected = hashlib.md5(b'"int"' + b"a.avsc" + b"a" + b"\0\0\0\2" + b"b.avsc" + b"b"
                           + b"\0\0\1\2").digest()
    assert schema_guid('"int"', refs) == str(uuid.UUID(bytes=expected))
    assert schema_guid('"int"', refs) != schema_guid('"int"', refs[::-1])  # in the order of the references
    assert schema_guid("é", []) == str(uuid.UUID(bytes=hashlib.md5("é".encode()).digest()))  # UTF-8


def test_guids_are_read_as_uuids_or_32_hex_digits():
    g = "0a1b2c3d-4e5f-6071-8293-a4b5c6d7e8f9"
    assert parse_guid(g) == g and parse_guid(g.upper()) == g and parse_guid(g.replace("-", "")) == g
    for bad in ("", "not-a-guid", "0a1b2c3d", g + "00"):
        assert parse_guid(bad) is None
