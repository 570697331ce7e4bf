"""The annotated encoder: a kio request entity as a tree of nodes that renders to kio's exact bytes.

Every length, count, varint and tag of the tree is a node a mutation can change (see ``mutations``).
"""

from __future__ import annotations

import dataclasses
import struct
import uuid
from dataclasses import MISSING

from kio.index import load_request_schema
from kio.serial import entity_writer
from kio.serial._implicit_defaults import get_tagged_field_default
from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    PrimitiveField,
    PrimitiveTupleField,
    classify_field,
    get_field_tag,
    is_optional,
)

from .constants import FIXED_FORMATS
from .records import uvarint


@dataclasses.dataclass(eq=False)
class Node:
    """One encoded field. ``kind``: fixed | sized | array | struct | tags.

    Overrides (set by mutations): ``prefix`` replaces the length/count prefix (or the tag count), ``content``
    the bytes of a sized field, ``replace`` the whole rendering; for a tagged entry ``tag_bytes``/``size_bytes``.
    """

    kind: str
    name: str = ""
    kafka_type: str = ""
    data: bytes | None = b""  # fixed: the value's bytes; sized: the content (None: null)
    compact: bool = False
    nullable: bool = False
    width: int = 0  # legacy length prefix width: 2 (string) or 4 (bytes/records)
    children: list = dataclasses.field(default_factory=list)
    null: bool = False  # array / nullable struct
    marker: bool = False  # a nullable struct (KIP-893 int8 marker)
    tag: int | None = None
    prefix: bytes | None = None
    content: bytes | None = None
    replace: bytes | None = None
    tag_bytes: bytes | None = None
    size_bytes: bytes | None = None
    extra: bytes = b""  # tags: raw entries appended after the real ones
    extra_count: int = 0

    def walk(self):
        yield self
        for child in self.children:
            yield from child.walk()

    def true_prefix(self) -> bytes:
        """The prefix as a correct encoder writes it."""
        if self.kind == "sized":
            if self.data is None:
                return b"\x00" if self.compact else struct.pack(">h" if self.width == 2 else ">i", -1)
            n = len(self.data)
            return uvarint(n + 1) if self.compact else struct.pack(">h" if self.width == 2 else ">i", n)
        if self.kind == "array":
            if self.null:
                return b"\x00" if self.compact else struct.pack(">i", -1)
            n = len(self.children)
            return uvarint(n + 1) if self.compact else struct.pack(">i", n)
        if self.kind == "tags":
            return uvarint(len(self.children) + self.extra_count)
        if self.kind == "struct" and self.marker:
            return b"\xff" if self.null else b"\x01"
        return b""


def render(node: Node, out: bytearray, spans: list | None = None) -> None:
    start = len(out)
    if node.replace is not None:
        out += node.replace
    elif node.kind == "fixed":
        out += node.data
    elif node.kind == "sized":
        out += node.prefix if node.prefix is not None else node.true_prefix()
        data = node.content if node.content is not None else node.data
        if data is not None:
            out += data
    elif node.kind in ("array", "struct"):
        out += node.prefix if node.prefix is not None else node.true_prefix()
        if not node.null:
            for child in node.children:
                render(child, out, spans)
    elif node.kind == "tags":
        out += node.prefix if node.prefix is not None else node.true_prefix()
        for child in node.children:
            value = bytearray()
            render(child, value, None)
            out += child.tag_bytes if child.tag_bytes is not None else uvarint(child.tag)
            out += child.size_bytes if child.size_bytes is not None else uvarint(len(value))
            if spans is not None:
                child_start = len(out)
                render(child, out, spans)
                assert bytes(out[child_start:]) == bytes(value)
            else:
                out += value
        out += node.extra
    else:
        raise ValueError(node.kind)
    if spans is not None:
        spans.append((start, len(out), node))


def fixed_bytes(kafka_type: str, value) -> bytes:
    if kafka_type == "uuid":
        return (value or uuid.UUID(int=0)).bytes
    if value is None:  # nullable datetime
        return struct.pack(">q", -1)
    if kafka_type in ("timedelta_i32", "timedelta_i64"):
        value = round(value.total_seconds() * 1000)
    elif kafka_type == "datetime_i64":
        value = round(value.timestamp() * 1000)
    elif kafka_type == "error_code":
        value = value.value
    return struct.pack(FIXED_FORMATS[kafka_type], value)


def primitive_node(name: str, kafka_type: str, value, flexible: bool, optional: bool) -> Node:
    if kafka_type in ("string", "bytes", "records"):
        data = None if value is None else (value.encode() if isinstance(value, str) else bytes(value))
        return Node("sized", name, kafka_type, data, compact=flexible, nullable=optional,
                    width=2 if kafka_type == "string" else 4)
    return Node("fixed", name, kafka_type, fixed_bytes(kafka_type, value), nullable=optional)


def field_node(field: dataclasses.Field, value, flexible: bool, is_tag: bool) -> Node:
    optional = False if is_tag else is_optional(field)
    fclass = classify_field(field)
    kafka_type = field.metadata.get("kafka_type", "")
    if isinstance(fclass, PrimitiveField):
        return primitive_node(field.name, kafka_type, value, flexible, optional)
    if isinstance(fclass, EntityField):
        if value is None:
            return Node("struct", field.name, null=True, marker=True, nullable=True)
        node = encode_entity(fclass.type_, value, field.name)
        node.marker, node.nullable = optional, optional
        return node
    if isinstance(fclass, PrimitiveTupleField):
        items = [] if value is None else [primitive_node(field.name + "[]", kafka_type, v, flexible, False)
                                          for v in value]
    else:
        assert isinstance(fclass, EntityTupleField)
        items = [] if value is None else [encode_entity(fclass.type_, v, field.name + "[]") for v in value]
    return Node("array", field.name, kafka_type, compact=flexible, nullable=optional, null=value is None,
                children=items)


def encode_entity(cls, value, name: str = "") -> Node:
    """The node tree of a kio entity; renders to exactly what ``kio.serial.entity_writer(cls)`` writes."""
    flexible = bool(cls.__flexible__)
    children, tagged = [], []
    for field in dataclasses.fields(cls):
        tag = get_field_tag(field)
        v = getattr(value, field.name)
        if tag is None:
            children.append(field_node(field, v, flexible, False))
            continue
        default = get_tagged_field_default(field)
        if v == field.default or (field.default is MISSING and v == default):
            continue
        node = field_node(field, v, flexible, True)
        node.tag = int(tag)
        tagged.append(node)
    if flexible:
        tagged.sort(key=lambda n: n.tag)
        children.append(Node("tags", name + ".tags", children=tagged))
    return Node("struct", name or cls.__name__, children=children)


def header_node(api_key: int, version: int, correlation_id: int, client_id: str | None, flexible: bool) -> Node:
    children = [Node("fixed", "header.api_key", "int16", struct.pack(">h", api_key)),
                Node("fixed", "header.api_version", "int16", struct.pack(">h", version)),
                Node("fixed", "header.correlation_id", "int32", struct.pack(">i", correlation_id)),
                Node("sized", "header.client_id", "string", None if client_id is None else client_id.encode(),
                     compact=False, nullable=True, width=2)]
    if flexible:
        children.append(Node("tags", "header.tags"))
    return Node("struct", "header", children=children)


def kio_bytes(cls, value) -> bytes:
    import io

    buf = io.BytesIO()
    entity_writer(cls)(buf, value)
    return buf.getvalue()


def _module(api_key: int, version: int):
    import sys

    return sys.modules[load_request_schema(api_key, version).__module__]
