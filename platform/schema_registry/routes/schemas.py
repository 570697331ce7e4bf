"""``/schemas``: all versions, the schema types, and a schema by its id (in the context ``subject`` names: the
default one without it, see ``Registry.schema``)."""

from __future__ import annotations

from fastapi import APIRouter

from schema_registry.contexts import matches_prefix, qualified_references
from schema_registry.core import SCHEMA_TYPES, RegistryError
from schema_registry.routes.common import RegistryDep, answer, raw, truthy, version_body, with_contract

router = APIRouter()


@router.get("/schemas")
async def schemas(registry: RegistryDep, subjectPrefix: str = "",  # noqa: N803 (Confluent's names)
                  deleted: str | None = None, latestOnly: str | None = None,  # noqa: N803
                  offset: int = 0, limit: int = -1):
    out = []
    for subject in registry.subject_names(truthy(deleted)):
        if not matches_prefix(subject, subjectPrefix):  # "" (the default): the default context's only
            continue
        found = registry.versions(subject, truthy(deleted))
        out.extend(version_body(registry, subject, v) for v in (found[-1:] if truthy(latestOnly) else found))
    out = out[max(offset, 0):]
    return answer(out if limit < 0 else out[:limit])


@router.get("/schemas/types")
async def types():
    return answer(list(SCHEMA_TYPES))


@router.get("/schemas/ids/{schema_id}")
async def schema_by_id(schema_id: int, registry: RegistryDep, subject: str | None = None,
                       format: str | None = None,  # noqa: A002 (Confluent's name)
                       referenceFormat: str | None = None):  # noqa: N803 (Confluent's name)
    stored = registry.schema(schema_id, subject)
    out = await schema_string(registry, stored, format)
    if "references" in out:
        out["references"] = qualified_references(stored.context, out["references"], referenceFormat)
    return answer(out)


@router.get("/schemas/guids/{guid}")
async def schema_by_guid(guid: str, registry: RegistryDep, format: str | None = None):  # noqa: A002
    """Confluent 8: the schema whose GUID this is (what a header-carried GUID's deserializer asks)."""
    return answer(await schema_string(registry, registry.by_guid(guid), format))


@router.get("/schemas/guids/{guid}/ids")
async def ids_of_guid(guid: str, registry: RegistryDep):
    """The ids with this GUID: each context's; [] for an unknown GUID."""
    try:
        guid = registry.by_guid(guid).guid
    except RegistryError:
        return answer([])
    return answer([{"context": s.context, "id": s.schema_id}
                   for s in sorted(registry.schemas.values(), key=lambda s: s.key) if s.guid == guid])


async def schema_string(registry, stored, fmt: str | None) -> dict:
    """Confluent's SchemaString: the text (in ``format``), type, references and GUID (that of the stored text)."""
    if fmt == "serialized":
        await registry.warm(stored)
    out = {"schema": registry.serialized(stored, fmt)}
    if stored.schema_type != "AVRO":
        out["schemaType"] = stored.schema_type
    if stored.references:
        out["references"] = stored.references
    with_contract(out, stored)
    out["guid"] = stored.guid
    return out


@router.get("/schemas/ids/{schema_id}/schema")
async def raw_schema_by_id(schema_id: int, registry: RegistryDep, subject: str | None = None):
    return raw(registry.schema(schema_id, subject))


@router.get("/schemas/ids/{schema_id}/subjects")
async def subjects_of_id(schema_id: int, registry: RegistryDep, deleted: str | None = None,
                         subject: str | None = None):
    return answer(sorted({s for s, _ in registry.subjects_of(schema_id, truthy(deleted), subject)}))


@router.get("/schemas/ids/{schema_id}/versions")
async def versions_of_id(schema_id: int, registry: RegistryDep, deleted: str | None = None,
                         subject: str | None = None):
    return answer([{"subject": s, "version": v}
                   for s, v in registry.subjects_of(schema_id, truthy(deleted), subject)])
