"""``/subjects``: subjects, their versions, registering, looking up and deleting. The ``.../versions...`` routes
come before ``/subjects/{subject:path}`` so that a subject holding ``/`` (``%2F``) still resolves to them."""

from __future__ import annotations

import inspect
from typing import Annotated

from fastapi import APIRouter, Query, Request

from schema_registry import protobuf_schema
from schema_registry.contexts import context_of, matches_prefix, qualified_references
from schema_registry.core import SCHEMA_NOT_FOUND, SUBJECT_NOT_FOUND, VERSION_NOT_FOUND, RegistryError
from schema_registry.routes.common import (
    RegistryDep,
    answer,
    body,
    contract_fields,
    raw,
    schema_fields,
    truthy,
    version_body,
    with_contract,
)

router = APIRouter()


@router.get("/subjects")
async def subjects(registry: RegistryDep, deleted: str | None = None,
                   subjectPrefix: str | None = None):  # noqa: N803 (Confluent's name)
    """Every context's subjects (qualified) without ``subjectPrefix``; with one, its context's (``:*:``: all)."""
    return answer([s for s in registry.subject_names(truthy(deleted)) if matches_prefix(s, subjectPrefix)])


@router.get("/subjects/{subject:path}/versions")
async def versions(subject: str, registry: RegistryDep, deleted: str | None = None):
    return answer([v.version for v in registry.versions(subject, truthy(deleted))])


@router.post("/subjects/{subject:path}/versions")
async def register(subject: str, request: Request, registry: RegistryDep, normalize: str | None = None,
                   format: str | None = None):  # noqa: A002 (Confluent's name)
    data = await body(request)
    text, schema_type, refs = schema_fields(data)
    metadata, rule_set = contract_fields(data)
    v, stored = await registry.register(subject, text, schema_type, refs, truthy(normalize), metadata, rule_set)
    # Confluent 8's RegisterSchemaResponse: the schema as stored (in ``format``), its version and its GUID. One
    # deviation: a Protobuf schema sent as a base64 descriptor is answered as one. confluent-kafka's client caches
    # the answer's text by id and hands it to a ProtobufDeserializer sharing the client, which needs a descriptor.
    if not format and stored.schema_type == "PROTOBUF" and protobuf_schema.decode(text) is not None:
        format = "serialized"  # noqa: A001
    if format == "serialized":
        await registry.warm(stored)
    out = {"id": stored.schema_id, "version": v.version, "guid": stored.guid, "schemaType": stored.schema_type}
    if stored.references:
        out["references"] = stored.references
    with_contract(out, stored)
    out["schema"] = registry.serialized(stored, format)
    return answer(out)


@router.get("/subjects/{subject:path}/metadata")
async def latest_with_metadata(subject: str, registry: RegistryDep, key: Annotated[list[str] | None, Query()] = None,
                               value: Annotated[list[str] | None, Query()] = None, deleted: str | None = None,
                               format: str | None = None):  # noqa: A002 (Confluent's name)
    """The latest version whose metadata properties hold every ``key``/``value`` pair (Confluent's
    ``getLatestWithMetadata``, what serializers with ``use.latest.with.metadata`` ask)."""
    found = registry.latest_with_metadata(subject, dict(zip(key or [], value or [])), truthy(deleted))
    if format == "serialized":
        await registry.warm(registry.stored(subject, found))
    return answer(version_body(registry, subject, found, format))


@router.get("/subjects/{subject:path}/versions/{version}")
async def get_version(subject: str, version: str, registry: RegistryDep, deleted: str | None = None,
                      format: str | None = None,  # noqa: A002 (Confluent's name)
                      referenceFormat: str | None = None):  # noqa: N803 (Confluent's name)
    subject, found = await first_found(registry, subject, lambda s: registry.version(s, version, truthy(deleted)))
    if format == "serialized":
        await registry.warm(registry.stored(subject, found))
    out = version_body(registry, subject, found, format)
    if "references" in out:
        out["references"] = qualified_references(context_of(subject), out["references"], referenceFormat)
    return answer(out)


@router.get("/subjects/{subject:path}/versions/{version}/schema")
async def get_version_schema(subject: str, version: str, registry: RegistryDep):
    return raw(registry.stored(subject, registry.version(subject, version)))


@router.get("/subjects/{subject:path}/versions/{version}/referencedby")
async def referenced_by(subject: str, version: str, registry: RegistryDep):
    return answer(registry.referenced_by(subject, version))


@router.delete("/subjects/{subject:path}/versions/{version}")
async def delete_version(subject: str, version: str, registry: RegistryDep, permanent: str | None = None):
    return answer(await registry.delete_version(subject, version, truthy(permanent)))


@router.post("/subjects/{subject:path}")
async def lookup(subject: str, request: Request, registry: RegistryDep, normalize: str | None = None,
                 deleted: str | None = None):
    data = await body(request)
    text, schema_type, refs = schema_fields(data)
    sent = data.get("metadata") is not None or data.get("ruleSet") is not None
    contract = contract_fields(data) if sent else None

    async def look(candidate):
        return (await registry.lookup(candidate, text, schema_type, refs, truthy(normalize), truthy(deleted),
                                      contract))[0]

    subject, v = await first_found(registry, subject, look)
    return answer(version_body(registry, subject, v))


async def first_found(registry, subject: str, find) -> tuple:
    """(subject, what ``find`` found) for the first of the subject's places that has it (a plain name: the default
    context, then each named one, as Confluent's ``getUsingContexts``); the first place's error when none has."""
    first = None
    for candidate in registry.using_contexts(subject):
        try:
            found = find(candidate)
            return candidate, (await found if inspect.isawaitable(found) else found)
        except RegistryError as exc:
            if exc.code not in (SUBJECT_NOT_FOUND, VERSION_NOT_FOUND, SCHEMA_NOT_FOUND):
                raise
            first = first or exc
    raise first


@router.delete("/subjects/{subject:path}")
async def delete_subject(subject: str, registry: RegistryDep, permanent: str | None = None):
    return answer(await registry.delete_subject(subject, truthy(permanent)))
