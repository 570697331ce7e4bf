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
- a named type already written (or defined by a referenced schema) is written as its name: short when its
  namespace is the enclosing one, else full.

``normalize`` (Confluent's ``AvroSchemaUtils.toNormalizedString``, as stored after Avro writes it again): the
custom properties of every type and field sorted by name, with ``logicalType`` and its own ``precision`` /
``scale`` first, objects inside property values and inside defaults key-sorted at every level, aliases sorted, an
int default of a float or double field (or union whose first branch is one) written as a float, and an empty
``doc`` of a record, enum or fixed dropped. Field order, symbol order and union order never change.
"""

from __future__ import annotations

import json

PRIMITIVES = frozenset({"null", "boolean", "int", "long", "float", "double", "bytes", "string"})
SCHEMA_RESERVED = frozenset({"doc", "fields", "items", "name", "namespace", "size", "symbols", "values", "type",
                             "aliases"})
ENUM_RESERVED = SCHEMA_RESERVED | {"default"}
FIELD_RESERVED = frozenset({"default", "doc", "name", "order", "type", "aliases"})
LOGICAL_FIRST = ("logicalType", "precision", "scale")


def write(schema, referenced=(), normalize: bool = False) -> str:
    """The stored text of ``schema`` (parsed JSON); ``referenced``: the parsed JSON of the schemas it references
    (dependencies first), whose named types it may use by name."""
    writer = _Writer(normalize)
    for ref in referenced:
        writer.schema(ref, None)  # registers their named types; the text is not needed
    return json.dumps(writer.schema(schema, None), separators=(",", ":"), ensure_ascii=False)


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
            return self._named(node, kind, space)
        if kind == "array":
            return {"type": "array", "items": self.schema(node["items"], space),
                    **self._props(node, SCHEMA_RESERVED)}
        if kind == "map":
            return {"type": "map", "values": self.schema(node["values"], space),
                    **self._props(node, SCHEMA_RESERVED)}
        return self._reference(kind, space)  # {"type": "some.Named"}

    def _named(self, node: dict, kind: str, space: str | None) -> dict:
        name = node["name"]
        if "." in name:
            own, short = _split(name)
        else:
            own, short = node.get("namespace", space) or None, name
        full = f"{own}.{short}" if own else short
        self.known.add(full)
        out = {"type": kind, "name": short}
        if own is not None and own != space:
            out["namespace"] = own
        elif own is None and space is not None:
            out["namespace"] = ""
        doc = node.get("doc")
        if doc is not None and not (self.normalize and doc == ""):
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
        if field.get("doc") is not None:
            out["doc"] = field["doc"]
        if "default" in field:
            out["default"] = self._default(field["default"], field["type"])
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
            full = f"{space}.{name}" if space and f"{space}.{name}" in self.known else name
        own, short = _split(full)
        return short if own == space else full

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
        first = [k for k in LOGICAL_FIRST if k in props] if "logicalType" in props else []
        rest = sorted(k for k in props if k not in first)
        return {k: _sorted_deep(props[k]) for k in first + rest}

    def _default(self, value, schema):
        if not self.normalize:
            return value
        first = schema[0] if isinstance(schema, list) and schema else schema
        kind = first.get("type") if isinstance(first, dict) else first
        if kind in ("float", "double") and isinstance(value, int) and not isinstance(value, bool):
            return float(value)
        return _sorted_deep(value)
