"""The text a registry stores and returns for an Avro schema: what Confluent's registry stores, Apache Avro's
``Schema.toString()`` of the parsed schema (its ``canonicalString()``), and, with ``normalize``, Confluent's
``AvroSchema.normalize()`` on top. No I/O; the input has been validated (:func:`compatibility.parse`).

Avro's writer (``Schema.toJson``), rule by rule:

- compact JSON, non-ASCII characters as they are (Jackson's default);
- a primitive without properties is its name (``{"type": "int"}`` is ``"int"``); with properties an object,
  ``type`` first, then the properties in the order they came;
- record/error, enum, fixed: ``type``, ``name`` (short), ``namespace`` only where it differs from the enclosing
  one (``""`` for a type without a namespace inside one with a namespace), ``doc``, then ``fields`` / ``symbols``
  (and the enum's ``default``) / ``size``, the custom properties in their order, ``aliases`` (relative to the
  type's namespace, each once);
- a field: ``name``, ``type``, ``doc``, ``default`` (as written), ``order`` unless ascending (lower case),
  ``aliases``, its custom properties;
- array and map: ``type``, ``items`` / ``values``, properties; a union is a list;
- a named type already written (or a referenced schema's own type) is written as its name: short when its
  namespace is the enclosing one and the short name is not one of Avro's type names, else full; a type nested in
  a referenced schema is written out in full where it is first used (Confluent's ``toString(references)`` knows
  only each reference's own name).

- numbers as Jackson writes them: integers as they are, other numbers as Java's ``Double.toString`` (``1.5``,
  ``1.0E7``, ``1.0E-4``); a ``doc`` that is not a string is dropped (Avro reads it as absent).

``normalize`` (Confluent's ``AvroSchemaUtils.toNormalizedString``, as stored after Avro writes it again): the
custom properties of every type and field sorted by name, with the ``logicalType`` of a type Avro knows first
(a decimal's ``precision``, and its ``scale`` unless 0, right after), objects inside property values and inside
defaults key-sorted at every level, aliases sorted, and an empty ``doc`` of a record, enum or fixed dropped.
Defaults are read against their schema as Avro's ``JacksonUtils.toObject`` reads them: a union by its first
non-null branch that reads the value, into arrays, maps and records, a number of a ``float`` schema rounded to a
32-bit float (written with the fewest digits that read back the same, as Java's ``Float.toString``), an integer
of a ``double`` schema written as a double, and a default Avro reads as none (a text of a number schema) left
out. Field order, symbol order and union order never change.
"""

from __future__ import annotations

import json
import struct
from decimal import Decimal

MISSING = object()  # a default Avro reads as none
PRIMITIVES = frozenset({"null", "boolean", "int", "long", "float", "double", "bytes", "string"})
# Avro's Schema.Type names: a named type called one of these is always written with its namespace (Avro's
# Name.shouldWriteFull), or it would read back as that type
TYPE_NAMES = PRIMITIVES | {"record", "enum", "array", "map", "union", "fixed"}
SCHEMA_RESERVED = frozenset({"doc", "fields", "items", "name", "namespace", "size", "symbols", "values", "type",
                             "aliases"})
ENUM_RESERVED = SCHEMA_RESERVED | {"default"}
FIELD_RESERVED = frozenset({"default", "doc", "name", "order", "type", "aliases"})
# logical types Avro knows: under normalize their logicalType (and a decimal's precision, and its scale unless 0)
# come before the other properties (Confluent's setLogicalProps); an unknown one's properties are sorted with the rest
LOGICAL_TYPES = frozenset({"decimal", "big-decimal", "uuid", "date", "time-millis", "time-micros",
                           "timestamp-millis", "timestamp-micros", "timestamp-nanos", "local-timestamp-millis",
                           "local-timestamp-micros", "local-timestamp-nanos", "duration"})


