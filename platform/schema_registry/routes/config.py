"""``/config``: the compatibility level, global and per subject."""

from __future__ import annotations

from fastapi import APIRouter, Request

from schema_registry.routes.common import RegistryDep, answer, body, error, truthy

router = APIRouter()


@router.get("/config")
async def get_config(registry: RegistryDep):
    return answer({"compatibilityLevel": registry.level(None)})


@router.put("/config")
async def put_config(request: Request, registry: RegistryDep):
    level = (await body(request)).get("compatibility")
    await registry.set_level(None, level if isinstance(level, str) else "")
    return answer({"compatibility": level.upper()})


@router.delete("/config")
async def delete_config(registry: RegistryDep):
    previous = registry.level(None)
    await registry.set_level(None, None)
    return answer({"compatibilityLevel": previous})


@router.get("/config/{subject:path}")
async def get_subject_config(subject: str, registry: RegistryDep,
                             defaultToGlobal: str | None = None):  # noqa: N803 (Confluent's name)
    if subject in registry.configs:
        return answer({"compatibilityLevel": registry.configs[subject]})
    if truthy(defaultToGlobal):
        return answer({"compatibilityLevel": registry.level(None)})
    return error(40408, f"Subject '{subject}' does not have subject-level compatibility configured")


@router.put("/config/{subject:path}")
async def put_subject_config(subject: str, request: Request, registry: RegistryDep):
    level = (await body(request)).get("compatibility")
    await registry.set_level(subject, level if isinstance(level, str) else "")
    return answer({"compatibility": level.upper()})


@router.delete("/config/{subject:path}")
async def delete_subject_config(subject: str, registry: RegistryDep):
    if subject not in registry.configs:
        return error(40401, f"Subject '{subject}' not found.")
    previous = registry.configs[subject]
    await registry.set_level(subject, None)
    return answer({"compatibilityLevel": previous})
