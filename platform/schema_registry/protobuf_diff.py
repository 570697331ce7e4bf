"""Compatibility of Protobuf schemas as Confluent's registry decides it (its protobuf ``SchemaDiff``), over
descriptors: messages and enums matched by name, fields by number; a field's kind (scalar, message, map), its
scalar's wire family, its message type (compared through references of other versions), labels of numeric fields,
oneofs; each difference a type and a path such as ``#/PageView/3``. No I/O.

A side is a :class:`Side`: the schema's descriptor, its dependencies' descriptors, and for each dependency the
(subject, version) of the reference it came from (a type from the same reference version on both sides is not
compared again, as in Confluent).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from google.protobuf import descriptor_pb2

F = descriptor_pb2.FieldDescriptorProto

COMPATIBLE = frozenset({
    "MESSAGE_ADDED", "MESSAGE_MOVED", "ENUM_ADDED", "ENUM_REMOVED", "ENUM_CONST_ADDED", "ENUM_CONST_CHANGED",
    "ENUM_CONST_REMOVED", "FIELD_ADDED", "FIELD_REMOVED", "FIELD_NAME_CHANGED", "FIELD_STRING_OR_BYTES_LABEL_CHANGED",
    "ONEOF_ADDED", "ONEOF_REMOVED", "ONEOF_FIELD_ADDED", "ONEOF_FIELD_MOVED_TO_TOP_LEVEL",
})

_MESSAGES = {  # Confluent's Difference.error(), {path} the path; the two %s the reader's and the writer's role
    "PACKAGE_CHANGED": "The package at '{path}' in the %s schema does not match the package in the %s schema",
    "MESSAGE_REMOVED": "The %s schema is missing a MESSAGE type at path '{path}' in the %s schema",
    "FIELD_KIND_CHANGED": "The type of a field at path '{path}' in the %s schema does not match the %s schema",
    "FIELD_SCALAR_KIND_CHANGED": "The kind of a SCALAR field at path '{path}' in the %s schema does not match its "
                                 "kind in the %s schema",
    "FIELD_NAMED_TYPE_CHANGED": "The type of a MESSAGE field at path '{path}' in the %s schema does not match its "
                                "type in the %s schema",
    "FIELD_NUMERIC_LABEL_CHANGED": "The label for a NUMERIC field at path '{path}' in the %s schema does not match "
                                   "its label in the %s schema",
    "REQUIRED_FIELD_ADDED": "A required field  at path '{path}' in the %s schema is missing in the %s schema",
    "REQUIRED_FIELD_REMOVED": "The %s schema is missing a required field at path: '{path}' in the %s schema",
    "ONEOF_FIELD_REMOVED": "The %s schema is missing a oneof field at path '{path}' in the %s schema",
    "ONEOF_FIELD_MOVED_TO_TOP_LEVEL": "The oneof field at path '{path}' in the %s schema was moved out of its oneof "
                                      "to a top-level field in the %s schema",
    "MULTIPLE_FIELDS_MOVED_TO_ONEOF": "Multiple fields in the oneof at path '{path}' in the %s schema are outside a "
                                      "oneof in the %s schema",
    "FIELD_MOVED_TO_EXISTING_ONEOF": "A field in the oneof at path '{path}' in the %s schema is outside an existing "
                                     "oneof in the %s schema",
}
SCALARS = {F.TYPE_INT32: "GENERAL_NUMBER", F.TYPE_INT64: "GENERAL_NUMBER", F.TYPE_UINT32: "GENERAL_NUMBER",
           F.TYPE_UINT64: "GENERAL_NUMBER", F.TYPE_BOOL: "GENERAL_NUMBER", F.TYPE_ENUM: "GENERAL_NUMBER",
           F.TYPE_SINT32: "SIGNED_NUMBER", F.TYPE_SINT64: "SIGNED_NUMBER", F.TYPE_STRING: "STRING_OR_BYTES",
           F.TYPE_BYTES: "STRING_OR_BYTES", F.TYPE_FIXED32: "FIXED32", F.TYPE_SFIXED32: "FIXED32",
           F.TYPE_FIXED64: "FIXED64", F.TYPE_SFIXED64: "FIXED64", F.TYPE_FLOAT: "FLOAT", F.TYPE_DOUBLE: "DOUBLE"}
MAIN = ("", -1)  # Confluent's dummy reference of the schema's own types


def describe(kind: str, path: str) -> str:
    return '{errorType:"' + kind + '", description:"' + _MESSAGES.get(kind, "").replace("{path}", path) + '"}'


@dataclass
class Info:
    package: str
    syntax: str
    reference: tuple | None  # (subject, version); MAIN for the schema's own types, None for well-known types
    message: descriptor_pb2.DescriptorProto | None = None
    enum: descriptor_pb2.EnumDescriptorProto | None = None

    @property
    def map_entry(self) -> tuple | None:
        if self.message is not None and self.message.options.map_entry and len(self.message.field) == 2:
            return self.message.field[0], self.message.field[1]
        return None


@dataclass
class Side:
    fd: descriptor_pb2.FileDescriptorProto
    dependencies: dict = field(default_factory=dict)  # import name -> descriptor
    references: dict = field(default_factory=dict)  # import name -> (subject, version)

    def types(self) -> dict[str, Info]:
        found: dict[str, Info] = {}
        for name, dep in self.dependencies.items():
            _collect(found, dep, self.references.get(name), dep.package, dep.message_type, dep.enum_type)
        _collect(found, self.fd, MAIN, self.fd.package, self.fd.message_type, self.fd.enum_type)
        return found


def _collect(found: dict, fd, reference, prefix: str, messages, enums) -> None:
    for message in messages:
        name = f"{prefix}.{message.name}" if prefix else message.name
        found[name] = Info(fd.package, fd.syntax, reference, message=message)
        _collect(found, fd, reference, name, message.nested_type, message.enum_type)
    for enum in enums:
        found[f"{prefix}.{enum.name}" if prefix else enum.name] = Info(fd.package, fd.syntax, reference, enum=enum)


class Context:
    def __init__(self, types: tuple[dict, dict], syntaxes: tuple[str, str], path: list, comparing: set,
                 memo: dict | None = None):
        self.types, self.syntaxes, self.path, self.comparing = types, syntaxes, list(path), set(comparing)
        self.memo = {} if memo is None else memo  # referenced message pairs compared once per diff
        self.diffs: list[tuple[str, str]] = []

    def add(self, kind: str, *extra: str) -> None:
        self.diffs.append((kind, "#/" + "/".join([*self.path, *extra])))

    def compatible(self) -> bool:
        return all(kind in COMPATIBLE for kind, _ in self.diffs)

    def info(self, type_name: str, side: int) -> Info | None:
        return self.types[side].get(type_name.lstrip("."))


def differences(original: Side, update: Side) -> list[tuple[str, str]]:
    ctx = Context((original.types(), update.types()), (original.fd.syntax, update.fd.syntax), [], set())
    if original.fd.package != update.fd.package:
        ctx.add("PACKAGE_CHANGED")
    _types(ctx, (original.fd.message_type, original.fd.enum_type), (update.fd.message_type, update.fd.enum_type))
    return ctx.diffs


def incompatible(original: Side, update: Side) -> list[str]:
    return [describe(kind, path) for kind, path in differences(original, update) if kind not in COMPATIBLE]


def _types(ctx: Context, original: tuple, update: tuple) -> None:
    """Messages (map entries aside) and enums of one scope, matched by name."""
    def listed(found):
        return [m for m in found if not m.options.map_entry]

    old_messages, new_messages = listed(original[0]), listed(update[0])
    old_index = {m.name: i for i, m in enumerate(old_messages)}
    new_index = {m.name: i for i, m in enumerate(new_messages)}

    def message(old, new):
        _message(ctx, old, new)
        if old_index.get(old.name) != new_index.get(new.name):
            ctx.add("MESSAGE_MOVED")

    _matched(ctx, old_messages, new_messages, "MESSAGE", message)
    _matched(ctx, original[1], update[1], "ENUM", lambda old, new: _enum(ctx, old, new))


def _matched(ctx: Context, original, update, what: str, compare) -> None:
    """Elements of one kind matched by name: ``<what>_REMOVED``, ``<what>_ADDED`` or ``compare(old, new)``."""
    olds, news = {e.name: e for e in original}, {e.name: e for e in update}
    for name in _names(olds, news):
        ctx.path.append(name)
        if name not in news:
            ctx.add(f"{what}_REMOVED")
        elif name not in olds:
            ctx.add(f"{what}_ADDED")
        else:
            compare(olds[name], news[name])
        ctx.path.pop()


def _names(a: dict, b: dict) -> list:
    return list(a) + [k for k in b if k not in a]


def _enum(ctx: Context, original, update) -> None:
    old = {v.number: v for v in original.value}
    new = {v.number: v for v in update.value}
    for number in sorted(set(old) | set(new)):
        if number not in new:
            ctx.add("ENUM_CONST_REMOVED", str(number))
        elif number not in old:
            ctx.add("ENUM_CONST_ADDED", str(number))
        elif old[number].name != new[number].name:
            ctx.add("ENUM_CONST_CHANGED", str(number))


def _fields(message) -> tuple[dict, dict, dict]:
    """Fields by number, the oneof of each oneof member, and the (non-synthetic) oneofs by name."""
    by_number = {f.number: f for f in message.field}
    oneof_of, oneofs = {}, {}
    for f in message.field:
        if f.HasField("oneof_index") and not f.proto3_optional:
            name = message.oneof_decl[f.oneof_index].name
            oneof_of[f.number] = name
            oneofs.setdefault(name, []).append(f)
    return by_number, oneof_of, oneofs


def _message(ctx: Context, original, update) -> None:
    if id(original) not in ctx.comparing:
        ctx.comparing.add(id(original))
        try:
            _message_fields(ctx, original, update)
        finally:
            ctx.comparing.discard(id(original))
    _types(ctx, (original.nested_type, original.enum_type), (update.nested_type, update.enum_type))


def _message_fields(ctx: Context, original, update) -> None:
    old_fields, old_oneof_of, old_oneofs = _fields(original)
    new_fields, new_oneof_of, new_oneofs = _fields(update)
    deleted = {name for name, members in old_oneofs.items()
               if name not in new_oneofs and not any(m.number in new_fields for m in members)}
    for name, members in new_oneofs.items():
        origins, moved_in = set(), 0
        for member in members:
            if member.number in old_oneof_of:
                origins.add("oneof:" + old_oneof_of[member.number])
            elif member.number in old_fields:
                origins.add(f"field:{member.number}")
                moved_in += 1
        if len(origins) > 1:
            ctx.add("MULTIPLE_FIELDS_MOVED_TO_ONEOF" if moved_in > 1 else "FIELD_MOVED_TO_EXISTING_ONEOF", name)
    for name in sorted(set(old_oneofs) | set(new_oneofs)):
        if name not in new_oneofs:
            ctx.add("ONEOF_REMOVED", name)
        elif name not in old_oneofs:
            ctx.add("ONEOF_ADDED", name)
    for number in sorted(set(old_fields) | set(new_fields)):
        old, new = old_fields.get(number), new_fields.get(number)
        old_oneof, new_oneof = old_oneof_of.get(number), new_oneof_of.get(number)
        if new is None:
            if old_oneof is not None:
                if old_oneof not in deleted:
                    ctx.add("ONEOF_FIELD_REMOVED", old_oneof, str(number))
            else:
                ctx.add("REQUIRED_FIELD_REMOVED" if old.label == F.LABEL_REQUIRED else "FIELD_REMOVED", str(number))
        elif old is None:
            if new_oneof is not None:
                ctx.add("ONEOF_FIELD_ADDED", new_oneof, str(number))
            else:
                ctx.add("REQUIRED_FIELD_ADDED" if new.label == F.LABEL_REQUIRED else "FIELD_ADDED", str(number))
        else:
            if old_oneof is not None and new_oneof is None:
                ctx.add("ONEOF_FIELD_MOVED_TO_TOP_LEVEL", str(number))
            where = [new_oneof, str(number)] if new_oneof is not None else [str(number)]
            ctx.path.extend(where)
            _field(ctx, old, new, old_oneof is not None, new_oneof is not None)
            del ctx.path[-len(where):]


def _label(fd_field, in_oneof: bool, syntax: str):
    """Wire's label, as Confluent reads a descriptor: none in a oneof, none for a proto3 field without one."""
    if in_oneof:
        return None
    if fd_field.proto3_optional:
        return "optional"
    if fd_field.label == F.LABEL_REPEATED:
        return "repeated"
    if syntax == "proto3":
        return None
    return "required" if fd_field.label == F.LABEL_REQUIRED else "optional"


