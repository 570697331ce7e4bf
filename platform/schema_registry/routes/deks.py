"""``/dek-registry/v1/keks``: Confluent's DEK registry REST API (``schema_registry.deks``): KEKs, their DEKs per
subject, algorithm and version, soft and permanent deletes, undeletes, ``/test`` of a shared KEK's KMS. Answers
and error codes are Confluent's ``DekRegistryResource``'s; deletes and undeletes answer 204 with no body.

The ``.../versions...`` and ``.../undelete`` routes come before ``/deks/{subject:path}``, so that a subject holding
``/`` still resolves to them, as in ``subjects.py``."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request
from fastapi.responses import Response

from schema_registry.core import Registry, RegistryError
from schema_registry.deks import (
    KMS_PREFIXES,
    LATEST,
    MIN_VERSION,
    check_name,
    check_subject,
    dek_entity,
    invalid,
    kek_entity,
    not_found,
)
from schema_registry.kms import ALGORITHMS
from schema_registry.routes.common import HTTP_REASONS, RegistryDep, answer, body, truthy

router = APIRouter(prefix="/dek-registry/v1/keks")
UNPROCESSABLE = "Unprocessable entity: invalid request body"


def _algorithm(value: str | None) -> str | None:
    """The ``algorithm`` query parameter: a DekFormat, or Jersey's 404 for a value that is not one."""
    if value is not None and value not in ALGORITHMS:
        raise RegistryError(404, HTTP_REASONS[404])
    return value


def _page(items: list, offset: int, limit: int) -> list:
    return items[max(offset, 0):] if limit <= 0 else items[max(offset, 0):max(offset, 0) + limit]


def _kek(registry: Registry, name: str, deleted: bool) -> dict:
    check_name(name)
    kek = registry.deks.kek(name, deleted)
    if kek is None:
        raise not_found(name)
    return kek


def _dek(registry: Registry, name: str, subject: str, version: str | int, algorithm: str | None,
         deleted: bool) -> dict:
    check_subject(subject)
    number = Registry.parse_version(version)
    _kek(registry, name, deleted)
    dek = registry.deks.dek(name, subject, number, algorithm, deleted)
    if dek is None:
        raise not_found(subject)
    return dek


def _typed(data: dict, field: str, kind: type) -> object:
    value = data.get(field)
    if value is not None and not isinstance(value, kind):
        raise RegistryError(422, UNPROCESSABLE)
    return value


def _props(data: dict) -> dict:
    props = _typed(data, "kmsProps", dict) or {}
    if not all(isinstance(v, str) for v in props.values()):
        raise RegistryError(422, UNPROCESSABLE)
    return props


def no_content() -> Response:
    return Response(status_code=204)


@router.get("")
async def kek_names(registry: RegistryDep, subjectPrefix: Annotated[list[str] | None, Query()] = None,  # noqa: N803
                    deleted: str | None = None, offset: int = 0, limit: int = -1):
    return answer(_page(registry.deks.kek_names(subjectPrefix or [], truthy(deleted)), offset, limit))


@router.post("")
async def create_kek(request: Request, registry: RegistryDep, testSharing: str | None = None):  # noqa: N803
    data = await body(request)
    check_name(data.get("name"))
    kms_key_id, kms_type = _typed(data, "kmsKeyId", str), _typed(data, "kmsType", str)
    if not kms_key_id:
        raise invalid("kmsKeyId")
    if kms_type is None:
        raise invalid("kmsType")
    prefixes = {"hcvault": ("https://", "http://")}.get(kms_type) or (KMS_PREFIXES.get(kms_type, ""),)
    if not kms_key_id.startswith(prefixes):
        raise invalid("kmsKeyId")
    kek = await registry.deks.create_kek(data["name"], kms_type, kms_key_id, _props(data), _typed(data, "doc", str),
                                         bool(_typed(data, "shared", bool)), bool(_typed(data, "deleted", bool)),
                                         truthy(testSharing))
    return answer(kek_entity(kek))


@router.get("/{name}")
async def get_kek(name: str, registry: RegistryDep, deleted: str | None = None):
    return answer(kek_entity(_kek(registry, name, truthy(deleted))))


@router.put("/{name}")
async def put_kek(name: str, request: Request, registry: RegistryDep, testSharing: str | None = None):  # noqa: N803
    check_name(name)
    data = await body(request)
    changes = {}
    if "kmsProps" in data:
        changes["kmsProps"] = _props(data)
    if "doc" in data:
        changes["doc"] = _typed(data, "doc", str)
    if "shared" in data:
        changes["shared"] = _typed(data, "shared", bool)
    return answer(kek_entity(await registry.deks.update_kek(name, changes, truthy(testSharing))))


@router.delete("/{name}")
async def delete_kek(name: str, registry: RegistryDep, permanent: str | None = None):
    _kek(registry, name, deleted=True)
    await registry.deks.delete_kek(name, truthy(permanent))
    return no_content()


