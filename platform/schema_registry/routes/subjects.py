"""``/subjects``: subjects, their versions, registering, looking up and deleting. The ``.../versions...`` routes
come before ``/subjects/{subject:path}`` so that a subject holding ``/`` (``%2F``) still resolves to them."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request

from schema_registry import protobuf_schema
from schema_registry.contexts import matches_prefix
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
        await registry.warm(registry.schema(found.schema_id))
    return answer(version_body(registry, subject, found, format))


@router.get("/subjects/{subject:path}/versions/{version}")
async def get_version(subject: str, version: str, registry: RegistryDep, deleted: str | None = None,
                      format: str | None = None):  # noqa: A002 (Confluent's name)
    found = registry.version(subject, version, truthy(deleted))
    if format == "serialized":
        await registry.warm(registry.schema(found.schema_id))
    return answer(version_body(registry, subject, found, format))


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
    v, _ = await registry.lookup(subject, text, schema_type, refs, truthy(normalize), truthy(deleted),
                                 contract_fields(data) if sent else None)
    return answer(version_body(registry, subject, v))


@router.delete("/subjects/{subject:path}")
async def delete_subject(subject: str, registry: RegistryDep, permanent: str | None = None):
    return answer(await registry.delete_subject(subject, truthy(permanent)))