def _field(ctx: Context, old, new, old_in_oneof: bool, new_in_oneof: bool) -> None:
    if old.name != new.name:
        ctx.add("FIELD_NAME_CHANGED")
    old_label = _label(old, old_in_oneof, ctx.syntaxes[0])
    new_label = _label(new, new_in_oneof, ctx.syntaxes[1])
    _labels_and_types(ctx, old_label, new_label, old, new)


def _kind(ctx: Context, f, side: int) -> str:
    if f.type == F.TYPE_MESSAGE:
        info = ctx.info(f.type_name, side)
        return "MAP" if info is not None and info.map_entry else "MESSAGE"
    return "SCALAR"  # enums too


def _labels_and_types(ctx: Context, old_label, new_label, old, new) -> None:
    old_kind, new_kind = _kind(ctx, old, 0), _kind(ctx, new, 1)
    if old_kind != new_kind:
        ctx.add("FIELD_KIND_CHANGED")
    elif old_kind == "SCALAR":
        old_scalar, new_scalar = SCALARS.get(old.type), SCALARS.get(new.type)
        if old_scalar != new_scalar:
            ctx.add("FIELD_SCALAR_KIND_CHANGED")
        elif old_label is not None and new_label is not None and old_label != new_label:
            if old_scalar == "STRING_OR_BYTES":
                ctx.add("FIELD_STRING_OR_BYTES_LABEL_CHANGED")
            else:
                ctx.add("FIELD_NUMERIC_LABEL_CHANGED")
    elif old_kind == "MESSAGE":
        _message_types(ctx, old.type_name, new.type_name)
    else:  # MAP: keys, then values
        old_key, old_value = ctx.info(old.type_name, 0).map_entry
        new_key, new_value = ctx.info(new.type_name, 1).map_entry
        _labels_and_types(ctx, None, None, old_key, new_key)
        _labels_and_types(ctx, None, None, old_value, new_value)


