"""``/config``: the compatibility level and ``normalize``, global and per subject, as Confluent's config: an update
changes what it names (null clears a setting) and answers with the config it leaves; GET shows what is set, the
level filled in with the server's default where a config has none."""

from __future__ import annotations

from fastapi import APIRouter, Request

from schema_registry.routes.common import RegistryDep, answer, body, error, truthy

router = APIRouter()
_NAMES = {"compatibility": "compatibilityLevel", "normalize": "normalize"}  # request field -> stored key


async def _update(registry, subject: str | None, request: Request):
    update = await body(request)
    normalize = update.get("normalize")
    if normalize is not None and not isinstance(normalize, bool):
        return error(400, f"normalize must be true or false, not {normalize!r}")
    written = await registry.set_config(subject, {stored: update[name] for name, stored in _NAMES.items()
                                                  if name in update})
    out = {"compatibility": written["compatibilityLevel"]} if "compatibilityLevel" in written else {}
    if "normalize" in written:
        out["normalize"] = written["normalize"]
    return answer(out)


@router.get("/config")
async def get_config(registry: RegistryDep):
    return answer(registry.config_shown(None))


@router.put("/config")
async def put_config(request: Request, registry: RegistryDep):
    return await _update(registry, None, request)


@router.delete("/config")
async def delete_config(registry: RegistryDep):
    previous = registry.config_shown(None)
    await registry.set_config(None, None)
    return answer(previous)


@router.get("/config/{subject:path}")
async def get_subject_config(subject: str, registry: RegistryDep,
                             defaultToGlobal: str | None = None):  # noqa: N803 (Confluent's name)
    if subject in registry.configs:
        return answer(registry.config_shown(subject, to_global=truthy(defaultToGlobal)))
    if truthy(defaultToGlobal):
        return answer(registry.config_shown(None))
    return error(40408, f"Subject '{subject}' does not have subject-level compatibility configured")


@router.put("/config/{subject:path}")
async def put_subject_config(subject: str, request: Request, registry: RegistryDep):
    return await _update(registry, subject, request)


@router.delete("/config/{subject:path}")
async def delete_subject_config(subject: str, registry: RegistryDep):
    if subject not in registry.configs:
        return error(40401, f"Subject '{subject}' not found.")
    previous = registry.config_shown(subject)
    await registry.set_config(subject, None)
    return answer(previous)
