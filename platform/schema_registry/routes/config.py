"""``/config``: the compatibility level and ``normalize``, global and per subject (Confluent's config: an update
changes only what it names and is echoed back; GET shows what is set)."""

from __future__ import annotations

from fastapi import APIRouter, Request

from schema_registry.routes.common import RegistryDep, answer, body, error, truthy

router = APIRouter()


def _shown(config: dict) -> dict:
    return {k: config[k] for k in ("compatibilityLevel", "normalize") if k in config}


async def _update(registry, subject: str | None, request: Request):
    update = await body(request)
    level, normalize = update.get("compatibility"), update.get("normalize")
    if normalize is not None and not isinstance(normalize, bool):
        return error(400, f"normalize must be true or false, not {normalize!r}")
    if level is None and normalize is None:
        level = ""  # nothing to change: an invalid compatibility level (42203), as before normalize existed
    await registry.set_config(subject, level if isinstance(level, str) or level is None else "", normalize)
    echoed = {}
    if level is not None:
        echoed["compatibility"] = level.upper()
    if normalize is not None:
        echoed["normalize"] = normalize
    return answer(echoed)


@router.get("/config")
async def get_config(registry: RegistryDep):
    return answer({**_shown(registry.configs.get(None, {})), "compatibilityLevel": registry.level(None)})


@router.put("/config")
async def put_config(request: Request, registry: RegistryDep):
    return await _update(registry, None, request)


@router.delete("/config")
async def delete_config(registry: RegistryDep):
    previous = {**_shown(registry.configs.get(None, {})), "compatibilityLevel": registry.level(None)}
    await registry.set_config(None, None)
    return answer(previous)


@router.get("/config/{subject:path}")
async def get_subject_config(subject: str, registry: RegistryDep,
                             defaultToGlobal: str | None = None):  # noqa: N803 (Confluent's name)
    if subject in registry.configs:
        return answer(_shown(registry.configs[subject]))
    if truthy(defaultToGlobal):
        return answer({**_shown(registry.configs.get(None, {})), "compatibilityLevel": registry.level(None)})
    return error(40408, f"Subject '{subject}' does not have subject-level compatibility configured")


@router.put("/config/{subject:path}")
async def put_subject_config(subject: str, request: Request, registry: RegistryDep):
    return await _update(registry, subject, request)


@router.delete("/config/{subject:path}")
async def delete_subject_config(subject: str, registry: RegistryDep):
    if subject not in registry.configs:
        return error(40401, f"Subject '{subject}' not found.")
    previous = _shown(registry.configs[subject])
    await registry.set_config(subject, None)
    return answer(previous)
