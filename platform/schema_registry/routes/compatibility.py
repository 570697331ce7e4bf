"""``/compatibility``: test a schema against all versions of a subject, or against one."""

from __future__ import annotations

from fastapi import APIRouter, Request

from schema_registry.core import Registry
from schema_registry.routes.common import RegistryDep, answer, body, schema_fields, truthy

router = APIRouter()


async def check(registry: Registry, subject: str, version: str | None, request: Request, verbose: str | None):
    text, schema_type, refs = schema_fields(await body(request))
    messages = await registry.check(subject, text, schema_type, refs, version)
    out = {"is_compatible": not messages}
    if truthy(verbose):
        out["messages"] = messages
    return answer(out)


@router.post("/compatibility/subjects/{subject:path}/versions")
async def compatibility_all(subject: str, request: Request, registry: RegistryDep, verbose: str | None = None):
    return await check(registry, subject, None, request, verbose)


@router.post("/compatibility/subjects/{subject:path}/versions/{version}")
async def compatibility_one(subject: str, version: str, request: Request, registry: RegistryDep,
                            verbose: str | None = None):
    return await check(registry, subject, version, request, verbose)