@router.post("/{name}/undelete")
async def undelete_kek(name: str, registry: RegistryDep):
    _kek(registry, name, deleted=True)
    await registry.deks.undelete_kek(name)
    return no_content()


@router.post("/{name}/test")
async def test_kek(name: str, registry: RegistryDep):
    kek = _kek(registry, name, deleted=False)
    registry.deks.test_kek(kek)
    return answer(kek_entity(kek))


@router.get("/{name}/deks")
async def dek_subjects(name: str, registry: RegistryDep, deleted: str | None = None, offset: int = 0,
                       limit: int = -1):
    _kek(registry, name, truthy(deleted))
    return answer(_page(registry.deks.dek_subjects(name, truthy(deleted)), offset, limit))


async def _create_dek(name: str, subject: str | None, request: Request, registry: Registry, rewrap: bool):
    data = await body(request)
    subject = subject if subject is not None else data.get("subject")
    check_name(name)
    check_subject(subject)
    version = _typed(data, "version", int)
    algorithm = _typed(data, "algorithm", str)
    if algorithm is not None and algorithm not in ALGORITHMS:
        raise RegistryError(422, UNPROCESSABLE)
    dek, raw = await registry.deks.create_dek(name, subject, version, algorithm,
                                              _typed(data, "encryptedKeyMaterial", str),
                                              bool(_typed(data, "deleted", bool)), rewrap)
    return answer(dek_entity(dek, raw))


@router.post("/{name}/deks")
async def create_dek(name: str, request: Request, registry: RegistryDep):
    """Confluent's older form, the subject in the body (deprecated there, still served)."""
    return await _create_dek(name, None, request, registry, rewrap=False)


@router.get("/{name}/deks/{subject:path}/versions/{version}")
async def get_dek_version(name: str, subject: str, version: str, registry: RegistryDep,
                          algorithm: str | None = None, deleted: str | None = None):
    dek = _dek(registry, name, subject, version, _algorithm(algorithm), truthy(deleted))
    return answer(dek_entity(dek, registry.deks.key_material(dek)))


@router.delete("/{name}/deks/{subject:path}/versions/{version}")
async def delete_dek_version(name: str, subject: str, version: str, registry: RegistryDep,
                             algorithm: str | None = None, permanent: str | None = None):
    dek = _dek(registry, name, subject, version, _algorithm(algorithm), deleted=True)
    await registry.deks.delete_deks(name, subject, algorithm, truthy(permanent), dek["version"])
    return no_content()


@router.post("/{name}/deks/{subject:path}/versions/{version}/undelete")
async def undelete_dek_version(name: str, subject: str, version: str, registry: RegistryDep,
                               algorithm: str | None = None):
    dek = _dek(registry, name, subject, version, _algorithm(algorithm), deleted=True)
    await registry.deks.undelete_deks(name, subject, algorithm, dek["version"])
    return no_content()


@router.get("/{name}/deks/{subject:path}/versions")
async def dek_versions(name: str, subject: str, registry: RegistryDep, algorithm: str | None = None,
                       deleted: str | None = None, offset: int = 0, limit: int = -1):
    check_subject(subject)
    _kek(registry, name, truthy(deleted))
    versions = registry.deks.dek_versions(name, subject, _algorithm(algorithm), truthy(deleted))
    return answer(_page(versions, offset, limit))


@router.post("/{name}/deks/{subject:path}/undelete")
async def undelete_deks(name: str, subject: str, registry: RegistryDep, algorithm: str | None = None):
    _dek(registry, name, subject, LATEST, _algorithm(algorithm), deleted=True)
    await registry.deks.undelete_deks(name, subject, algorithm)
    return no_content()


@router.get("/{name}/deks/{subject:path}")
async def get_dek(name: str, subject: str, registry: RegistryDep, algorithm: str | None = None,
                  deleted: str | None = None):
    """Version 1 of the subject's DEK, as Confluent's ``getDek`` answers (not the latest)."""
    dek = _dek(registry, name, subject, MIN_VERSION, _algorithm(algorithm), truthy(deleted))
    return answer(dek_entity(dek, registry.deks.key_material(dek)))


@router.post("/{name}/deks/{subject:path}")
async def create_dek_of_subject(name: str, subject: str, request: Request, registry: RegistryDep,
                                rewrap: str | None = None):
    return await _create_dek(name, subject, request, registry, truthy(rewrap))


@router.delete("/{name}/deks/{subject:path}")
async def delete_deks(name: str, subject: str, registry: RegistryDep, algorithm: str | None = None,
                      permanent: str | None = None):
    _dek(registry, name, subject, LATEST, _algorithm(algorithm), deleted=True)
    await registry.deks.delete_deks(name, subject, algorithm, truthy(permanent))
    return no_content()

