"""Schema contexts without I/O: Confluent's QualifiedSubject parsing, normalizeContext, ContextFilter's rewriting
(the cases of Confluent's ContextFilterTest), subjectPrefix matching, and ids per context in the registry core."""

import json

import pytest
from registry_memory import memory_registry, run

from schema_registry import contexts
from schema_registry.core import RegistryError

pytestmark = [pytest.mark.unit, pytest.mark.timeout(30)]


@pytest.mark.parametrize("name,expected", [
    (":.ctx1:subject1", (".ctx1", "subject1")),
    (":.ctx1:sub:ject1", (".ctx1", "sub:ject1")),
    (":.ctx1", (".ctx1", "")),
    (":ctx1:subject1", (".", ":ctx1:subject1")),  # no dot: a default-context name
    ("subject1", (".", "subject1")),
    (":*:foo", ("*", "foo")),
])
def test_qualified_subjects(name, expected):
    assert contexts.split(name) == expected


def test_normalizing():
    assert contexts.normalize(":.:foo") == "foo"
    assert contexts.normalize(":.ctx:foo") == ":.ctx:foo"
    assert contexts.normalize_context("test-ctx") == ":.test-ctx:"
    assert contexts.normalize_context(":.test-ctx:") == ":.test-ctx:"
    assert contexts.normalize_context(".") == ""
    with pytest.raises(contexts.ContextError, match="Context name 'foo:bar' cannot contain a colon"):
        contexts.normalize_context("foo:bar")


@pytest.mark.parametrize("path,query,expected", [
    ("/contexts/.test-ctx/subjects/test-subject/versions", "", ("/subjects/:.test-ctx:test-subject/versions", "")),
    ("/contexts/test-ctx/subjects/test-subject/versions", "", ("/subjects/:.test-ctx:test-subject/versions", "")),
    ("/contexts/:.:/subjects/x/versions", "", ("/subjects/x/versions", "")),
    ("/contexts/.c/subjects/%3A.other%3As/versions", "", ("/subjects/%3A.other%3As/versions", "")),
    ("/contexts/.c/subjects/slash%2Fin", "", ("/subjects/:.c:slash%2Fin", "")),
    ("/contexts/.c/config", "", ("/config/:.c:", "")),
    ("/contexts/.c/config/s", "", ("/config/:.c:s", "")),
    ("/contexts/.c/mode/s", "", ("/mode/:.c:s", "")),
    ("/contexts/.c/compatibility/subjects/s/versions/latest", "",
     ("/compatibility/subjects/:.c:s/versions/latest", "")),
    ("/contexts/.c/schemas/ids/1", "", ("/schemas/ids/1", "subject=%3A.c%3A")),
    ("/contexts/:.:/schemas/ids/1", "", ("/schemas/ids/1", "subject=")),
    ("/contexts/.c/schemas/ids/1/versions", "subject=s", ("/schemas/ids/1/versions", "subject=%3A.c%3As")),
    ("/contexts/.c/subjects", "deleted=true", ("/subjects", "deleted=true&subjectPrefix=%3A.c%3A")),
    ("/contexts/.c/schemas", "subjectPrefix=%3A*%3A", ("/schemas", "subjectPrefix=%3A%2A%3A")),
    ("/contexts/.c/contexts", "", ("/contexts", "")),
    ("/contexts/.c", "", ("/contexts/:.c:/", "")),
])
def test_the_context_filter_rewrites_as_confluents(path, query, expected):
    assert contexts.rewrite(path, query) == expected


def test_subject_prefixes():
    assert contexts.matches_prefix(":.a:x", None) and contexts.matches_prefix("x", None)
    assert contexts.matches_prefix("x", "") and not contexts.matches_prefix(":.a:x", "")
    assert contexts.matches_prefix(":.a:xy", ":.a:x") and not contexts.matches_prefix(":.b:xy", ":.a:x")
    assert contexts.matches_prefix(":.b:xy", ":*:x") and contexts.matches_prefix("xy", ":*:x")


def avro(*fields):
    return json.dumps({"type": "record", "name": "R", "fields": [{"name": f, "type": "string"} for f in fields]},
                      separators=(",", ":"))


def test_ids_are_per_context_and_a_context_record_is_written_once():
    r = memory_registry()
    written = []
    write = r.store.write

    async def recording(key, value):
        written.append(key["keytype"])
        await write(key, value)

    r.store.write = recording
    assert run(r.register("s", avro("a"), None, [], False))[1].schema_id == 1
    assert run(r.register(":.x:s", avro("a", "b"), None, [], False))[1].schema_id == 1
    assert run(r.register(":.x:t", avro("a"), None, [], False))[1].schema_id == 2
    assert run(r.register(":.x:u", avro("a"), None, [], False))[1].schema_id == 2  # same schema, same context
    assert written == ["SCHEMA", "CONTEXT", "SCHEMA", "SCHEMA", "SCHEMA"]
    assert r.schema(1).text == avro("a") and r.schema(1, ":.x:").context == ".x"
    assert r.schema(2, "t").context == ".x"  # a plain name found in a named context (Confluent's fallback)
    with pytest.raises(RegistryError):
        r.schema(2)
    with pytest.raises(RegistryError) as refused:
        run(r.register(":.x:", avro("a"), None, [], False))
    assert refused.value.code == 42208
    with pytest.raises(RegistryError) as refused:
        run(r.delete_context(".x"))
    assert refused.value.code == 42211


def test_references_qualified_with_the_referrers_context():
    """``referenceFormat=qualified`` as Confluent's ``qualifySubjectWithParent``: unqualified subjects take the
    referrer's context, qualified ones stay; the default context, or another format, leaves them as stored."""
    refs = [{"name": "A", "subject": "a", "version": 1}, {"name": "B", "subject": ":.other:b", "version": 2}]
    assert contexts.qualified_references(".prod", refs, "qualified") == [
        {"name": "A", "subject": ":.prod:a", "version": 1}, {"name": "B", "subject": ":.other:b", "version": 2}]
    assert contexts.qualified_references(".", refs, "qualified") == refs
    assert contexts.qualified_references(".prod", refs, None) == refs
    assert contexts.qualified_references(".prod", None, "qualified") is None