def _message_types(ctx: Context, old_name: str, new_name: str) -> None:
    old_info, new_info = ctx.info(old_name, 0), ctx.info(new_name, 1)
    if old_info is None or new_info is None:
        if old_name != new_name:
            ctx.add("FIELD_NAMED_TYPE_CHANGED")
        return
    old_local = _local(old_name.lstrip("."), old_info.package)
    new_local = _local(new_name.lstrip("."), new_info.package)
    if old_local != new_local:
        ctx.add("FIELD_NAMED_TYPE_CHANGED")
        return
    if old_info.reference is not None and old_info.reference == new_info.reference:
        return
    key = (old_name, new_name, old_info.reference, new_info.reference)
    found = ctx.memo.get(key)
    if found is None:  # the sub-diff's paths start at the type's own name: the same wherever it is met
        sub = Context(ctx.types, (old_info.syntax, new_info.syntax), old_local.split("."), ctx.comparing, ctx.memo)
        _message(sub, old_info.message, new_info.message)
        found = ctx.memo[key] = (list(sub.diffs), sub.compatible())
    known = set(ctx.diffs)
    ctx.diffs.extend(item for item in found[0] if item not in known)  # a type met again adds nothing new
    if not found[1]:
        ctx.add("FIELD_NAMED_TYPE_CHANGED")


def _local(full: str, package: str) -> str:
    return full[len(package) + 1:] if package and full.startswith(package + ".") else full
