"""JSON Schema documents for the registry (Confluent's ``schemaType`` ``JSON``): the stored text, validation, and
the tree of typed nodes that the compatibility diff (:mod:`schema_registry.json_diff`) walks. No I/O.

Confluent's registry stores a JSON schema as Jackson writes the parsed document: compact, keys in the order sent,
numbers exactly as sent (``USE_BIG_DECIMAL_FOR_FLOATS``), non-ASCII unescaped; ``normalize`` sorts the keys. Its
diff runs over the schema objects of the everit loader (draft 7 unless ``$schema`` names another draft), so this
module builds the same shapes from the document:

- ``true`` and ``{}`` accept anything, ``false`` nothing; ``$ref`` stands for its target (siblings ignored, as
  draft 7 says), within the document or in a referenced schema named by the reference's ``name``;
- ``type`` builds one typed node, a list of types an ``anyOf`` of one per type; keywords of a type with no
  ``type`` beside them build that type's node anyway (everit's property sniffing);
- ``enum``, ``const``, ``not``, ``allOf``/``anyOf``/``oneOf`` and ``if`` are nodes of their own;
- when one object yields several nodes they are an ``allOf`` of them (everit's synthetic combined schema).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from decimal import Decimal
from urllib.parse import urldefrag, urljoin

from schema_registry.compatibility import InvalidSchema

OBJECT_KEYWORDS = ("properties", "required", "additionalProperties", "minProperties", "maxProperties",
                   "dependencies", "patternProperties", "propertyNames", "dependentRequired", "dependentSchemas")
ARRAY_KEYWORDS = ("items", "additionalItems", "maxItems", "minItems", "uniqueItems", "contains", "prefixItems")
STRING_KEYWORDS = ("minLength", "maxLength", "pattern", "format")
NUMBER_KEYWORDS = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf")
TYPES = ("string", "integer", "number", "boolean", "null", "object", "array")
MODERN_DRAFTS = ("2019-09", "2020-12")  # where unevaluatedProperties/Items are schemas the diff compares
COMBINERS = ("allOf", "anyOf", "oneOf")


# ---- the stored text ------------------------------------------------------------------------------------------
def loads(text: str):
    """The document, floats kept as :class:`Decimal` so that they are written back as sent; InvalidSchema if
    ``text`` is not JSON."""
    try:
        return json.loads(text, parse_float=Decimal)
    except (TypeError, ValueError) as exc:
        raise InvalidSchema(f"Invalid schema: not JSON ({exc})") from None


def dumps(node, sort_keys: bool = False) -> str:
    """Jackson's compact writing: no spaces, non-ASCII as is, big decimals as their exact text."""
    if isinstance(node, dict):
        items = sorted(node.items()) if sort_keys else node.items()
        return "{" + ",".join(json.dumps(k, ensure_ascii=False) + ":" + dumps(v, sort_keys) for k, v in items) + "}"
    if isinstance(node, list):
        return "[" + ",".join(dumps(v, sort_keys) for v in node) + "]"
    if isinstance(node, Decimal):
        return str(node)
    return json.dumps(node, ensure_ascii=False)


def stored_text(text: str, normalize: bool) -> str:
    return dumps(loads(text), sort_keys=normalize)


def _draft(document) -> str:
    uri = document.get("$schema") if isinstance(document, dict) else None
    for draft in ("draft-04", "draft-06", "draft-07", *MODERN_DRAFTS):
        if isinstance(uri, str) and draft in uri:
            return draft
    return "draft-07"


def validate(document) -> None:
    """InvalidSchema unless ``document`` is a schema of its draft (checked against the draft's meta-schema)."""
    if not isinstance(document, (dict, bool)):
        raise InvalidSchema("Invalid schema: expected an object or boolean at the root, found "
                            f"{type(document).__name__}")
    import jsonschema.validators  # a registry with no JSON schemas does not need it loaded

    plain = json.loads(dumps(document))  # the meta-schema's checks want floats, not Decimals
    try:
        jsonschema.validators.validator_for(plain, default=jsonschema.Draft7Validator).check_schema(plain)
    except jsonschema.exceptions.SchemaError as exc:
        where = "/".join(str(p) for p in exc.path)
        raise InvalidSchema(f"Invalid schema: {exc.message}" + (f" (at #/{where})" if where else "")) from None


