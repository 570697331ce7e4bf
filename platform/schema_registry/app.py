"""The HTTP API: Confluent Schema Registry's routes (``schema_registry.routes``, one router per resource) over the
registry core, and its error bodies (RegistryError becomes ``{"error_code": N, "message": ...}``)."""

from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException

from schema_registry.core import Registry, RegistryError
from schema_registry.routes import compatibility, config, contexts, deks, mode, root, schemas, subjects
from schema_registry.routes.common import CONTENT_TYPE, HTTP_REASONS, answer, error, truthy

__all__ = ["CONTENT_TYPE", "ROUTERS", "answer", "create_app", "error", "truthy"]

# the order of registration: /subjects/{s}/versions... match before /subjects/{s}, whatever '/' {s} holds
ROUTERS = (root.router, schemas.router, subjects.router, compatibility.router, config.router, mode.router,
           deks.router, contexts.router)


def create_app(registry: Registry, max_request_bytes: int = 10 * 1024 * 1024) -> FastAPI:
    """The app: the routes reach ``registry`` and ``max_request_bytes`` through ``app.state``."""
    app = FastAPI(title="logbus schema registry", docs_url=None, redoc_url=None)
    app.state.registry = registry
    app.state.max_request_bytes = max_request_bytes

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

    for router in ROUTERS:
        app.include_router(router)
    return app