def write(schema, referenced=(), normalize: bool = False) -> str:
    """The stored text of ``schema`` (parsed JSON); ``referenced``: the parsed JSON of the schemas it references
    (dependencies first), whose named types it may use by name."""
    writer = _Writer(normalize)
    for ref in referenced:
        _collect_definitions(ref, None, writer.definitions)
        top = _top_name(ref)
        if top:  # Confluent's toString(referenced): only each reference's own name is known; a type nested in
            writer.known.add(top)  # one is written out where it is first used, as Avro writes a new type
    _collect_definitions(schema, None, writer.own)
    return dump(writer.schema(schema, None))


def dump(value) -> str:
    """Compact JSON as Jackson writes it: non-ASCII as it is, floating-point numbers as Java's Double.toString."""
    if isinstance(value, dict):
        return "{" + ",".join(f"{json.dumps(k, ensure_ascii=False)}:{dump(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ",".join(dump(v) for v in value) + "]"
    if isinstance(value, float):
        return java_double(value)
    return json.dumps(value, ensure_ascii=False)


def java_double(x: float) -> str:
    """Java's ``Double.toString``: the shortest digits that read back as ``x``, in plain notation with at least
    one digit after the point for 10^-3 <= |x| < 10^7, else as ``d.dddE<exponent>``."""
    if x != x or x in (float("inf"), float("-inf")):
        return json.dumps(x)  # not JSON; left as Python writes it (no schema text holds one)
    if x == 0:
        return "-0.0" if str(x).startswith("-") else "0.0"
    sign, digits, exponent = Decimal(repr(x)).as_tuple()
    text = "".join(map(str, digits)).rstrip("0") or "0"
    point = exponent + len(digits) - 1  # the decimal exponent of the first digit
    if 1e-3 <= abs(x) < 1e7:
        if point >= 0:
            whole, frac = text[:point + 1].ljust(point + 1, "0"), text[point + 1:]
        else:
            whole, frac = "0", "0" * (-point - 1) + text
        body = f"{whole}.{frac or '0'}"
    else:
        body = f"{text[0]}.{text[1:] or '0'}E{point}"
    return ("-" if sign else "") + body


def _float32(x: float) -> float:
    """``x`` as a 32-bit float, with the fewest decimal digits that read back as the same float (what Java's
    ``Float.toString`` writes, and a double read from that text is)."""
    target = struct.pack(">f", x)
    single = struct.unpack(">f", target)[0]
    for precision in range(1, 10):
        shortest = float(f"{single:.{precision}g}")
        if struct.pack(">f", shortest) == target:
            return shortest
    return single


def _full(node: dict, space: str | None) -> tuple[str | None, str]:
    """(namespace, short name) of a named type's definition inside ``space``."""
    name = node["name"]
    if "." in name:
        return _split(name)
    namespace = node.get("namespace")
    return (space if namespace is None else namespace or None), name


def _top_name(node) -> str | None:
    if isinstance(node, dict) and node.get("type") in ("record", "error", "enum", "fixed") and "name" in node:
        own, short = _full(node, None)
        return f"{own}.{short}" if own else short
    return None


def _collect_definitions(node, space: str | None, out: dict) -> None:
    """Every named type a referenced schema defines into ``out``: full name -> (definition, the namespace it was
    defined in)."""
    if isinstance(node, list):
        for branch in node:
            _collect_definitions(branch, space, out)
    elif isinstance(node, dict):
        kind = node.get("type")
        if isinstance(kind, (dict, list)):
            _collect_definitions(kind, space, out)
        elif kind in ("record", "error", "enum", "fixed") and "name" in node:
            own, short = _full(node, space)
            out.setdefault(f"{own}.{short}" if own else short, (node, space))
            for field in node.get("fields") or () if kind in ("record", "error") else ():
                _collect_definitions(field.get("type"), own, out)
        elif kind == "array":
            _collect_definitions(node.get("items"), space, out)
        elif kind == "map":
            _collect_definitions(node.get("values"), space, out)


