"""``/contexts``: the schema contexts (Confluent's ContextsResource). GET lists ``.`` (the default context) first,
then every named context in name order, filtered by ``contextPrefix`` and paged by ``offset``/``limit``; DELETE
removes an empty context (42211 while any subject of it is left). ``/contexts/{ctx}/...`` itself is rewritten
before routing (:class:`schema_registry.contexts.ContextFilter`)."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import Response

from schema_registry.contexts import DEFAULT, ContextError, normalize_context
from schema_registry.routes.common import RegistryDep, answer, error

router = APIRouter()


@router.get("/contexts")
async def contexts(registry: RegistryDep, contextPrefix: str = "", offset: int = 0,  # noqa: N803 (Confluent's)
                   limit: int = -1):
    names = [DEFAULT, *sorted(registry.contexts)]
    names = [n for n in names if n.startswith(contextPrefix)][max(offset, 0):]
    return answer(names if limit <= 0 else names[:limit])


@router.delete("/contexts/{context:path}")
async def delete_context(context: str, registry: RegistryDep):
    try:
        scope = normalize_context(context.rstrip("/"))
    except ContextError as exc:
        return error(400, str(exc), 400)
    if scope:  # the default context is never deleted (Confluent answers 204 and keeps it)
        await registry.delete_context(scope.strip(":"))
    return Response(status_code=204)
