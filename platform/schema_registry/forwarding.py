"""Writes go to the elected leader (Confluent's registry forwards them the same way): an ASGI middleware in front
of the app. A write (registering, deleting, changing /config or /mode) that reaches an instance that is not the
leader is sent on to the leader's URL with its method, path, query, body and the caller's ``Authorization``, and the
leader's answer is relayed unchanged. Reads (GETs, lookups, compatibility checks) are always answered locally.

- No leader known (a rebalance in progress): wait up to ``leader.wait.ms``, then 50004 "Unknown leader".
- The leader cannot be reached or does not answer in time: 50003 "Error while forwarding the request to the
  leader" (the caller retries; a client with several registry URLs tries the next one).
- Read-your-write: the leader tells in ``X-Logbus-Store-Offset`` how far it had applied ``_schemas`` when it
  answered; the forwarding instance answers only once it has applied that far too (bounded by
  ``kafkastore.timeout.ms``), so a GET right after a forwarded registration finds it here.
"""

from __future__ import annotations

import asyncio
import logging
import ssl

from schema_registry.config import operation
from schema_registry.negotiation import V1, refuse

log = logging.getLogger(__name__)

UNKNOWN_LEADER, FORWARDING_FAILED = 50004, 50003
OFFSET_HEADER = b"x-logbus-store-offset"
PASSED_ON = (b"authorization", b"content-type", b"accept")


class Forwarding:
    def __init__(self, app, election, store, max_request_bytes: int, leader_wait_s: float = 10.0,
                 timeout_s: float = 30.0, verify: ssl.SSLContext | bool = True):
        self.app, self.election, self.store = app, election, store
        self.max_request_bytes, self.leader_wait_s, self.timeout_s = max_request_bytes, leader_wait_s, timeout_s
        self.verify = verify
        self._client = None

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or operation(scope["method"], scope["path"]) == "read":
            return await self.app(scope, receive, send)
        if self.election.is_leader:
            return await self.app(scope, receive, self._with_offset(send))
        leader = await self.election.wait_leader(self.leader_wait_s)
        if self.election.is_leader:  # elected meanwhile
            return await self.app(scope, receive, self._with_offset(send))
        if leader is None:
            return await refuse(send, 500, "Unknown leader", UNKNOWN_LEADER)
        body = await read_body(receive, self.max_request_bytes)
        if body is None:
            return await refuse(send, 413, f"Request body larger than max.request.bytes ({self.max_request_bytes})")
        try:
            answer = await self._forward(leader.url, scope, body)
        except Exception as exc:  # noqa: BLE001 (any failure to reach the leader is the caller's 50003)
            log.warning("forwarding %s %s to the leader %s failed: %s", scope["method"], scope["path"], leader.url,
                        exc)
            return await refuse(send, 500, f"Error while forwarding the request to the leader: {type(exc).__name__}",
                                FORWARDING_FAILED)
        self.election.forwarded += 1
        applied = answer.headers.get(OFFSET_HEADER.decode())
        if applied is not None and answer.status_code < 300:
            await self.store.wait_applied(int(applied))
        headers = [(b"content-type", answer.headers.get("content-type", V1).encode()),
                   (b"content-length", str(len(answer.content)).encode())]
        await send({"type": "http.response.start", "status": answer.status_code, "headers": headers})
        await send({"type": "http.response.body", "body": answer.content})

    async def _forward(self, url: str, scope, body: bytes):
        import httpx2

        if self._client is None:
            self._client = httpx2.AsyncClient(verify=self.verify, timeout=self.timeout_s, trust_env=False)
        headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in scope["headers"] if k in PASSED_ON]
        query = scope.get("query_string", b"").decode("latin-1")
        target = url + scope.get("raw_path", scope["path"].encode()).decode("latin-1") + (f"?{query}" if query else "")
        return await self._client.request(scope["method"], target, content=body, headers=headers)

    def _with_offset(self, send):
        """The leader's answer to a write carries how far it has applied ``_schemas``."""
        async def tagged(message):
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []),
                                      (OFFSET_HEADER, str(self.store.applied).encode())]
            await send(message)
        return tagged

    async def close(self) -> None:
        if self._client is not None:
            await self._client.aclose()


async def read_body(receive, limit: int) -> bytes | None:
    """The whole request body, or None past ``limit`` bytes (not read further)."""
    chunks, size = [], 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise asyncio.CancelledError("the client went away")
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
        if not message.get("more_body"):
            return b"".join(chunks)
