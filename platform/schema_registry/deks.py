"""Confluent's DEK registry (client-side field level encryption): key encryption keys (KEKs), which name a key in a
KMS, and the data encryption keys (DEKs) of a subject wrapped by one of them, per algorithm and version.

Behaviour follows Confluent's ``AbstractDekRegistry``: a KEK is created once (409 40971 afterwards, unless it was
soft-deleted and the same key is sent again, which undeletes it); a DEK of an unshared KEK arrives wrapped by the
client (``encryptedKeyMaterial``, else 42271); for a ``shared`` KEK the registry generates, wraps and unwraps DEKs
itself through the KMS (``kms.py``) and answers their ``keyMaterial`` too. Deleting is soft first, then permanent
(40471 otherwise); a KEK with DEKs cannot be deleted (42272); a DEK of a deleted KEK cannot be undeleted (40472).

Keys live in the registry's own store (``_schemas``) as ``KEK`` and ``DEK`` records, so they are replicated,
replayed, fenced and forwarded to the leader like schemas (Confluent keeps them in a topic of their own,
``_dek_registry_keys``). No tenants and no contexts: the default context only.
"""

from __future__ import annotations

import asyncio
import base64
import time

from schema_registry import kms
from schema_registry.core import NOT_PERMITTED, RegistryError

KEY_NOT_FOUND, KEY_NOT_SOFT_DELETED, KEY_SOFT_DELETED = 40470, 40471, 40472
ALREADY_EXISTS, TOO_MANY_KEYS = 40971, 40972
INVALID_KEY, REFERENCE_EXISTS = 42271, 42272
DEK_GENERATION = 50070
DEFAULT_ALGORITHM = "AES256_GCM"
MIN_VERSION, LATEST = 1, -1
NAME_MAX_LENGTH = 256
KMS_PREFIXES = {"aws-kms": "arn:aws:kms:", "azure-kms": "https://", "gcp-kms": "projects/"}


def not_found(name: str) -> RegistryError:
    return RegistryError(KEY_NOT_FOUND, f"Key '{name}' not found")


def invalid(field: str) -> RegistryError:
    return RegistryError(INVALID_KEY, f"Invalid or missing value for field '{field}' of key")


def check_name(name: str | None) -> None:
    """Confluent's rule for KEK names: a letter or ``_`` first, then letters, digits, ``_`` and ``-``, at most 256."""
    if (not isinstance(name, str) or not name or len(name) > NAME_MAX_LENGTH
            or not (name[0].isalpha() or name[0] == "_")
            or not all(c.isalnum() or c in "_-" for c in name[1:])):
        raise invalid("name")


def check_subject(subject: str | None) -> None:
    if not isinstance(subject, str) or not subject or any(ord(c) < 32 or 127 <= ord(c) < 160 for c in subject):
        raise invalid("subject")


def normalize_kms_type(kms_type: str) -> str:
    low = kms_type.lower()
    for short, full in (("aws", "aws-kms"), ("azure", "azure-kms"), ("gcp", "gcp-kms")):
        if low.startswith(short):
            return full
    return kms_type


def kek_entity(kek: dict) -> dict:
    """A KEK as Confluent's ``Kek`` answers it (null fields left out, ``deleted`` only when true)."""
    out = {"name": kek["name"], "kmsType": kek["kmsType"], "kmsKeyId": kek["kmsKeyId"],
           "kmsProps": kek.get("kmsProps") or {}}
    if kek.get("doc") is not None:
        out["doc"] = kek["doc"]
    out["shared"] = bool(kek.get("shared"))
    out["ts"] = kek.get("ts")
    if kek.get("deleted"):
        out["deleted"] = True
    return out


def dek_entity(dek: dict, key_material: bytes | None = None) -> dict:
    out = {"kekName": dek["kekName"], "subject": dek["subject"], "version": dek["version"],
           "algorithm": dek["algorithm"], "encryptedKeyMaterial": dek["encryptedKeyMaterial"]}
    if key_material is not None:
        out["keyMaterial"] = base64.b64encode(key_material).decode()
    out["ts"] = dek.get("ts")
    if dek.get("deleted"):
        out["deleted"] = True
    return out