# ---- the tree the diff walks --------------------------------------------------------------------------------
@dataclass(eq=False)
class Node:
    """One schema object as everit builds it; identity (not equality) makes a pair in the diff, as in Confluent's
    Context.SchemaPair. ``kind`` is one of true, false, empty, string, number, boolean, null, object, array, enum,
    const, not, combined, conditional."""
    kind: str = "empty"
    raw: object = None
    has_default: bool = False
    common: dict = field(default_factory=dict)  # id, title, description, default (as written): for the diff
    # string
    max_length: int | None = None
    min_length: int | None = None
    pattern: str | None = None
    # number
    maximum: Decimal | None = None
    minimum: Decimal | None = None
    exclusive_maximum: Decimal | None = None
    exclusive_minimum: Decimal | None = None
    multiple_of: Decimal | None = None
    requires_integer: bool = False
    # object
    properties: dict = field(default_factory=dict)
    required: list = field(default_factory=list)
    permits_additional: bool = True
    additional: Node | None = None
    pattern_properties: list = field(default_factory=list)  # (compiled pattern, Node)
    property_dependencies: dict = field(default_factory=dict)
    schema_dependencies: dict = field(default_factory=dict)
    max_properties: int | None = None
    min_properties: int | None = None
    unevaluated: Node | None = None  # unevaluatedProperties / unevaluatedItems (2019-09 and 2020-12)
    # array
    all_items: Node | None = None
    item_schemas: list | None = None
    permits_additional_items: bool = True
    additional_items: Node | None = None
    max_items: int | None = None
    min_items: int | None = None
    unique_items: bool = False
    max_contains: int | None = None
    min_contains: int | None = None
    # enum, const, not, combined
    values: frozenset = frozenset()
    value: str | None = None
    must_not_match: Node | None = None
    criterion: str | None = None
    subschemas: list = field(default_factory=list)

    @property
    def accepts_anything(self) -> bool:  # everit's EmptySchema (TrueSchema extends it)
        return self.kind in ("true", "empty")


def _number(value):
    if isinstance(value, bool) or not isinstance(value, (int, Decimal)):
        return None
    return Decimal(value)


def _count(value):
    return value if isinstance(value, int) and not isinstance(value, bool) else None


