"""``/subjects``: subjects, their versions, registering, looking up and deleting. The ``.../versions...`` routes
come before ``/subjects/{subject:path}`` so that a subject holding ``/`` (``%2F``) still resolves to them."""

from __future__ import annotations

from fastapi import APIRouter, Request

from schema_registry.routes.common import RegistryDep, answer, body, raw, schema_fields, truthy, version_body

router = APIRouter()


@router.get("/subjects")
async def subjects(registry: RegistryDep, deleted: str | None = None):
    return answer(registry.subject_names(truthy(deleted)))


@router.get("/subjects/{subject:path}/versions")
async def versions(subject: str, registry: RegistryDep, deleted: str | None = None):
    return answer([v.version for v in registry.versions(subject, truthy(deleted))])


@router.post("/subjects/{subject:path}/versions")
async def register(subject: str, request: Request, registry: RegistryDep, normalize: str | None = None):
    text, schema_type, refs = schema_fields(await body(request))
    return answer({"id": await registry.register(subject, text, schema_type, refs, truthy(normalize))})


@router.get("/subjects/{subject:path}/versions/{version}")
async def get_version(subject: str, version: str, registry: RegistryDep, deleted: str | None = None,
                      format: str | None = None):  # noqa: A002 (Confluent's name)
    found = registry.version(subject, version, truthy(deleted))
    if format == "serialized":
        await registry.warm(registry.schema(found.schema_id))
    return answer(version_body(registry, subject, found, format))


@router.get("/subjects/{subject:path}/versions/{version}/schema")
async def get_version_schema(subject: str, version: str, registry: RegistryDep):
    return raw(registry.schema(registry.version(subject, version).schema_id))


@router.get("/subjects/{subject:path}/versions/{version}/referencedby")
async def referenced_by(subject: str, version: str, registry: RegistryDep):
    return answer(registry.referenced_by(subject, version))


@router.delete("/subjects/{subject:path}/versions/{version}")
async def delete_version(subject: str, version: str, registry: RegistryDep, permanent: str | None = None):
    return answer(await registry.delete_version(subject, version, truthy(permanent)))


@router.post("/subjects/{subject:path}")
async def lookup(subject: str, request: Request, registry: RegistryDep, normalize: str | None = None,
                 deleted: str | None = None):
    text, schema_type, refs = schema_fields(await body(request))
    v, _ = await registry.lookup(subject, text, schema_type, refs, truthy(normalize), truthy(deleted))
    return answer(version_body(registry, subject, v))


@router.delete("/subjects/{subject:path}")
async def delete_subject(subject: str, registry: RegistryDep, permanent: str | None = None):
    return answer(await registry.delete_subject(subject, truthy(permanent)))