class DekRegistry:
    def __init__(self, registry, max_keys: int = 20000):
        self.registry = registry  # schema_registry.core.Registry: its store, its leader's catching up, its mode
        self.max_keys = max_keys  # dek.registry.max.keys
        self.keks: dict[str, dict] = {}
        self.deks: dict[tuple[str, str, str, int], dict] = {}  # (kekName, subject, algorithm, version)
        self._lock = asyncio.Lock()

    # ---- replay of the store --------------------------------------------------------------------------------
    def apply(self, key: dict, value: dict | None) -> None:
        if key.get("keytype") == "KEK":
            if value is None:
                self.keks.pop(key["name"], None)
            else:
                self.keks[key["name"]] = value
        else:
            dek_id = (key["kekName"], key["subject"], key["algorithm"], int(key["version"]))
            if value is None:
                self.deks.pop(dek_id, None)
            else:
                self.deks[dek_id] = value

    # ---- reads ----------------------------------------------------------------------------------------------
    def kek(self, name: str, deleted: bool) -> dict | None:
        kek = self.keks.get(name)
        return kek if kek is not None and (deleted or not kek.get("deleted")) else None

    def kek_names(self, subject_prefixes: list[str], deleted: bool) -> list[str]:
        if not subject_prefixes:
            return sorted(n for n, k in self.keks.items() if deleted or not k.get("deleted"))
        return sorted({d["kekName"] for d in self._deks(deleted=deleted)
                       if any(d["subject"].startswith(p) for p in subject_prefixes)})

    def _deks(self, kek: str | None = None, subject: str | None = None, algorithm: str | None = None,
              deleted: bool = False) -> list[dict]:
        """DEKs in Confluent's key order (KEK, subject, algorithm, version), soft-deleted ones with ``deleted``."""
        return [d for k, d in sorted(self.deks.items())
                if (kek is None or k[0] == kek) and (subject is None or k[1] == subject)
                and (algorithm is None or k[2] == algorithm) and (deleted or not d.get("deleted"))]

    def dek_subjects(self, kek: str, deleted: bool) -> list[str]:
        return sorted({d["subject"] for d in self._deks(kek, deleted=deleted)})

    def dek_versions(self, kek: str, subject: str, algorithm: str | None, deleted: bool) -> list[int]:
        return [d["version"] for d in self._deks(kek, subject, algorithm or DEFAULT_ALGORITHM, deleted)]

    def dek(self, kek: str, subject: str, version: int, algorithm: str | None, deleted: bool) -> dict | None:
        algorithm = algorithm or DEFAULT_ALGORITHM
        if version == LATEST:
            found = self._deks(kek, subject, algorithm, deleted)
            return found[-1] if found else None
        dek = self.deks.get((kek, subject, algorithm, version))
        return dek if dek is not None and (deleted or not dek.get("deleted")) else None

    def key_material(self, dek: dict) -> bytes | None:
        """The raw data key of a shared KEK's DEK (Confluent's ``maybeGenerateRawDek``); None for unshared KEKs."""
        kek = self.keks.get(dek["kekName"])
        if kek is None or not kek.get("shared"):
            return None
        return self._unwrap(kek, dek)

    @staticmethod
    def _unwrap(kek: dict, dek: dict) -> bytes:
        try:
            aead = kms.kms_for(kek["kmsType"], kek.get("kmsProps") or {})
            return aead.decrypt(base64.b64decode(dek["encryptedKeyMaterial"]))
        except (kms.KmsError, ValueError) as exc:
            raise RegistryError(DEK_GENERATION, f"Could not generate raw dek for {dek['subject']}: {exc}") from None

    @staticmethod
    def _wrap(kek: dict, subject: str, raw: bytes) -> str:
        try:
            return base64.b64encode(kms.kms_for(kek["kmsType"], kek.get("kmsProps") or {}).encrypt(raw)).decode()
        except kms.KmsError as exc:
            raise RegistryError(DEK_GENERATION, f"Could not generate encrypted dek for {subject}: {exc}") from None

    # ---- writes ---------------------------------------------------------------------------------------------
    async def _write(self, key: dict, value: dict | None) -> None:
        if self.registry.instance_mode == "READONLY":
            raise RegistryError(NOT_PERMITTED, "This registry instance is read-only (mode=READONLY)")
        if value is not None:
            value = dict(value, ts=int(time.time() * 1000))
        await self.registry.store.write(key, value)

    async def _put_kek(self, kek: dict) -> None:
        await self._write({"keytype": "KEK", "name": kek["name"], "magic": 0}, kek)

    async def _put_dek(self, dek: dict) -> None:
        await self._write(self._dek_key(dek), dek)

    @staticmethod
    def _dek_key(dek: dict) -> dict:
        return {"keytype": "DEK", "kekName": dek["kekName"], "subject": dek["subject"],
                "algorithm": dek["algorithm"], "version": dek["version"], "magic": 0}

    def test_kek(self, kek: dict) -> None:
        """Confluent's ``testKek``: a shared KEK must wrap a data key through its KMS (42271 ``shared`` if not
        shared, 50070 if the KMS refuses)."""
        if not kek.get("shared"):
            raise invalid("shared")
        self._wrap(kek, "__TEST", kms.new_data_key(DEFAULT_ALGORITHM))

    async def create_kek(self, name: str, kms_type: str, kms_key_id: str, kms_props: dict, doc: str | None,
                         shared: bool, deleted: bool = False, test_sharing: bool = False) -> dict:
        kms_type = normalize_kms_type(kms_type)
        kek = {"name": name, "kmsType": kms_type, "kmsKeyId": kms_key_id, "kmsProps": dict(sorted(kms_props.items())),
               "doc": doc, "shared": shared, "deleted": deleted}
        if shared and test_sharing:
            self.test_kek(kek)
        async with self._lock:
            await self.registry._ready()
            if len(self.keks) > self.max_keys:
                raise RegistryError(TOO_MANY_KEYS, f"A maximum of {self.max_keys} keys already exist")
            old = self.keks.get(name)
            if old is not None and (deleted == bool(old.get("deleted")) or not _same_kek(old, kek)):
                raise RegistryError(ALREADY_EXISTS, f"Key '{name}' already exists; use a different value")
            await self._put_kek(kek)
            return self.keks[name]

    async def update_kek(self, name: str, changes: dict, test_sharing: bool = False) -> dict:
        """PUT: ``kmsProps``, ``doc`` and ``shared`` as sent (a field left out keeps its value)."""
        async with self._lock:
            await self.registry._ready()
            old = self.kek(name, deleted=False)
            if old is None:
                raise not_found(name)
            new = dict(old, deleted=False)
            if "kmsProps" in changes:
                new["kmsProps"] = dict(sorted((changes["kmsProps"] or {}).items()))
            if "doc" in changes:
                new["doc"] = changes["doc"]
            if changes.get("shared") is not None:
                new["shared"] = changes["shared"]
            if new["shared"] and test_sharing:
                self.test_kek(new)
            if _same_kek(old, new):
                return old
            await self._put_kek(new)
            return self.keks[name]

    async def delete_kek(self, name: str, permanent: bool) -> None:
        async with self._lock:
            await self.registry._ready()
            if self._deks(name, deleted=permanent):
                raise RegistryError(REFERENCE_EXISTS, f"One or more references exist to the key '{name}'")
            old = self.keks.get(name)
            if old is None:
                return
            if permanent:
                if not old.get("deleted"):
                    raise RegistryError(KEY_NOT_SOFT_DELETED,
                                        f"Key '{name}' was not deleted first before being permanently deleted")
                await self._write({"keytype": "KEK", "name": name, "magic": 0}, None)
            elif not old.get("deleted"):
                await self._put_kek(dict(old, deleted=True))

    async def undelete_kek(self, name: str) -> None:
        async with self._lock:
            await self.registry._ready()
            old = self.keks.get(name)
            if old is not None and old.get("deleted"):
                await self._put_kek(dict(old, deleted=False))

    async def create_dek(self, kek_name: str, subject: str, version: int | None, algorithm: str | None,
                         encrypted: str | None, deleted: bool = False,
                         rewrap: bool = False) -> tuple[dict, bytes | None]:
        """A DEK (version 1 and AES256_GCM unless told) and, for a shared KEK, its raw key material."""
        algorithm = algorithm or DEFAULT_ALGORITHM
        version = MIN_VERSION if version is None else version
        async with self._lock:
            await self.registry._ready()
            kek = self.kek(kek_name, deleted)
            if kek is None:
                raise not_found(kek_name)
            if len(self.deks) > self.max_keys:
                raise RegistryError(TOO_MANY_KEYS, f"A maximum of {self.max_keys} keys already exist")
            dek = {"kekName": kek_name, "subject": subject, "version": version, "algorithm": algorithm,
                   "encryptedKeyMaterial": encrypted, "deleted": deleted}
            old = self.deks.get((kek_name, subject, algorithm, version))
            exists = RegistryError(ALREADY_EXISTS, f"Key '{subject}' already exists; use a different value")
            if not rewrap and old is not None and (deleted == bool(old.get("deleted"))
                                                   or old.get("encryptedKeyMaterial") != encrypted):
                raise exists
            raw = None
            if encrypted is not None:
                if kek.get("shared") and old is not None:
                    raise exists
            elif kek.get("shared"):
                raw = self._unwrap(kek, old) if old is not None else kms.new_data_key(algorithm)
                dek["encryptedKeyMaterial"] = self._wrap(kek, subject, raw)
            else:
                raise invalid("encryptedKeyMaterial")
            if kek.get("shared") and raw is None:
                raw = self._unwrap(kek, dek)  # Confluent checks the round trip before keeping the key
            await self._put_dek(dek)
            return self.deks[(kek_name, subject, algorithm, version)], raw

    async def delete_deks(self, kek_name: str, subject: str, algorithm: str | None, permanent: bool,
                          version: int | None = None) -> None:
        """Every version of the subject's DEKs of ``algorithm``, or the one ``version``: soft, or permanent once
        soft-deleted (40471 otherwise)."""
        async with self._lock:
            await self.registry._ready()
            deks = self._deks(kek_name, subject, algorithm or DEFAULT_ALGORITHM, deleted=True)
            if version is not None:
                deks = [d for d in deks if d["version"] == version]
            elif not permanent:
                deks = [d for d in deks if not d.get("deleted")]
            if permanent:
                if any(not d.get("deleted") for d in deks):
                    raise RegistryError(KEY_NOT_SOFT_DELETED, f"Key '{subject}' was not deleted first before "
                                        "being permanently deleted")
                for d in deks:
                    await self._write(self._dek_key(d), None)
            else:
                for d in deks:
                    if not d.get("deleted"):
                        await self._put_dek(dict(d, deleted=True))

    async def undelete_deks(self, kek_name: str, subject: str, algorithm: str | None,
                            version: int | None = None) -> None:
        async with self._lock:
            await self.registry._ready()
            kek = self.keks.get(kek_name)
            if kek is None:
                return
            if kek.get("deleted"):
                raise RegistryError(KEY_SOFT_DELETED, f"Key '{kek_name}' must be undeleted first")
            for d in self._deks(kek_name, subject, algorithm or DEFAULT_ALGORITHM, deleted=True):
                if (version is None or d["version"] == version) and d.get("deleted"):
                    await self._put_dek(dict(d, deleted=False))


def _same_kek(a: dict, b: dict) -> bool:
    """Confluent's ``KeyEncryptionKey.isEquivalent``: all but ``deleted`` and ``ts``."""
    fields = ("name", "kmsType", "kmsKeyId", "kmsProps", "doc")
    return all((a.get(f) or None) == (b.get(f) or None) for f in fields) and bool(a.get("shared")) == bool(
        b.get("shared"))