class Loader:
    """Builds :class:`Node` trees. ``references`` maps a reference's name to its document (dependencies are
    loaded the same way); a node is built once per (document, JSON pointer), so a recursive ``$ref`` is a cycle
    of the same nodes."""

    def __init__(self, document, references: dict | None = None):
        self.documents = {"": document, **(references or {})}
        self.draft = _draft(document)
        self.base = document.get("$id", "") if isinstance(document, dict) else ""
        self.base = self.base if isinstance(self.base, str) else ""
        self._nodes: dict[tuple[str, str], Node] = {}
        self._following: set[tuple[str, str]] = set()

    def root(self) -> Node:
        return self.load("", "")

    def load(self, doc: str, pointer: str) -> Node:
        key = (doc, pointer)
        found = self._nodes.get(key)
        if found is not None:
            return found
        raw = self._at(doc, pointer)
        if isinstance(raw, dict) and isinstance(raw.get("$ref"), str):
            if key in self._following:
                raise InvalidSchema(f"Invalid schema: $ref cycle at {raw['$ref']}")
            self._following.add(key)
            try:
                target = self.load(*self._resolve(doc, raw["$ref"]))
            finally:
                self._following.discard(key)
            self._nodes[key] = target
            return target
        node = Node(raw=raw)
        self._nodes[key] = node
        self._fill(node, doc, pointer, raw)
        return node

    # -- resolution
    def _at(self, doc: str, pointer: str):
        node = self.documents[doc]
        for part in pointer.split("/")[1:] if pointer else ():
            part = part.replace("~1", "/").replace("~0", "~")
            if isinstance(node, dict) and part not in node and part in ("$defs", "definitions"):
                part = "definitions" if part == "$defs" else "$defs"  # Confluent's mergeDefBuckets
            try:
                node = node[int(part)] if isinstance(node, list) else node[part]
            except (KeyError, IndexError, ValueError, TypeError):
                raise InvalidSchema(f"Invalid schema: $ref target #{pointer} not found") from None
        return node

    def _resolve(self, doc: str, ref: str) -> tuple[str, str]:
        location, fragment = urldefrag(ref)
        if location:
            wanted = urljoin(self.base, location)
            doc = next((name for name in self.documents if name and urljoin(self.base, name) == wanted), None)
            if doc is None:
                raise InvalidSchema(f"Invalid schema: $ref {ref} is neither in the schema nor a reference's name")
        if fragment and not fragment.startswith("/"):
            raise InvalidSchema(f"Invalid schema: $ref {ref}: only JSON pointers are resolved")
        self._at(doc, fragment)
        return doc, fragment

    # -- building
    def _fill(self, node: Node, doc: str, pointer: str, raw) -> None:
        if raw is True or raw is False:
            node.kind = "true" if raw else "false"
            return
        if not isinstance(raw, dict):
            raise InvalidSchema(f"Invalid schema: a schema at #{pointer} is neither an object nor a boolean")
        node.has_default = "default" in raw
        id_keyword = "id" if self.draft == "draft-04" else "$id"
        node.common = {k: dumps(raw[w]) for k, w in (("id", id_keyword), ("title", "title"),
                                                      ("description", "description"), ("default", "default"))
                       if w in raw}
        parts: list[Node] = []
        if "enum" in raw and isinstance(raw["enum"], list):
            parts.append(Node(kind="enum", raw=raw, values=frozenset(dumps(v) for v in raw["enum"])))
        combiners = [c for c in COMBINERS if isinstance(raw.get(c), list)]
        for c in combiners:
            subs = [self.load(doc, f"{pointer}/{c}/{i}") for i in range(len(raw[c]))]
            parts.append(Node(kind="combined", raw=raw, criterion=c, subschemas=subs))
        if "not" in raw:
            parts.append(Node(kind="not", raw=raw, must_not_match=self.load(doc, f"{pointer}/not")))
        if "const" in raw:
            parts.append(Node(kind="const", raw=raw, value=dumps(raw["const"])))
        used: set[str] = set()
        declared = raw.get("type")
        if isinstance(declared, str):
            parts.append(self._typed(declared, doc, pointer, raw, used))
        elif isinstance(declared, list):
            subs = [self._typed(t, doc, pointer, raw, used) for t in declared]
            parts.append(Node(kind="combined", raw=raw, criterion="anyOf", subschemas=subs))
        for kind, keywords in (("object", OBJECT_KEYWORDS), ("array", ARRAY_KEYWORDS),
                               ("number", NUMBER_KEYWORDS), ("string", STRING_KEYWORDS)):
            if any(k in raw and k not in used for k in keywords):
                parts.append(self._typed(kind, doc, pointer, raw, used))
        if "if" in raw:
            parts.append(Node(kind="conditional", raw=raw))
        if len(parts) == 1:
            one = parts[0]
            node.__dict__.update({k: v for k, v in one.__dict__.items() if k not in ("has_default", "common")})
        elif parts:
            node.kind, node.criterion, node.subschemas = "combined", "allOf", parts
        else:
            node.kind = "empty"

    def _typed(self, kind: str, doc: str, pointer: str, raw: dict, used: set) -> Node:
        if kind not in TYPES:
            raise InvalidSchema(f"Invalid schema: unknown type {kind!r} at #{pointer}")
        node = Node(kind="number" if kind == "integer" else kind, raw=raw)
        if kind == "string":
            used.update(STRING_KEYWORDS)
            node.max_length, node.min_length = _count(raw.get("maxLength")), _count(raw.get("minLength"))
            node.pattern = raw.get("pattern") if isinstance(raw.get("pattern"), str) else None
        elif kind in ("number", "integer"):
            used.update(NUMBER_KEYWORDS)
            node.requires_integer = kind == "integer"
            node.maximum, node.minimum = _number(raw.get("maximum")), _number(raw.get("minimum"))
            node.exclusive_maximum = _number(raw.get("exclusiveMaximum"))  # draft 4's boolean form: no limit
            node.exclusive_minimum = _number(raw.get("exclusiveMinimum"))
            node.multiple_of = _number(raw.get("multipleOf"))
        elif kind == "object":
            used.update(OBJECT_KEYWORDS)
            self._object(node, doc, pointer, raw)
        elif kind == "array":
            used.update(ARRAY_KEYWORDS)
            self._array(node, doc, pointer, raw)
        return node

    def _object(self, node: Node, doc: str, pointer: str, raw: dict) -> None:
        properties = raw.get("properties") if isinstance(raw.get("properties"), dict) else {}
        node.properties = {name: self.load(doc, f"{pointer}/properties/{_escape(name)}") for name in properties}
        node.required = [r for r in raw.get("required", []) if isinstance(r, str)] \
            if isinstance(raw.get("required"), list) else []
        extra = raw.get("additionalProperties", True)
        node.permits_additional = extra is not False
        if isinstance(extra, dict):
            node.additional = self.load(doc, f"{pointer}/additionalProperties")
        patterns = raw.get("patternProperties") if isinstance(raw.get("patternProperties"), dict) else {}
        for regex in patterns:
            try:
                compiled = re.compile(regex)
            except re.error as exc:
                raise InvalidSchema(f"Invalid schema: patternProperties {regex!r}: {exc}") from None
            node.pattern_properties.append((compiled, self.load(doc, f"{pointer}/patternProperties/{_escape(regex)}")))
        for keyword in ("dependencies", "dependentRequired", "dependentSchemas"):  # the last two: 2019-09 on
            dependencies = raw.get(keyword) if isinstance(raw.get(keyword), dict) else {}
            for name, dependency in dependencies.items():
                if isinstance(dependency, list):
                    node.property_dependencies[name] = frozenset(d for d in dependency if isinstance(d, str))
                else:
                    node.schema_dependencies[name] = self.load(doc, f"{pointer}/{keyword}/{_escape(name)}")
        node.max_properties, node.min_properties = _count(raw.get("maxProperties")), _count(raw.get("minProperties"))
        node.unevaluated = self._unevaluated(doc, pointer, raw, "unevaluatedProperties")

    def _array(self, node: Node, doc: str, pointer: str, raw: dict) -> None:
        items, extra, extra_at = raw.get("items"), raw.get("additionalItems", True), "additionalItems"
        if self.draft == "2020-12" and (isinstance(raw.get("prefixItems"), list) or isinstance(items, bool)):
            # prefixItems are the positions, items the rest (Confluent's translation of 2020-12)
            extra, extra_at = raw.get("items", True), "items"
            if isinstance(raw.get("prefixItems"), list):
                node.item_schemas = [self.load(doc, f"{pointer}/prefixItems/{i}")
                                     for i in range(len(raw["prefixItems"]))]
        elif isinstance(items, list):
            node.item_schemas = [self.load(doc, f"{pointer}/items/{i}") for i in range(len(items))]
        elif isinstance(items, (dict, bool)):
            node.all_items = self.load(doc, f"{pointer}/items")
        node.permits_additional_items = extra is not False
        if isinstance(extra, dict):
            node.additional_items = self.load(doc, f"{pointer}/{extra_at}")
        node.max_items, node.min_items = _count(raw.get("maxItems")), _count(raw.get("minItems"))
        node.unique_items = raw.get("uniqueItems") is True
        node.max_contains, node.min_contains = _count(raw.get("maxContains")), _count(raw.get("minContains"))
        node.unevaluated = self._unevaluated(doc, pointer, raw, "unevaluatedItems")

    def _unevaluated(self, doc: str, pointer: str, raw: dict, keyword: str) -> Node | None:
        if self.draft not in MODERN_DRAFTS or not isinstance(raw.get(keyword), (dict, bool)):
            return None
        return self.load(doc, f"{pointer}/{keyword}")


def _escape(name: str) -> str:
    return name.replace("~", "~0").replace("/", "~1")


def parse(text: str, references: dict[str, str] | None = None) -> Node:
    """The root :class:`Node` of ``text``; ``references`` maps reference names to their texts. InvalidSchema if
    the text is not JSON, not a schema of its draft, or holds a ``$ref`` that resolves nowhere."""
    document = loads(text)
    validate(document)
    docs = {}
    for name, ref_text in (references or {}).items():
        docs[name] = loads(ref_text)
        validate(docs[name])
    return Loader(document, docs).root()
