"""The HTTP API: Confluent Schema Registry's routes and error bodies over the registry core (thin: parse the
request, call the core, shape the answer; RegistryError becomes ``{"error_code": N, "message": ...}``)."""

from __future__ import annotations

import json

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from schema_registry.core import INVALID_SCHEMA, Registry, RegistryError

CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"
HTTP_REASONS = {404: "HTTP 404 Not Found", 405: "HTTP 405 Method Not Allowed"}


def answer(body, status: int = 200) -> Response:
    return Response(json.dumps(body), status_code=status, media_type=CONTENT_TYPE)


def error(code: int, message: str, status: int | None = None) -> Response:
    status = status or (code if code < 1000 else code // 100)
    return answer({"error_code": code, "message": message}, status)


def truthy(value: str | None) -> bool:
    return (value or "").lower() == "true"


def create_app(registry: Registry, max_request_bytes: int = 10 * 1024 * 1024) -> FastAPI:
    app = FastAPI(title="logbus schema registry", docs_url=None, redoc_url=None)

    @app.exception_handler(RegistryError)
    async def registry_error(_request: Request, exc: RegistryError):
        return error(exc.code, exc.message)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(_request: Request, exc: StarletteHTTPException):
        # Jersey's wording for an unknown route (404) or method (405), as Confluent's registry answers
        return error(exc.status_code, HTTP_REASONS.get(exc.status_code, str(exc.detail)), exc.status_code)

    @app.exception_handler(RequestValidationError)
    async def validation_error(_request: Request, exc: RequestValidationError):
        # a path parameter of the wrong type (/schemas/ids/abc) matches no resource in Confluent: 404
        if any(e.get("loc", ("",))[0] == "path" for e in exc.errors()):
            return error(404, HTTP_REASONS[404], 404)
        return error(422, "Unprocessable entity: invalid request parameters", 422)

    async def body(request: Request) -> dict:
        """The JSON body, read chunk by chunk: past ``max.request.bytes`` the request is refused at once (413)
        without reading the rest (a chunked body, or one longer than its Content-Length says); the server
        then closes the connection, the body being unread."""
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

    def version_body(subject: str, v, deleted: bool = False) -> dict:
        stored = registry.schema(v.schema_id)
        out = {"subject": subject, "version": v.version, "id": v.schema_id, "schema": stored.text}
        if stored.schema_type != "AVRO":
            out["schemaType"] = stored.schema_type
        if stored.references:
            out["references"] = stored.references
        return out

    @app.get("/")
    async def root():
        return answer({})

    @app.get("/status")
    async def status():
        """Health of the replay of the topic: records applied, and those that could not be (each logged at
        ERROR), so a registry that silently diverged from ``_schemas`` shows it."""
        store = registry.store
        return answer({"records_applied_to_offset": getattr(store, "applied", -1),
                       "records_skipped": getattr(store, "skipped", 0),
                       "last_skipped": getattr(store, "last_skipped", None)})

    @app.get("/schemas")
    async def schemas(subjectPrefix: str = "", deleted: str | None = None,  # noqa: N803 (Confluent's names)
                      latestOnly: str | None = None, offset: int = 0, limit: int = -1):  # noqa: N803
        out = []
        for subject in registry.subject_names(truthy(deleted)):
            if not subject.startswith(subjectPrefix):
                continue
            found = registry.versions(subject, truthy(deleted))
            out.extend(version_body(subject, v) for v in (found[-1:] if truthy(latestOnly) else found))
        out = out[max(offset, 0):]
        return answer(out if limit < 0 else out[:limit])

    @app.get("/schemas/types")
    async def types():
        return answer(["AVRO"])

    @app.get("/schemas/ids/{schema_id}")
    async def schema_by_id(schema_id: int, subject: str | None = None):
        stored = registry.schema(schema_id)
        out = {"schema": stored.text}
        if stored.schema_type != "AVRO":
            out["schemaType"] = stored.schema_type
        if stored.references:
            out["references"] = stored.references
        return answer(out)

    @app.get("/schemas/ids/{schema_id}/schema")
    async def raw_schema_by_id(schema_id: int):
        return answer(json.loads(registry.schema(schema_id).text))

    @app.get("/schemas/ids/{schema_id}/subjects")
    async def subjects_of_id(schema_id: int, deleted: str | None = None):
        return answer(sorted({s for s, _ in registry.subjects_of(schema_id, truthy(deleted))}))

    @app.get("/schemas/ids/{schema_id}/versions")
    async def versions_of_id(schema_id: int, deleted: str | None = None):
        return answer([{"subject": s, "version": v} for s, v in registry.subjects_of(schema_id, truthy(deleted))])

    @app.get("/subjects")
    async def subjects(deleted: str | None = None):
        return answer(registry.subject_names(truthy(deleted)))

    @app.get("/subjects/{subject:path}/versions")
    async def versions(subject: str, deleted: str | None = None):
        return answer([v.version for v in registry.versions(subject, truthy(deleted))])

    @app.post("/subjects/{subject:path}/versions")
    async def register(subject: str, request: Request, normalize: str | None = None):
        text, schema_type, refs = schema_fields(await body(request))
        return answer({"id": await registry.register(subject, text, schema_type, refs, truthy(normalize))})

    @app.get("/subjects/{subject:path}/versions/{version}")
    async def get_version(subject: str, version: str, deleted: str | None = None):
        return answer(version_body(subject, registry.version(subject, version, truthy(deleted))))

    @app.get("/subjects/{subject:path}/versions/{version}/schema")
    async def get_version_schema(subject: str, version: str):
        return answer(json.loads(registry.schema(registry.version(subject, version).schema_id).text))

    @app.get("/subjects/{subject:path}/versions/{version}/referencedby")
    async def referenced_by(subject: str, version: str):
        return answer(registry.referenced_by(subject, version))

    @app.delete("/subjects/{subject:path}/versions/{version}")
    async def delete_version(subject: str, version: str, permanent: str | None = None):
        return answer(await registry.delete_version(subject, version, truthy(permanent)))

    @app.post("/subjects/{subject:path}")
    async def lookup(subject: str, request: Request, normalize: str | None = None, deleted: str | None = None):
        text, schema_type, refs = schema_fields(await body(request))
        v, _ = registry.lookup(subject, text, schema_type, refs, truthy(normalize), truthy(deleted))
        return answer(version_body(subject, v))

    @app.delete("/subjects/{subject:path}")
    async def delete_subject(subject: str, permanent: str | None = None):
        return answer(await registry.delete_subject(subject, truthy(permanent)))

    async def compatibility(subject: str, version: str | None, request: Request, verbose: str | None):
        text, schema_type, refs = schema_fields(await body(request))
        messages = registry.check(subject, text, schema_type, refs, version)
        out = {"is_compatible": not messages}
        if truthy(verbose):
            out["messages"] = messages
        return answer(out)

    @app.post("/compatibility/subjects/{subject:path}/versions")
    async def compatibility_all(subject: str, request: Request, verbose: str | None = None):
        return await compatibility(subject, None, request, verbose)

    @app.post("/compatibility/subjects/{subject:path}/versions/{version}")
    async def compatibility_one(subject: str, version: str, request: Request, verbose: str | None = None):
        return await compatibility(subject, version, request, verbose)

    @app.get("/config")
    async def get_config():
        return answer({"compatibilityLevel": registry.level(None)})

    @app.put("/config")
    async def put_config(request: Request):
        level = (await body(request)).get("compatibility")
        await registry.set_level(None, level if isinstance(level, str) else "")
        return answer({"compatibility": level.upper()})

    @app.delete("/config")
    async def delete_config():
        previous = registry.level(None)
        await registry.set_level(None, None)
        return answer({"compatibilityLevel": previous})

    @app.get("/config/{subject:path}")
    async def get_subject_config(subject: str, defaultToGlobal: str | None = None):  # noqa: N803 (Confluent's name)
        if subject in registry.configs:
            return answer({"compatibilityLevel": registry.configs[subject]})
        if truthy(defaultToGlobal):
            return answer({"compatibilityLevel": registry.level(None)})
        return error(40408, f"Subject '{subject}' does not have subject-level compatibility configured")

    @app.put("/config/{subject:path}")
    async def put_subject_config(subject: str, request: Request):
        level = (await body(request)).get("compatibility")
        await registry.set_level(subject, level if isinstance(level, str) else "")
        return answer({"compatibility": level.upper()})

    @app.delete("/config/{subject:path}")
    async def delete_subject_config(subject: str):
        if subject not in registry.configs:
            return error(40401, f"Subject '{subject}' not found.")
        previous = registry.configs[subject]
        await registry.set_level(subject, None)
        return answer({"compatibilityLevel": previous})

    @app.get("/mode")
    async def get_mode():
        return answer({"mode": registry.instance_mode if registry.instance_mode == "READONLY"
                       else registry.mode(None)})

    @app.put("/mode")
    async def put_mode(request: Request):
        mode = (await body(request)).get("mode")
        await registry.set_mode(None, mode)
        return answer({"mode": mode.upper()})

    @app.get("/mode/{subject:path}")
    async def get_subject_mode(subject: str, defaultToGlobal: str | None = None):  # noqa: N803
        if subject in registry.modes:
            return answer({"mode": registry.modes[subject]})
        if truthy(defaultToGlobal):
            return answer({"mode": registry.mode(None)})
        return error(40409, f"Subject '{subject}' does not have subject-level mode configured")

    @app.delete("/mode/{subject:path}")
    async def delete_subject_mode(subject: str):
        if subject not in registry.modes:
            return error(40401, f"Subject '{subject}' not found.")
        previous = registry.modes[subject]
        await registry.set_mode(subject, None)
        return answer({"mode": previous})

    @app.get("/contexts")
    async def contexts():
        return answer(["."])  # only Confluent's default context

    @app.put("/mode/{subject:path}")
    async def put_subject_mode(subject: str, request: Request):
        mode = (await body(request)).get("mode")
        await registry.set_mode(subject, mode)
        return answer({"mode": mode.upper()})

    return app