def _sorted_deep(value):
    if isinstance(value, dict):
        return {k: _sorted_deep(value[k]) for k in sorted(value)}
    if isinstance(value, list):
        return [_sorted_deep(v) for v in value]
    return value


def _split(full: str) -> tuple[str | None, str]:
    space, _, short = full.rpartition(".")
    return space or None, short


class _Writer:
    def __init__(self, normalize: bool):
        self.normalize = normalize
        self.known: set[str] = set()
        self.definitions: dict[str, tuple[dict, str | None]] = {}  # of the referenced schemas' named types
        self.own: dict[str, tuple[dict, str | None]] = {}  # of the schema's own named types (defaults' schemas)

    # ---- schemas ------------------------------------------------------------------------------------------------
    def schema(self, node, space: str | None):
        if isinstance(node, str):
            return self._reference(node, space)
        if isinstance(node, list):
            return [self.schema(branch, space) for branch in node]
        kind = node.get("type")
        if isinstance(kind, (dict, list)):
            return self.schema(kind, space)
        if kind in PRIMITIVES:
            props = self._props(node, SCHEMA_RESERVED)
            return {"type": kind, **props} if props else kind
        if kind in ("record", "error", "enum", "fixed"):
            return self._named(node, kind, space, space)
        if kind == "array":
            return {"type": "array", "items": self.schema(node["items"], space),
                    **self._props(node, SCHEMA_RESERVED)}
        if kind == "map":
            return {"type": "map", "values": self.schema(node["values"], space),
                    **self._props(node, SCHEMA_RESERVED)}
        return self._reference(kind, space)  # {"type": "some.Named"}

    def _named(self, node: dict, kind: str, space: str | None, defined_in: str | None) -> dict:
        """Written inside ``space``; ``defined_in``: the namespace its name resolves in (``space``, but for a type
        of a referenced schema written where it is first used, the one it was defined in)."""
        own, short = _full(node, defined_in)
        full = f"{own}.{short}" if own else short
        self.known.add(full)
        out = {"type": kind, "name": short}
        if own is not None and own != space:
            out["namespace"] = own
        elif own is None and space is not None:
            out["namespace"] = ""
        doc = node.get("doc")
        if isinstance(doc, str) and not (self.normalize and doc == ""):
            out["doc"] = doc
        if kind in ("record", "error"):
            out["fields"] = [self._field(field, own) for field in node.get("fields", [])]
            out.update(self._props(node, SCHEMA_RESERVED))
        elif kind == "enum":
            out["symbols"] = list(node["symbols"])
            if node.get("default") is not None:
                out["default"] = node["default"]
            out.update(self._props(node, ENUM_RESERVED))
        else:
            out["size"] = node["size"]
            out.update(self._props(node, SCHEMA_RESERVED))
        aliases = self._aliases(node.get("aliases"), own)
        if aliases:
            out["aliases"] = aliases
        return out

    def _field(self, field: dict, space: str | None) -> dict:
        out = {"name": field["name"], "type": self.schema(field["type"], space)}
        if isinstance(field.get("doc"), str):
            out["doc"] = field["doc"]
        if "default" in field and (default := self._default(field["default"], field["type"], space)) is not MISSING:
            out["default"] = default
        order = str(field.get("order", "ascending")).lower()
        if order != "ascending":
            out["order"] = order
        aliases = list(dict.fromkeys(field.get("aliases") or ()))
        if aliases:
            out["aliases"] = sorted(aliases) if self.normalize else aliases
        out.update(self._props(field, FIELD_RESERVED))
        return out

    # ---- names, properties, defaults ------------------------------------------------------------------------------
    def _reference(self, name: str, space: str | None) -> str:
        if name in PRIMITIVES:
            return name
        if "." in name:
            full = name
        else:
            inside = f"{space}.{name}" if space else name
            full = inside if inside in self.known or inside in self.definitions else name
        if full not in self.known and full in self.definitions:  # a referenced schema's nested type: defined here
            node, defined_in = self.definitions[full]
            return self._named(node, node["type"], space, defined_in)
        own, short = _split(full)
        return short if own == space and short not in TYPE_NAMES else full

    def _aliases(self, aliases, space: str | None) -> list[str]:
        out = []
        for alias in aliases or ():
            full = alias if "." in alias or not space else f"{space}.{alias}"
            own, short = _split(full)
            written = short if own == space else full
            if written not in out:
                out.append(written)
        return sorted(out) if self.normalize else out

    def _props(self, node: dict, reserved: frozenset) -> dict:
        props = {k: v for k, v in node.items() if k not in reserved}
        if not self.normalize:
            return props
        first = []
        if props.get("logicalType") in LOGICAL_TYPES:
            first = ["logicalType"]
            if props["logicalType"] == "decimal":
                first += [k for k in ("precision",) if k in props] + (["scale"] if props.get("scale", 0) else [])
        rest = sorted(k for k in props if k not in first)
        return {k: _sorted_deep(props[k]) for k in first + rest}

    def _default(self, value, schema, space: str | None):
        """A field's default as written; ``MISSING`` when Avro reads it as none (normalize only)."""
        if not self.normalize:
            return value
        read = self._as_avro_reads(value, schema, space)
        return read if read is MISSING else _sorted_deep(read)

    def _as_avro_reads(self, value, schema, space: str | None):
        """A default as Avro's ``JacksonUtils.toObject(value, schema)`` reads it: numbers by their schema, a
        union by its first non-null branch that reads it; ``MISSING`` where Avro reads nothing (a text for a
        number, a number for a string), as Confluent then writes no default."""
        if value is None:
            return None
        schema, space = self._definition(schema, space)
        if isinstance(schema, list):
            for branch in schema:
                if self._definition(branch, space)[0] == "null":
                    continue
                read = self._as_avro_reads(value, branch, space)
                if read is not MISSING:
                    return read
            return MISSING
        kind = schema.get("type") if isinstance(schema, dict) else schema
        if isinstance(value, bool):
            return value
        if isinstance(value, (int, float)):
            if kind == "float":
                return _float32(float(value))
            if kind == "double" or (isinstance(value, float) and kind is None):
                return float(value)
            return value if isinstance(value, int) and kind in (None, "int", "long") else MISSING
        if isinstance(value, str):
            return value if kind in (None, "string", "enum", "bytes", "fixed") else MISSING
        if isinstance(value, list):
            items = schema.get("items") if kind == "array" else None
            return [None if (v := self._as_avro_reads(x, items, space)) is MISSING else v for x in value]
        if isinstance(value, dict):
            if kind == "map":
                inner = {k: (schema.get("values"), space) for k in value}
            elif kind in ("record", "error"):
                own = _full(schema, space)[0]
                types = {f.get("name"): f.get("type") for f in schema.get("fields") or () if isinstance(f, dict)}
                inner = {k: (types.get(k), own) for k in value}
            else:
                inner = {k: (None, space) for k in value}
            out = {k: self._as_avro_reads(v, *inner[k]) for k, v in value.items()}
            return {k: None if v is MISSING else v for k, v in out.items()}
        return value

    def _definition(self, schema, space: str | None):
        """(``schema`` with a named type's name or a ``{"type": ...}`` wrapper replaced by its definition, the
        namespace names inside it resolve in)."""
        while True:
            if isinstance(schema, dict) and isinstance(schema.get("type"), (dict, list)):
                schema = schema["type"]
                continue
            name = schema.get("type") if isinstance(schema, dict) and len(schema) == 1 else schema
            if not isinstance(name, str) or name in PRIMITIVES or name in TYPE_NAMES or name == "error":
                return schema, space
            for full in ((f"{space}.{name}", name) if space and "." not in name else (name,)):
                found = self.own.get(full) or self.definitions.get(full)
                if found is not None:
                    node, defined_in = found
                    return node, _full(node, defined_in)[0]
            return None, space
