"""``/`` and ``/status`` (the replay's health and the leader election)."""

from __future__ import annotations

from fastapi import APIRouter

from schema_registry.routes.common import RegistryDep, answer

router = APIRouter()


@router.get("/")
async def root():
    return answer({})


@router.get("/status")
async def status(registry: RegistryDep):
    """Health of the replay of the topic: records applied, and those that could not be (each logged at
    ERROR), so a registry that silently diverged from ``_schemas`` shows it."""
    store, election = registry.store, registry.election
    leader = election.leader.url if election is not None and election.leader is not None else None
    return answer({"records_applied_to_offset": getattr(store, "applied", -1),
                   "records_skipped": getattr(store, "skipped", 0),
                   "last_skipped": getattr(store, "last_skipped", None),
                   # the leader election among writable instances (None for a read-only instance)
                   "leader": leader, "is_leader": bool(election is not None and election.is_leader),
                   "elections": election.elections if election is not None else 0,
                   "forwarded": election.forwarded if election is not None else 0})

