"""What the routes share: the answer and error bodies, the registry as a dependency, the JSON body read under
``max.request.bytes``, the schema fields of a body, a version's body and Confluent's ``true`` flags."""

from __future__ import annotations

import json
from typing import Annotated

from fastapi import Depends, Request
from fastapi.responses import Response

from schema_registry import contracts
from schema_registry.core import INVALID_SCHEMA, Registry, RegistryError, Version

CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"
HTTP_REASONS = {404: "HTTP 404 Not Found", 405: "HTTP 405 Method Not Allowed"}


def answer(body, status: int = 200) -> Response:
    return Response(json.dumps(body), status_code=status, media_type=CONTENT_TYPE)


def error(code: int, message: str, status: int | None = None) -> Response:
    status = status or (code if code < 1000 else code // 100)
    return answer({"error_code": code, "message": message}, status)


def raw(stored) -> Response:
    """A schema alone (``.../schema`` routes): the document itself for Avro and JSON, the text for Protobuf."""
    if stored.schema_type == "PROTOBUF":
        return Response(stored.text, media_type=CONTENT_TYPE)
    return answer(json.loads(stored.text))


def truthy(value: str | None) -> bool:
    return (value or "").lower() == "true"


async def get_registry(request: Request) -> Registry:
    """The registry given to ``create_app`` (``app.state.registry``)."""
    return request.app.state.registry


RegistryDep = Annotated[Registry, Depends(get_registry)]


async def body(request: Request) -> dict:
    """The JSON body, read chunk by chunk: past ``max.request.bytes`` (``app.state.max_request_bytes``) the request
    is refused at once (413) without reading the rest (a chunked body, or one longer than its Content-Length
    says); the server then closes the connection, the body being unread."""
    max_request_bytes: int = request.app.state.max_request_bytes
    too_large = f"Request body larger than max.request.bytes ({max_request_bytes})"
    length = request.headers.get("content-length")
    if length is not None and (not length.strip().isdigit() or int(length) > max_request_bytes):
        raise RegistryError(413 if length.strip().isdigit() else 400,
                            too_large if length.strip().isdigit() else "Invalid Content-Length")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > max_request_bytes:
            raise RegistryError(413, too_large)
        chunks.append(chunk)
    raw = b"".join(chunks)
    try:
        data = json.loads(raw or b"{}")
    except ValueError:
        raise RegistryError(400, "Unrecognized request body: not JSON") from None
    if not isinstance(data, dict):
        raise RegistryError(422, "Unprocessable entity: the body must be a JSON object")
    return data


def schema_fields(data: dict) -> tuple[str, str | None, list[dict]]:
    text = data.get("schema")
    if text is None or text == "":
        raise RegistryError(INVALID_SCHEMA, "Empty schema")  # Confluent's wording
    if not isinstance(text, str):
        raise RegistryError(INVALID_SCHEMA, "Invalid schema: the body needs a \"schema\" string")
    references = data.get("references") or []
    if not isinstance(references, list) or not all(isinstance(r, dict) for r in references):
        raise RegistryError(422, "Unprocessable entity: references must be a list of objects")
    return text, data.get("schemaType"), references


def contract_fields(data: dict) -> tuple[dict | None, dict | None]:
    """The request's ``metadata`` and ``ruleSet`` as Confluent keeps them (422, or 42210 for a refused rule)."""
    try:
        return contracts.metadata(data.get("metadata")), contracts.rule_set(data.get("ruleSet"))
    except contracts.ContractError as exc:
        raise RegistryError(exc.code, str(exc)) from None


def with_contract(out: dict, stored) -> dict:
    """``metadata`` and ``ruleSet`` added to an answer carrying a schema, when it has them."""
    if stored.metadata is not None:
        out["metadata"] = stored.metadata
    if stored.rule_set is not None:
        out["ruleSet"] = stored.rule_set
    return out


def version_body(registry: Registry, subject: str, v: Version, fmt: str | None = None) -> dict:
    stored = registry.stored(subject, v)
    out = {"subject": subject, "version": v.version, "id": v.schema_id, "guid": stored.guid,
           "schema": registry.serialized(stored, fmt)}
    if stored.schema_type != "AVRO":
        out["schemaType"] = stored.schema_type
    if stored.references:
        out["references"] = stored.references
    return with_contract(out, stored)
