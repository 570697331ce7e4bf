"""Leader election among writable registry instances through Kafka's group protocol, as Confluent's registry does
(``KafkaGroupLeaderElector``): every instance joins the group ``schema.registry.group.id`` with protocol type
``sr`` and its identity (host, port, scheme, ``leader.eligibility``) as member metadata; the member the
coordinator makes the group's leader assigns, and the assignment names one eligible instance the registry leader.

Only the leader writes ``_schemas``; the others forward writes to it (:mod:`schema_registry.forwarding`). A leader
that stops heartbeating (``kill -9``) leaves the group when its session times out; the rebalance that follows elects
another instance, which reads ``_schemas`` to its end before it allocates an id (``Registry.become_leader``).

The assignment keeps the current leader while it is a member and eligible (a new instance joining does not move
writes), else picks the eligible identity whose URL sorts first. While a rebalance is in progress this instance
knows no leader: forwarding waits a little, then answers 50004 (Confluent's "unknown leader").
"""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import dataclass

from aiokafka import errors as Errors
from aiokafka.client import AIOKafkaClient, ConnectionGroup, CoordinationType
from aiokafka.protocol.group import HeartbeatRequest, JoinGroupRequest, LeaveGroupRequest, SyncGroupRequest

from logbus.retry import Backoff
from settings.security import ClientSecurity

log = logging.getLogger(__name__)

PROTOCOL_TYPE, PROTOCOL = "sr", "v0"  # Confluent's registry group protocol


@dataclass(frozen=True)
class Identity:
    """One registry instance as the others reach it (Confluent's SchemaRegistryIdentity)."""

    host: str
    port: int
    scheme: str = "http"
    eligible: bool = True

    @property
    def url(self) -> str:
        return f"{self.scheme}://{self.host}:{self.port}"

    def encode(self) -> bytes:
        return json.dumps({"version": 1, "host": self.host, "port": self.port, "scheme": self.scheme,
                           "leader_eligibility": self.eligible}).encode()

    @classmethod
    def decode(cls, raw: bytes) -> "Identity":
        data = json.loads(raw)
        return cls(str(data["host"]), int(data["port"]), str(data.get("scheme", "http")),
                   bool(data.get("leader_eligibility", data.get("master_eligibility", True))))


def assign(members: dict[str, Identity], current: Identity | None) -> dict:
    """The group leader's assignment, the same for every member: ``{"version", "error", "leader",
    "leader_identity"}``; ``error`` 1 when no member is eligible (every instance then refuses writes)."""
    eligible = {mid: ident for mid, ident in members.items() if ident.eligible}
    if not eligible:
        return {"version": 1, "error": 1, "leader": None, "leader_identity": None}
    keep = [mid for mid, ident in eligible.items() if current is not None and ident == current]
    chosen = keep[0] if keep else min(eligible, key=lambda mid: (eligible[mid].url, mid))
    ident = eligible[chosen]
    return {"version": 1, "error": 0, "leader": chosen,
            "leader_identity": json.loads(ident.encode())}


