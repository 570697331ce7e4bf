"""The registry itself: subjects, versions, schema ids, compatibility and mode settings, rebuilt from the
records of the ``_schemas`` topic (Confluent's key/value shapes) and changed only by writing such records.

Contexts (:mod:`schema_registry.contexts`): a subject ``:.ctx:name`` is in context ``.ctx``, and schema ids are
per context (``schemas`` is keyed by (context, id)); a subject's config and mode fall back to its context's
(``:.ctx:``, the global one for the default context), then to ``:.__GLOBAL:``.

Domain errors carry Confluent's error codes; the HTTP layer (app.py) only maps them to statuses.
"""

from __future__ import annotations

import asyncio
import functools
import json
from dataclasses import dataclass, field

import logging

from schema_registry import avro_json, contracts, levels
from schema_registry.contexts import DEFAULT, context_of, id_context, split, valid_subject
from schema_registry.contexts import within as _in
from schema_registry.canonical import identity
from schema_registry.guids import parse_guid, schema_guid
from schema_registry.schema_kinds import KINDS
from schema_registry.errors import (  # noqa: F401 (re-exported: the routes and tests import them from here)
    CONTEXT_NOT_EMPTY, FORWARD_ERROR, INCOMPATIBLE, INVALID_LEVEL, INVALID_MODE, INVALID_SCHEMA, INVALID_SUBJECT,
    INVALID_VERSION, NOT_PERMITTED, SCHEMA_NOT_FOUND, STORE_ERROR, STORE_TIMEOUT, SUBJECT_CONFIG_NOT_FOUND,
    SUBJECT_MODE_NOT_FOUND, SUBJECT_NOT_FOUND, SUBJECT_NOT_SOFT_DELETED, SUBJECT_SOFT_DELETED, VERSION_NOT_FOUND,
    VERSION_NOT_SOFT_DELETED, VERSION_SOFT_DELETED, RegistryError)
from schema_registry.scopes import CONFIG_KEYS, LEVELS, MODES, Scopes  # noqa: F401 (re-exported)
from schema_registry.compatibility import (
    InvalidSchema,
    canonical,
    incompatibilities,
    parse,
)

log = logging.getLogger("schema_registry.core")

SCHEMA_TYPES = ("JSON", "PROTOBUF", "AVRO")  # as GET /schemas/types lists them (Confluent's order)
DIFFERENT_TYPE = "Incompatible because of different schema type"  # Confluent's SchemaValidatorBuilder



def normalized_references(references: list[dict] | None) -> list[dict]:
    """Confluent's normalization of a schema's references: sorted by subject, then version, each once."""
    out: list[dict] = []
    for ref in sorted(references or [], key=lambda r: (str(r.get("subject")), int(r.get("version") or 0))):
        if ref not in out:
            out.append(ref)
    return out


@dataclass
class Stored:
    schema_id: int
    text: str
    references: list[dict] = field(default_factory=list)
    schema_type: str = "AVRO"
    metadata: dict | None = None  # Confluent's data contract on the schema (contracts.py)
    rule_set: dict | None = None
    context: str = DEFAULT

    @property
    def key(self) -> tuple[str, int]:
        return self.context, self.schema_id

    @functools.cached_property
    def guid(self) -> str:  # an id's text, references and contract never change
        return schema_guid(self.text, self.references, self.metadata, self.rule_set)


@dataclass
class Version:
    version: int
    schema_id: int
    deleted: bool = False


