"""``/mode``: READWRITE / READONLY, global and per subject (a READONLY instance reports its own mode)."""

from __future__ import annotations

from fastapi import APIRouter, Request

from schema_registry.routes.common import RegistryDep, answer, body, error, truthy

router = APIRouter()


@router.get("/mode")
async def get_mode(registry: RegistryDep):
    return answer({"mode": registry.instance_mode if registry.instance_mode == "READONLY"
                   else registry.mode(None)})


@router.put("/mode")
async def put_mode(request: Request, registry: RegistryDep):
    mode = (await body(request)).get("mode")
    await registry.set_mode(None, mode)
    return answer({"mode": mode.upper()})


@router.get("/mode/{subject:path}")
async def get_subject_mode(subject: str, registry: RegistryDep, defaultToGlobal: str | None = None):  # noqa: N803
    if subject in registry.modes:
        return answer({"mode": registry.modes[subject]})
    if truthy(defaultToGlobal):
        return answer({"mode": registry.mode(None)})
    return error(40409, f"Subject '{subject}' does not have subject-level mode configured")


@router.delete("/mode/{subject:path}")
async def delete_subject_mode(subject: str, registry: RegistryDep):
    if subject not in registry.modes:
        return error(40401, f"Subject '{subject}' not found.")
    previous = registry.modes[subject]
    await registry.set_mode(subject, None)
    return answer({"mode": previous})


@router.put("/mode/{subject:path}")
async def put_subject_mode(subject: str, request: Request, registry: RegistryDep):
    mode = (await body(request)).get("mode")
    await registry.set_mode(subject, mode)
    return answer({"mode": mode.upper()})
