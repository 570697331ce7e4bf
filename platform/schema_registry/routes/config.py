"""``/config``: the compatibility level, ``normalize``, ``compatibilityGroup`` and the default and override data
contracts (``defaultMetadata``, ``overrideMetadata``, ``defaultRuleSet``, ``overrideRuleSet``: merged into every
schema registered in the scope, ``contracts.with_config``), global and per subject, as Confluent's config: an update
changes what it names (null clears a setting) and answers with the config it leaves; GET shows what is set, the
level filled in with the server's default where a config has none."""

from __future__ import annotations

from fastapi import APIRouter, Request

from schema_registry import contracts
from schema_registry.core import RegistryError
from schema_registry.routes.common import RegistryDep, answer, body, error, truthy

router = APIRouter()
_CONTRACTS = {"defaultMetadata": contracts.metadata, "overrideMetadata": contracts.metadata,
              "defaultRuleSet": contracts.rule_set, "overrideRuleSet": contracts.rule_set}
# request field -> stored key
_NAMES = {"compatibility": "compatibilityLevel", "normalize": "normalize", "compatibilityGroup": "compatibilityGroup",
          **{name: name for name in _CONTRACTS}}


async def _update(registry, subject: str | None, request: Request):
    update = await body(request)
    normalize = update.get("normalize")
    if normalize is not None and not isinstance(normalize, bool):
        return error(400, f"normalize must be true or false, not {normalize!r}")
    group = update.get("compatibilityGroup")
    if group is not None and not isinstance(group, str):
        return error(422, "Unprocessable entity: compatibilityGroup must be a string")
    try:  # a contract setting in its written form (422, or 42210 for a rule set Confluent refuses)
        parsed = {name: read(update[name]) for name, read in _CONTRACTS.items() if name in update}
    except contracts.ContractError as exc:
        raise RegistryError(exc.code, str(exc)) from None
    changes = {stored: parsed.get(name, update[name]) for name, stored in _NAMES.items() if name in update}
    written = await registry.set_config(subject, changes)
    out = {"compatibility": written["compatibilityLevel"]} if "compatibilityLevel" in written else {}
    out.update((name, written[stored]) for name, stored in _NAMES.items()
               if name != "compatibility" and stored in written)
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