class Registry(Scopes):
    def __init__(self, store, default_level: str, instance_mode: str):
        self.store = store
        self.default_level = default_level.upper()
        self.instance_mode = instance_mode.upper()
        self.schemas: dict[tuple[str, int], Stored] = {}  # (context, id) -> the schema: ids are per context
        self.subjects: dict[str, dict[int, Version]] = {}
        self.configs: dict[str | None, dict] = {}  # scope (None: global) -> compatibilityLevel and/or normalize
        self.modes: dict[str | None, str] = {}
        self.max_ids: dict[str, int] = {}  # context -> its highest id
        self.contexts: set[str] = set()  # the named contexts (CONTEXT records); the default one always is
        self.guids: dict[str, tuple[str, int]] = {}  # GUID -> the first (context, id) with it (/schemas/guids)
        self._lock = asyncio.Lock()
        self._identities: dict[tuple, str] = {}  # (context, id) -> canonical string (an id's text never changes)
        self._parsed: dict[tuple, object] = {}  # (context, id) -> a JSON or Protobuf schema parsed (protoc is slow)
        self._caught_up: asyncio.Future | None = None  # a new leader's reading of the store to its end
        self.election = None  # schema_registry.election.LeaderElection of a writable instance (set by the service)
        from schema_registry.deks import DekRegistry  # (imports this module)

        self.deks = DekRegistry(self)  # Confluent's DEK registry: its KEK and DEK records share the store

    def become_leader(self) -> None:
        """This instance was just elected: before its first write it reads the store to its end, so the ids it
        allocates follow every id a previous leader wrote (Confluent's registry does the same)."""
        self._caught_up = asyncio.ensure_future(self.store.catch_up())

    async def _ready(self) -> None:
        if self._caught_up is None:
            return
        try:
            await asyncio.shield(self._caught_up)
        except RegistryError:
            self._caught_up = asyncio.ensure_future(self.store.catch_up())  # the next write tries again
            raise
        self._caught_up = None

    # ---- replay of the topic ----------------------------------------------------------------------------------
    def apply(self, key: dict, value: dict | None) -> None:
        kind = key.get("keytype")
        subject = key.get("subject")
        if kind == "SCHEMA":
            versions = self.subjects.setdefault(subject, {})
            if value is None:  # permanent delete of one version
                versions.pop(int(key["version"]), None)
                return
            sid, context = int(value["id"]), context_of(subject)
            self.max_ids[context] = max(self.max_ids.get(context, 0), sid)
            versions[int(value["version"])] = Version(int(value["version"]), sid, bool(value.get("deleted")))
            if (context, sid) not in self.schemas:
                self.schemas[(context, sid)] = stored = Stored(
                    sid, value["schema"], value.get("references") or [], value.get("schemaType", "AVRO"),
                    value.get("metadata"), value.get("ruleSet"), context)
                self.guids.setdefault(stored.guid, stored.key)
        elif kind == "DELETE_SUBJECT" and value is not None:
            for v in self.subjects.get(subject, {}).values():
                if v.version <= int(value["version"]):
                    v.deleted = True
        elif kind == "CONFIG":
            if value is None:
                self.configs.pop(subject, None)
            else:
                self.configs[subject] = {k: value[k] for k in CONFIG_KEYS if value.get(k) is not None}
        elif kind == "MODE":
            if value is None:
                self.modes.pop(subject, None)
            else:
                self.modes[subject] = value["mode"]
        elif kind in ("KEK", "DEK"):
            self.deks.apply(key, value)
        elif kind == "CONTEXT":
            (self.contexts.add if value is not None else self.contexts.discard)(key.get("context"))

    # ---- reads --------------------------------------------------------------------------------------------------
    def schema(self, schema_id: int, subject: str | None = None) -> Stored:
        """The schema of an id, in the context a ``subject`` names (Confluent's ``getSchemaKeyUsingContexts``:
        none, the default context; ``:.ctx:``, that one; a plain name found in no default-context subject with
        that id, the first named context whose subject of that name has it)."""
        found = self.schemas.get((id_context(self, schema_id, subject), schema_id))
        if found is None:
            raise RegistryError(SCHEMA_NOT_FOUND, "Schema not found")
        return found

    def using_contexts(self, subject: str) -> list[str]:
        """Confluent's ``getUsingContexts``: where a subject is looked for by version reads and lookups — a plain
        name in the default context first, then in each named context."""
        context, name = split(subject)
        return [subject] if context != DEFAULT else [subject, *(f":{c}:{name}" for c in sorted(self.contexts))]

    def stored(self, subject: str, v: Version) -> Stored:
        """The schema of a subject's version."""
        return self.schemas[(context_of(subject), v.schema_id)]

    def by_guid(self, guid: str) -> Stored:
        key = self.guids.get(parse_guid(guid) or "")
        if key is None:
            raise RegistryError(SCHEMA_NOT_FOUND, f"Schema {guid} not found")
        return self.schemas[key]

    def subject_names(self, deleted: bool = False) -> list[str]:
        return sorted(s for s, vs in self.subjects.items() if any(deleted or not v.deleted for v in vs.values()))

    def versions(self, subject: str, deleted: bool = False) -> list[Version]:
        found = [v for _, v in sorted(self.subjects.get(subject, {}).items()) if deleted or not v.deleted]
        if not found:
            raise RegistryError(SUBJECT_NOT_FOUND, f"Subject '{subject}' not found.")
        return found

    def version(self, subject: str, ref: str | int, deleted: bool = False) -> Version:
        number = self.parse_version(ref)
        versions = self.versions(subject, deleted=True)
        live = [v for v in versions if deleted or not v.deleted]
        if number == -1:
            if not live:
                raise RegistryError(SUBJECT_NOT_FOUND, f"Subject '{subject}' not found.")
            return live[-1]
        for v in versions:
            if v.version == number and (deleted or not v.deleted):
                return v
        raise RegistryError(VERSION_NOT_FOUND, f"Version {number} not found.")

    @staticmethod
    def parse_version(ref: str | int) -> int:
        if ref in ("latest", "-1", -1):
            return -1
        try:
            number = int(ref)
        except (TypeError, ValueError):
            number = 0
        if number <= 0:
            raise RegistryError(INVALID_VERSION, f"The specified version '{ref}' is not a valid version id. "
                                "Allowed values are between [1, 2^31-1] and the string \"latest\"")
        return number

    def subjects_of(self, schema_id: int, deleted: bool = False, subject: str | None = None) -> list[tuple[str, int]]:
        """(subject, version) holding the id, in the one context :meth:`schema` finds it in."""
        context = self.schema(schema_id, subject).context
        return sorted((s, v.version) for s, vs in self.subjects.items() for v in vs.values()
                      if v.schema_id == schema_id and (deleted or not v.deleted) and context_of(s) == context)

    def referenced_by(self, subject: str, ref: str | int) -> list[int]:
        v = self.version(subject, ref)
        context = context_of(subject)
        return sorted(s.schema_id for s in self.schemas.values()
                      if s.context == context and any(_in(context, r.get("subject")) == subject
                                                      and int(r.get("version", -1)) == v.version
                                                      for r in s.references))

    def _referenced(self, ref: dict, context: str) -> Stored:
        """The stored schema a reference names (a plain subject name in the referring schema's context); 42201
        when there is none."""
        try:
            subject = _in(context, ref["subject"])
            return self.stored(subject, self.version(subject, ref.get("version", -1)))
        except (KeyError, RegistryError):
            raise RegistryError(INVALID_SCHEMA, f"Invalid schema: reference {ref} not found") from None

    def _resolve(self, references: list[dict], context: str = DEFAULT) -> list[str]:
        """Texts of the referenced schemas, dependencies first."""
        out: list[str] = []
        for ref in references or []:
            stored = self._referenced(ref, context)
            out.extend(t for t in self._resolve(stored.references, stored.context) if t not in out)
            if stored.text not in out:
                out.append(stored.text)
        return out

    def _named(self, references: list[dict], context: str = DEFAULT) -> dict[str, str]:
        """A JSON or Protobuf schema's references by the name its ``$ref`` or ``import`` uses, with the references
        of those (by theirs)."""
        out: dict[str, str] = {}
        for ref in references or []:
            stored = self._referenced(ref, context)
            out.update({k: v for k, v in self._named(stored.references, stored.context).items() if k not in out})
            out[str(ref.get("name"))] = stored.text
        return out

    def _versions(self, references: list[dict], context: str = DEFAULT) -> dict[str, tuple[str, int]]:
        """(subject, version) of each reference by its name (``latest`` resolved)."""
        return {str(r.get("name")): (r.get("subject"),
                                     self.version(_in(context, r["subject"]), r.get("version", -1)).version)
                for r in references or []}

    def _parse_stored(self, stored: Stored):
        return KINDS[stored.schema_type].parse_stored(stored.text, self._named(stored.references, stored.context),
                                                      self._versions(stored.references, stored.context))

    def parsed(self, stored: Stored):
        if stored.schema_type == "AVRO":
            return parse(stored.text, self._resolve(stored.references, stored.context))
        found = self._parsed.get(stored.key)
        if found is None:
            found = self._parsed[stored.key] = self._parse_stored(stored)
        return found

    async def warm(self, stored: Stored, quiet: bool = True) -> None:
        """Parse a JSON or Protobuf schema not parsed before off the event loop (protoc is a child process), so
        that :meth:`parsed` finds it. ``quiet``: a schema that does not parse is left for :meth:`parsed` to
        refuse."""
        if stored.schema_type == "AVRO" or stored.key in self._parsed:
            return
        try:
            named, versions = self._named(stored.references, stored.context), self._versions(stored.references,
                                                                                           stored.context)
            self._parsed[stored.key] = await asyncio.to_thread(KINDS[stored.schema_type].parse_stored, stored.text,
                                                               named, versions)
        except (InvalidSchema, RegistryError):
            if not quiet:
                raise

    def serialized(self, stored: Stored, fmt: str | None) -> str:
        """The schema text a ``format`` asks for: ``serialized`` is a Protobuf schema's base64 descriptor (what
        confluent-kafka's ProtobufDeserializer fetches); any other format, or type, the stored text."""
        if fmt == "serialized" and stored.schema_type == "PROTOBUF":
            try:
                return KINDS["PROTOBUF"].serialized(self.parsed(stored))
            except InvalidSchema as exc:
                raise RegistryError(INVALID_SCHEMA, str(exc)) from None
        return stored.text

    async def parsed_previous(self, subject: str, versions: list[Version]) -> list[tuple[Version, Stored, object]]:
        """The parsed schemas of ``versions``, leaving out (with a warning) any stored schema that no longer
        parses under the current rules, as Confluent skips previous schemas it cannot parse. A JSON or Protobuf
        schema not parsed before is parsed off the event loop (protoc is a child process)."""
        out = []
        for v in versions:
            try:
                stored = self.stored(subject, v)
                await self.warm(stored, quiet=False)
                out.append((v, stored, self.parsed(stored)))
            except (InvalidSchema, RegistryError) as exc:
                log.warning("compatibility: skipping schema id %s (version %s) that does not parse: %s",
                            v.schema_id, v.version, exc)
        return out

    def identity_of(self, stored: Stored) -> str:
        cached = self._identities.get(stored.key)
        if cached is not None:
            return cached
        if stored.schema_type != "AVRO":
            self._identities[stored.key] = key = KINDS[stored.schema_type].identity(stored.text)
            return key
        try:
            refs = self._resolve(stored.references, stored.context)
        except RegistryError:
            refs = []
        self._identities[stored.key] = key = identity(stored.text, refs)
        return key

    def key_of(self, text: str, schema_type: str, references: list[dict], context: str = DEFAULT) -> str:
        if schema_type != "AVRO":
            return KINDS[schema_type].identity(text)
        return identity(text, self._resolve(references, context))

    def same(self, stored: Stored, key: str, references: list[dict], schema_type: str = "AVRO",
             contract: tuple | None = (None, None)) -> bool:
        """The stored schema is this one: type, references, text and (unless ``contract`` is None: a lookup
        that sent none) its metadata and rule set, as Confluent's MD5 of a schema covers them."""
        if contract is not None and (stored.metadata, stored.rule_set) != contract:
            return False
        return (stored.schema_type == schema_type and stored.references == (references or [])
                and self.identity_of(stored) == key)

    @staticmethod
    def schema_type(schema_type: str | None) -> str:
        """The request's ``schemaType`` (AVRO when absent); 42201 for one this registry does not handle."""
        kind = (schema_type or "AVRO").upper() if isinstance(schema_type, str) or schema_type is None else None
        if kind not in SCHEMA_TYPES:
            raise RegistryError(INVALID_SCHEMA, f"Invalid schema type {schema_type}: this registry handles "
                                f"{', '.join(SCHEMA_TYPES)}")
        return kind

    def incompatibilities(self, kind: str, new, previous: list, level: str) -> list[str]:
        """Why ``new`` (of schema type ``kind``) cannot follow ``previous`` (parsed_previous's triples) under
        ``level``; a previous schema of another type is Confluent's "different schema type"."""
        if level.upper() == "NONE" or not previous:
            return []
        against = previous if level.upper().endswith("_TRANSITIVE") else previous[-1:]
        if any(stored.schema_type != kind for _, stored, _ in against):
            return [DIFFERENT_TYPE]
        if kind != "AVRO":
            return levels.incompatibilities(new, [(v.version, s.text, p) for v, s, p in against], level,
                                            KINDS[kind].incompatible)
        return incompatibilities(new, [p for _, _, p in against], level)

    async def prepare(self, text: str, schema_type: str | None, references: list[dict], normalize: bool,
                      context: str = DEFAULT):
        """The text to store and the parsed schema; 42201 for a schema that does not parse. A JSON or Protobuf
        schema is parsed off the event loop (its references resolved on it first, in ``context``)."""
        kind = self.schema_type(schema_type)
        if kind != "AVRO":
            named, versions = self._named(references, context), self._versions(references, context)
            try:
                return await asyncio.to_thread(KINDS[kind].prepare, text, named, versions, normalize)
            except InvalidSchema as exc:
                raise RegistryError(INVALID_SCHEMA, str(exc)) from None
        try:
            referenced = self._resolve(references, context)
            schema = parse(canonical(text), referenced)  # validated first: non-JSON and bad schemas are 42201
            try:
                text = avro_json.write(json.loads(text), [json.loads(r) for r in referenced], normalize)
            except (KeyError, TypeError, AttributeError, ValueError) as exc:  # a shape the parsers let through
                log.warning("storing a schema as sent (compact): Avro's writer form failed: %r", exc)
                text = canonical(text)
            return text, schema
        except InvalidSchema as exc:
            raise RegistryError(INVALID_SCHEMA, str(exc)) from None

    async def lookup(self, subject: str, text: str, schema_type: str | None, references: list[dict],
                     normalize: bool, deleted: bool = False, contract: tuple | None = None
                     ) -> tuple[Version, Stored]:
        """The latest version of the subject holding this schema; with ``contract`` (metadata, rule set) sent,
        holding that contract too, else whatever contract the version has."""
        normalize = normalize or self.normalizing(subject)
        references = normalized_references(references) if normalize else references
        versions = self.versions(subject, deleted=deleted)
        kind = self.schema_type(schema_type)
        context = context_of(subject)
        text, _ = await self.prepare(text, kind, references, normalize, context)
        key = self.key_of(text, kind, references, context)
        for v in reversed(versions):
            stored = self.stored(subject, v)
            if self.same(stored, key, references, kind, contract):
                return v, stored
        raise RegistryError(SCHEMA_NOT_FOUND, "Schema not found")

    def latest_with_metadata(self, subject: str, wanted: dict[str, str], deleted: bool = False) -> Version:
        """Confluent's ``getLatestWithMetadata``: the latest version whose metadata properties hold every
        key/value asked (a version without metadata never matches); 40401 without the subject, else 40403."""
        versions = self.versions(subject, deleted=deleted)
        for v in reversed(versions):
            meta = self.stored(subject, v).metadata
            if meta is not None and wanted.items() <= meta.get("properties", {}).items():
                return v
        raise RegistryError(SCHEMA_NOT_FOUND, "Schema not found")

    async def check(self, subject: str, text: str, schema_type: str | None, references: list[dict],
                    version: str | int | None, normalize: bool = False) -> list[str]:
        kind = self.schema_type(schema_type)
        _, new = await self.prepare(text, kind, references, normalize or self.normalizing(subject),
                                    context_of(subject))
        if version is None:
            try:
                existing = self.versions(subject)
            except RegistryError:
                return []
            level = self.level(subject)
        else:
            try:
                existing = [self.version(subject, version)]
            except RegistryError as exc:
                # Confluent: a subject with no versions is compatible with "latest"; any numbered version of it
                # is a version not found (40402), not a subject not found
                if exc.code != SUBJECT_NOT_FOUND:
                    raise
                if self.parse_version(version) == -1:
                    return []
                raise RegistryError(VERSION_NOT_FOUND, f"Version {self.parse_version(version)} not found.") from None
            level = self.level(subject).replace("_TRANSITIVE", "")
        return self.incompatibilities(kind, new, await self.parsed_previous(subject, existing), level)

    # ---- writes ---------------------------------------------------------------------------------------------------
    def _writable(self, subject: str | None) -> None:
        if self.instance_mode == "READONLY":
            raise RegistryError(NOT_PERMITTED, "This registry instance is read-only (mode=READONLY)")
        if self.mode(subject) == "READONLY":
            raise RegistryError(NOT_PERMITTED, f"Subject {subject or '(global)'} is in read-only mode")

    async def register(self, subject: str, text: str, schema_type: str | None, references: list[dict],
                       normalize: bool, metadata: dict | None = None, rule_set: dict | None = None
                       ) -> tuple[Version, Stored]:
        """Register (or find) the schema under the subject: its version there and the stored schema. Metadata or
        a rule set not sent are the latest version's, as Confluent's ``maybeSetMetadataRuleSet`` takes them."""
        if not valid_subject(subject):
            raise RegistryError(INVALID_SUBJECT, f"The specified subject '{subject}' is not a valid.")  # sic
        self._writable(subject)
        normalize = normalize or self.normalizing(subject)
        references = normalized_references(references) if normalize else references
        context = context_of(subject)
        async with self._lock:
            await self._ready()
            kind = self.schema_type(schema_type)
            text, new = await self.prepare(text, kind, references, normalize, context)
            existing = self.subjects.get(subject, {})
            live = [v for _, v in sorted(existing.items()) if not v.deleted]
            key = self.key_of(text, kind, references, context)
            if live:
                previous = self.stored(subject, live[-1])
                metadata = previous.metadata if metadata is None else metadata
                rule_set = previous.rule_set if rule_set is None else rule_set
            config = self.config_in_scope(subject)
            metadata, rule_set = contracts.with_config(config, metadata, rule_set)
            contract = (metadata, rule_set)
            for v in live:
                if self.same(self.stored(subject, v), key, references, kind, contract):
                    return v, self.stored(subject, v)  # already registered: same id, no new version
            group = config.get("compatibilityGroup")  # only versions of the same group's value are checked
            if group is not None:
                ours = (metadata or {}).get("properties", {}).get(group)
                live = [v for v in live
                        if (self.stored(subject, v).metadata or {}).get("properties", {}).get(group) == ours]
            problems = self.incompatibilities(kind, new, await self.parsed_previous(subject, live),
                                              self.level(subject))
            if problems:
                raise RegistryError(INCOMPATIBLE, "Schema being registered is incompatible with an earlier "
                                    "schema for subject \"" + subject + "\", details: " + json.dumps(problems))
            sid = next((s.schema_id for s in self.schemas.values()  # ids are per context
                        if s.context == context and self.same(s, key, references, kind, contract)),
                       self.max_ids.get(context, 0) + 1)
            version = max(existing, default=0) + 1
            value = {"subject": subject, "version": version, "id": sid, "schema": text, "deleted": False}
            if kind != "AVRO":
                value["schemaType"] = kind
            if references:
                value["references"] = references
            if metadata is not None:
                value["metadata"] = metadata
            if rule_set is not None:
                value["ruleSet"] = rule_set
            if context != DEFAULT and context not in self.contexts:  # Confluent's ContextKey, once per context
                await self.store.write({"keytype": "CONTEXT", "tenant": "default", "context": context, "magic": 0},
                                       {"tenant": "default", "context": context})
            await self.store.write({"keytype": "SCHEMA", "subject": subject, "version": version, "magic": 1},
                                   value)
            return (self.subjects.get(subject, {}).get(version) or Version(version, sid),
                    self.schemas.get((context, sid)) or Stored(sid, text, references, kind, metadata, rule_set,
                                                               context))

    async def delete_subject(self, subject: str, permanent: bool) -> list[int]:
        self._writable(subject)
        async with self._lock:
            await self._ready()
            all_versions = self.versions(subject, deleted=True)
            live = [v for v in all_versions if not v.deleted]
            if not permanent:
                if not live:
                    raise RegistryError(SUBJECT_SOFT_DELETED, f"Subject '{subject}' was soft deleted. "
                                        "Set permanent=true to delete permanently")
                await self.store.write({"keytype": "DELETE_SUBJECT", "subject": subject, "magic": 0},
                                       {"subject": subject, "version": live[-1].version})
                return [v.version for v in live]
            if live:
                raise RegistryError(SUBJECT_NOT_SOFT_DELETED, f"Subject '{subject}' was not deleted first "
                                    "before being permanently deleted")
            for v in all_versions:
                await self.store.write({"keytype": "SCHEMA", "subject": subject, "version": v.version, "magic": 1},
                                       None)
            return [v.version for v in all_versions]

    async def delete_version(self, subject: str, ref: str | int, permanent: bool) -> int:
        self._writable(subject)
        async with self._lock:
            await self._ready()
            v = self.version(subject, ref, deleted=True)
            if v.deleted and not permanent:
                raise RegistryError(VERSION_SOFT_DELETED, f"Subject '{subject}' Version {v.version} was soft "
                                    "deleted. Set permanent=true to delete permanently")
            if not permanent:
                stored = self.stored(subject, v)
                value = {"subject": subject, "version": v.version, "id": v.schema_id, "schema": stored.text,
                         "deleted": True}
                if stored.schema_type != "AVRO":
                    value["schemaType"] = stored.schema_type
                if stored.references:
                    value["references"] = stored.references
                await self.store.write({"keytype": "SCHEMA", "subject": subject, "version": v.version,
                                        "magic": 1}, value)
                return v.version
            if not v.deleted:
                raise RegistryError(VERSION_NOT_SOFT_DELETED, f"Subject '{subject}' Version {v.version} was not "
                                    "deleted first before being permanently deleted")
            await self.store.write({"keytype": "SCHEMA", "subject": subject, "version": v.version, "magic": 1},
                                   None)
            return v.version

    async def delete_context(self, context: str) -> None:
        """Confluent's DELETE /contexts/{ctx}: refused (42211) while any subject of it, even a soft-deleted one,
        is left."""
        if self.instance_mode == "READONLY":
            raise RegistryError(NOT_PERMITTED, "This registry instance is read-only (mode=READONLY)")
        await self._ready()
        if any(context_of(s) == context and versions for s, versions in self.subjects.items()):
            raise RegistryError(CONTEXT_NOT_EMPTY, f"The specified context ':{context}:' is not empty.")
        await self.store.write({"keytype": "CONTEXT", "tenant": "default", "context": context, "magic": 0}, None)