class LeaderElection:
    """Runs the group membership on the event loop; :attr:`leader` is the elected instance (None while unknown),
    :attr:`is_leader` whether that is this one. ``on_elected(is_leader)`` is awaited after every assignment."""

    def __init__(self, bootstrap: str, security: ClientSecurity, group: str, identity: Identity,
                 session_timeout_ms: int = 10000, rebalance_timeout_ms: int = 30000, on_elected=None):
        self.bootstrap, self.security, self.group, self.identity = bootstrap, security, group, identity
        self.session_timeout_ms, self.rebalance_timeout_ms = session_timeout_ms, rebalance_timeout_ms
        self.on_elected = on_elected
        self.leader: Identity | None = None
        self._last_leader: Identity | None = None  # kept across a rebalance (the assignment keeps it leading)
        self.is_leader = False
        self.generation = -1
        self.member_id = ""
        self.elections = 0  # assignments received (a metric)
        self.forwarded = 0  # writes this instance forwarded to the leader (counted by the forwarding middleware)
        self._known = asyncio.Event()  # set while a leader is known
        self._task: asyncio.Task | None = None
        self._client: AIOKafkaClient | None = None
        self._coordinator: int | None = None

    # ---- lifecycle ----------------------------------------------------------------------------------------------
    def start(self) -> None:
        """Join in the background (writes wait for the first assignment: :meth:`wait_leader`)."""
        self._task = asyncio.create_task(self._run(), name="registry-election")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        if self._client is not None and self._coordinator is not None and self.member_id:
            try:  # leave at once: the others need not wait for this instance's session to time out
                await asyncio.wait_for(self._send(LeaveGroupRequest(self.group, self.member_id)), 2)
            except Exception:  # noqa: BLE001 (best effort on the way out)
                pass
        if self._client is not None:
            await self._client.close()

    async def wait_leader(self, timeout: float) -> Identity | None:
        if not self._known.is_set():
            try:
                await asyncio.wait_for(self._known.wait(), timeout)
            except asyncio.TimeoutError:
                return None
        return self.leader

    # ---- membership -----------------------------------------------------------------------------------------------
    async def _run(self) -> None:
        backoff = Backoff(0.5, 10.0)
        while True:
            try:
                if self._client is None:
                    self._client = AIOKafkaClient(bootstrap_servers=self.bootstrap, client_id="schema-registry",
                                                  request_timeout_ms=self.rebalance_timeout_ms + 10000,
                                                  **self.security.kafka_python())
                    await self._client.bootstrap()
                if self._coordinator is None:
                    self._coordinator = await self._client.coordinator_lookup(CoordinationType.GROUP, self.group)
                await self._join_and_sync()
                backoff.reset()
                await self._heartbeat()  # returns when a rebalance (or a lost member id) needs a new join
            except asyncio.CancelledError:
                raise
            except Errors.GroupAuthorizationFailedError:
                self._step_down()
                log.error("not authorized to join group %s (the registry's principal needs Read on the group); "
                          "retrying", self.group)
                await asyncio.sleep(backoff.next())
            except (Errors.KafkaError, OSError, asyncio.TimeoutError) as exc:
                self._step_down()
                self._coordinator = None
                delay = backoff.next()
                log.warning("registry election: %s; trying again in %.1f s", exc.__class__.__name__, delay)
                await asyncio.sleep(delay)
            except Exception:  # a bug must not end the membership: the registry would lose its writes for good
                self._step_down()
                log.exception("registry election failed; trying again")
                await asyncio.sleep(backoff.next())

    async def _send(self, request):
        return await self._client.send(self._coordinator, request, group=ConnectionGroup.COORDINATION)

    def _check(self, code: int) -> None:
        error = Errors.for_code(code)
        if error is Errors.NoError:
            return
        if error in (Errors.UnknownMemberIdError, Errors.IllegalGenerationError):
            self.member_id, self.generation = "", -1
        if error in (Errors.NotCoordinatorForGroupError, Errors.GroupCoordinatorNotAvailableError):
            self._coordinator = None
        raise error()

    async def _join_and_sync(self) -> None:
        self._step_down()  # a rebalance: no writes until the new assignment says who leads
        while True:
            response = await self._send(JoinGroupRequest(
                self.group, self.session_timeout_ms, self.rebalance_timeout_ms, self.member_id, None,
                PROTOCOL_TYPE, [(PROTOCOL, self.identity.encode())]))
            if Errors.for_code(response.error_code) is Errors.MemberIdRequired:
                self.member_id = response.member_id  # KIP-394: join again with the id the coordinator gave
                continue
            if Errors.for_code(response.error_code) is Errors.RebalanceInProgressError:
                continue
            self._check(response.error_code)
            break
        self.member_id, self.generation = response.member_id, response.generation_id
        assignments = []
        if response.leader_id == response.member_id:  # this member assigns, for the whole group
            members = {m[0]: Identity.decode(m[-1]) for m in response.members}
            plan = json.dumps(assign(members, self._last_leader)).encode()
            assignments = [(mid, plan) for mid in members]
        synced = await self._send(SyncGroupRequest(self.group, self.generation, self.member_id, None, assignments))
        self._check(synced.error_code)
        plan = json.loads(synced.member_assignment or b"{}")
        ident = plan.get("leader_identity")
        self.leader = Identity.decode(json.dumps(ident).encode()) if ident and not plan.get("error") else None
        self._last_leader = self.leader
        self.is_leader = self.leader is not None and plan.get("leader") == self.member_id
        self.elections += 1
        log.info("registry election (generation %d): leader %s%s", self.generation,
                 self.leader.url if self.leader else "none (no eligible instance)",
                 " (this instance)" if self.is_leader else "")
        if self.on_elected is not None:
            await self.on_elected(self.is_leader)
        if self.leader is not None:
            self._known.set()

    def _step_down(self) -> None:
        self.is_leader = False
        self.leader = None
        self._known.clear()

    async def _heartbeat(self) -> None:
        interval = self.session_timeout_ms / 3000
        while True:
            await asyncio.sleep(interval)
            response = await self._send(HeartbeatRequest(self.group, self.generation, self.member_id))
            if Errors.for_code(response.error_code) is Errors.RebalanceInProgressError:
                return  # rejoin with the same member id
            self._check(response.error_code)
