"""Content negotiation as Confluent's registry does it, an ASGI middleware around the app: the response type
follows ``Accept`` (Confluent's own types preferred, ``application/json`` when only that is asked for; 406 when
nothing offered is acceptable), and a request body must come as one of the accepted types (415 otherwise)."""

from __future__ import annotations

import json

V1 = "application/vnd.schemaregistry.v1+json"
OFFERED = (V1, "application/vnd.schemaregistry+json", "application/json")
REQUEST_TYPES = OFFERED + ("application/octet-stream",)


def response_type(accept: str) -> str | None:
    """The type to answer with, or None when ``accept`` allows none of ours."""
    ranges = [part.split(";")[0].strip().lower() for part in accept.split(",") if part.strip()]
    if not ranges:
        return V1
    for offered in OFFERED:
        if offered in ranges:
            return offered
    if any(r in ("*/*", "application/*") for r in ranges):
        return V1
    return None


class Negotiation:
    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        chosen = response_type(headers.get("accept", ""))
        if chosen is None:
            return await refuse(send, 406, "HTTP 406 Not Acceptable")
        content_type = headers.get("content-type", "").split(";")[0].strip().lower()
        if scope["method"] in ("POST", "PUT") and content_type and content_type not in REQUEST_TYPES:
            return await refuse(send, 415, "HTTP 415 Unsupported Media Type")

        async def typed(message):
            if message["type"] == "http.response.start":
                message["headers"] = [(k, chosen.encode() if k.lower() == b"content-type" and
                                       v.startswith(b"application/vnd.schemaregistry") else v)
                                      for k, v in message.get("headers", [])]
            await send(message)

        await self.app(scope, receive, typed)


async def refuse(send, status: int, message: str, code: int | None = None) -> None:
    """An error answer in Confluent's shape; ``code`` defaults to the status."""
    body = json.dumps({"error_code": code or status, "message": message}).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", V1.encode()), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})
