"""A Protobuf descriptor written as text the way Confluent's registry writes one (``ProtobufSchema.toProtoFile`` +
``ProtobufSchemaUtils.toString``): the stored text of a Protobuf schema. Maps are written ``map<K, V>``, not as
Confluent's map-entry message, so that protoc compiles the text back to the same descriptor. No I/O."""

from __future__ import annotations

import logging
from contextvars import ContextVar

from google.protobuf import descriptor_pb2
from google.protobuf.message import DecodeError

log = logging.getLogger("schema_registry.protobuf")
F = descriptor_pb2.FieldDescriptorProto
TYPE_NAMES = {v: k[len("TYPE_"):].lower() for k, v in F.Type.items()}
MAX_TAG = 536870911
MAX_ENUM = 2147483647


def render(fd: descriptor_pb2.FileDescriptorProto, normalize: bool = False, dependencies: dict | None = None) -> str:
    """The descriptor as Confluent writes it (its canonical string for a schema registered as a descriptor).
    ``normalize`` also sorts what Confluent's normalized form sorts: imports, fields and oneofs by number, enum
    constants by number and name, reserved ranges; and drops a proto2 file's ``syntax`` line. With the files it
    imports (``dependencies``, name -> descriptor), custom options are written too, ``(name) = value`` after the
    standard ones, as Confluent writes the options of a schema registered as text."""
    if normalize:
        fd = _sorted(fd)
    token = _custom.set(CustomOptions(fd, dependencies or {}))
    try:
        return _render(fd, normalize)
    finally:
        _custom.reset(token)


def _render(fd: descriptor_pb2.FileDescriptorProto, normalize: bool) -> str:
    out = []
    if fd.syntax == "proto3" or (fd.syntax == "proto2" and not normalize):
        out.append(f'syntax = "{fd.syntax}";\n')
    if fd.package:
        out.append(f"package {fd.package};\n")
    if fd.dependency:
        out.append("\n")
        public = set(fd.public_dependency)
        plain = [d for i, d in enumerate(fd.dependency) if i not in public]
        publics = [d for i, d in enumerate(fd.dependency) if i in public]
        if normalize:
            plain, publics = sorted(set(plain)), sorted(set(publics))
        out += [f'import "{d}";\n' for d in plain]
        out += [f'import public "{d}";\n' for d in publics]
    options = _options(fd.options, FILE_OPTIONS)
    if options:
        out.append("\n")
        out += [f"option {o};\n" for o in options]
    if fd.message_type or fd.enum_type:
        out.append("\n")
        out += [_message(fd, m) for m in fd.message_type]
        out += [_enum(e) for e in fd.enum_type]
    if fd.extension:
        out.append("\n")
        out += _extends(fd, fd.extension)
    if fd.service:
        out.append("\n")
        out += [_service(s) for s in fd.service]
    return "".join(out)


def _sorted(fd: descriptor_pb2.FileDescriptorProto) -> descriptor_pb2.FileDescriptorProto:
    """A copy with fields, enum constants and reserved ranges in Confluent's normalized order. A oneof's place
    follows its first member, and members follow their numbers, so sorting the fields sorts the oneofs too."""
    copy = descriptor_pb2.FileDescriptorProto()
    copy.CopyFrom(fd)

    def messages(found):
        for message in found:
            fields = sorted(message.field, key=lambda f: f.number)
            del message.field[:]
            message.field.extend(fields)
            ranges = sorted(message.reserved_range, key=lambda r: r.start)
            del message.reserved_range[:]
            message.reserved_range.extend(ranges)
            first = {}
            for f in message.field:
                if f.HasField("oneof_index"):
                    first.setdefault(f.oneof_index, f.number)
            order = sorted(range(len(message.oneof_decl)), key=lambda i: first.get(i, MAX_TAG + 1))
            decls = [descriptor_pb2.OneofDescriptorProto() for _ in order]
            for new, old in enumerate(order):
                decls[new].CopyFrom(message.oneof_decl[old])
            del message.oneof_decl[:]
            message.oneof_decl.extend(decls)
            for f in message.field:
                if f.HasField("oneof_index"):
                    f.oneof_index = order.index(f.oneof_index)
            enums(message.enum_type)
            messages(message.nested_type)

    def enums(found):
        for enum in found:
            values = sorted(enum.value, key=lambda v: (v.number, v.name))
            del enum.value[:]
            enum.value.extend(values)
            ranges = sorted(enum.reserved_range, key=lambda r: r.start)
            del enum.reserved_range[:]
            enum.reserved_range.extend(ranges)

    messages(copy.message_type)
    enums(copy.enum_type)
    return copy


FILE_OPTIONS = ("java_package", "java_outer_classname", "java_multiple_files", "java_generate_equals_and_hash",
                "java_string_check_utf8", "optimize_for", "go_package", "cc_generic_services",
                "java_generic_services", "py_generic_services", "deprecated", "cc_enable_arenas",
                "objc_class_prefix", "csharp_namespace", "swift_prefix", "php_class_prefix", "php_namespace",
                "php_metadata_namespace", "ruby_package")
MESSAGE_OPTIONS = ("no_standard_descriptor_accessor", "deprecated")
FIELD_OPTIONS = ("ctype", "packed", "jstype", "deprecated", "debug_redact", "retention")
ENUM_OPTIONS = ("allow_alias", "deprecated")
VALUE_OPTIONS = ("deprecated", "debug_redact")
SERVICE_OPTIONS = ("deprecated",)
METHOD_OPTIONS = ("deprecated", "idempotency_level")


def _value(message, name: str) -> str:
    value = getattr(message, name)
    field = message.DESCRIPTOR.fields_by_name[name]
    if field.enum_type is not None:
        return field.enum_type.values_by_number[value].name
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return f'"{escape(value)}"'
    return str(value)


def _options(message, names: tuple) -> list[str]:
    """The standard options Confluent carries over, in its order, each as ``name = value``, then the custom ones
    the file's imports define."""
    standard = [f"{name} = {_value(message, name)}" for name in names if message.HasField(name)]
    custom = _custom.get()
    return standard + (custom.of(message) if custom is not None else [])


_custom: ContextVar = ContextVar("custom_options", default=None)  # the options reader of the render under way


class CustomOptions:
    """Custom options read with the extensions of the schema's own files (a pool of them and their imports):
    unknown fields to ``descriptor_pb2``'s classes. Written as Confluent writes an option: ``(full.name) = value``,
    a message as ``{`` then ``key: value`` lines ``}``, one element of a repeated option per option."""

    def __init__(self, fd, dependencies: dict):
        self.pool = None
        if not dependencies:
            return
        from google.protobuf import descriptor_pool  # noqa: PLC0415

        pool, added = descriptor_pool.DescriptorPool(), set()

        def add(name: str, file) -> None:
            if name in added:
                return
            added.add(name)
            for dep in file.dependency:
                if dep in dependencies:
                    add(dep, dependencies[dep])
            pool.Add(file)
        try:
            for name, file in dependencies.items():
                add(name, file)
            add(fd.name or "default.proto", fd)
        except (TypeError, ValueError, KeyError) as exc:  # a pool that does not build: standard options only
            log.warning("protobuf: custom options not read (%s)", exc)
            return
        self.pool = pool

    def of(self, options) -> list[str]:
        if self.pool is None or not options.ByteSize():
            return []
        from google.protobuf import message_factory  # noqa: PLC0415

        try:
            cls = message_factory.GetMessageClass(self.pool.FindMessageTypeByName(options.DESCRIPTOR.full_name))
            parsed = cls.FromString(options.SerializeToString())
        except (KeyError, DecodeError):
            return []
        out = []
        for field, value in parsed.ListFields():
            if field.is_extension:
                for one in (value if _repeated(field) else [value]):
                    out.append(f"({field.full_name}) = {_option_value(field, one)}")
        return out


def _repeated(field) -> bool:
    return field.is_repeated


def _option_value(field, value, in_map: bool = False) -> str:
    if field.message_type is not None:
        entries = []
        for sub, sub_value in value.ListFields():
            key = f"[{sub.full_name}]" if sub.is_extension else sub.name
            if sub.message_type is not None and sub.message_type.GetOptions().map_entry:
                items = [_map_item(sub.message_type, k, sub_value[k]) for k in sorted(sub_value)]
                entries.append(f"{key}: " + _listing(items))
            elif _repeated(sub):
                entries.append(f"{key}: " + _listing([_option_value(sub, v, True) for v in sub_value]))
            else:
                entries.append(f"{key}: {_option_value(sub, sub_value, True)}")
        return "{\n" + "".join(_indent(e + ("," if i < len(entries) - 1 else "")) for i, e in enumerate(entries)) + "}"
    if field.enum_type is not None:
        return field.enum_type.values_by_number[value].name if value in field.enum_type.values_by_number else str(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return f'"{escape(value)}"'
    if isinstance(value, bytes):
        return f'"{escape(value.decode("latin-1"))}"'
    return str(value)


def _map_item(entry_type, key, value) -> str:
    """A map entry of an option's message as Confluent writes one ({key, value}; Confluent's own params with
    ``precision``/``scale`` value first, as its toOption does)."""
    key_field, value_field = entry_type.fields_by_name["key"], entry_type.fields_by_name["value"]
    value_text = _option_value(value_field, value, True)
    pairs = [("key", _option_value(key_field, key, True)), ("value", value_text)]
    if key in ("precision", "scale") and entry_type.full_name.startswith("confluent."):
        pairs.reverse()
    return "{\n" + _indent(f"{pairs[0][0]}: {pairs[0][1]},") + _indent(f"{pairs[1][0]}: {pairs[1][1]}") + "}"


def _listing(items: list[str]) -> str:
    return "[\n" + "".join(_indent(v + ("," if i < len(items) - 1 else "")) for i, v in enumerate(items)) + "]"


def escape(text: str) -> str:
    """Confluent's escapeChars."""
    table = {"\a": "\\a", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\v": "\\v",
             "\\": "\\\\", "'": "\\'", '"': '\\"'}
    return "".join(table.get(c, c) for c in text)


def _indent(text: str) -> str:
    lines = text.split("\n")
    if len(lines) > 1 and lines[-1] == "":
        lines.pop()
    return "".join(f"  {line}\n" for line in lines)


def _bracket(options: list[str]) -> str:
    if len(options) == 1:
        return f"[{options[0]}]"
    return "[\n" + "".join(_indent(o + ("," if i < len(options) - 1 else "")) for i, o in enumerate(options)) + "]"


def _range(start: int, end_inclusive: int, limit: int = MAX_TAG) -> str:
    """``n``, or ``a to b`` with ``max`` for the largest number the range may reach (``limit``)."""
    if start == end_inclusive:
        return str(start)
    return f"{start} to {end_inclusive if end_inclusive < limit else 'max'}"


def _reserved(ranges, names, exclusive_end: bool) -> list[str]:
    """Messages' reserved ranges end exclusive, up to field number 2^29 - 1; enums' inclusive, up to 2^31 - 1."""
    limit = MAX_TAG if exclusive_end else MAX_ENUM
    out = [f"reserved {_range(r.start, r.end - 1 if exclusive_end else r.end, limit)};\n" for r in ranges]
    return out + [f'reserved "{n}";\n' for n in names]


def _map_entry(fd, message, field):
    """The nested map-entry message a ``map<K, V>`` field stands for, if it is one."""
    if message is None or field.label != F.LABEL_REPEATED or field.type != F.TYPE_MESSAGE:
        return None
    short = field.type_name.rsplit(".", 1)[-1]
    return next((n for n in message.nested_type if n.name == short and n.options.map_entry
                 and field.type_name.endswith(f".{message.name}.{short}")), None)


def _type(field) -> str:
    return field.type_name if field.type_name else TYPE_NAMES[field.type]


def _label(fd, field, in_oneof: bool) -> str:
    if in_oneof:
        return ""
    if field.proto3_optional:
        return "optional "
    if field.label == F.LABEL_REPEATED:
        return "repeated "
    if fd.syntax == "proto3":
        return ""
    return "required " if field.label == F.LABEL_REQUIRED else "optional "


def _default_json_name(name: str) -> str:
    parts = name.split("_")
    return parts[0] + "".join(p[:1].upper() + p[1:] for p in parts[1:])


def _field(fd, message, field, in_oneof: bool = False) -> str:
    entry = _map_entry(fd, message, field)
    if entry is not None:
        key, value = entry.field[0], entry.field[1]
        head = f"map<{_type(key)}, {_type(value)}> {field.name} = {field.number}"
    else:
        head = f"{_label(fd, field, in_oneof)}{_type(field)} {field.name} = {field.number}"
    options = _options(field.options, FIELD_OPTIONS)
    if field.HasField("default_value") and fd.syntax != "proto3":
        if field.type == F.TYPE_STRING:
            options.append(f'default = "{escape(field.default_value)}"')
        elif field.type == F.TYPE_BYTES:  # the descriptor holds a bytes default C-escaped already
            options.append(f'default = "{field.default_value}"')
        else:
            options.append(f"default = {field.default_value}")
    if field.HasField("json_name") and field.json_name != _default_json_name(field.name):
        options.append(f'json_name = "{escape(field.json_name)}"')
    return head + (f" {_bracket(options)}" if options else "") + ";\n"


def _message(fd, message) -> str:
    out = [f"message {message.name} {{"]
    reserved = _reserved(message.reserved_range, message.reserved_name, exclusive_end=True)
    if reserved:
        out.append("\n")
        out += [_indent(r) for r in reserved]
    options = _options(message.options, MESSAGE_OPTIONS)
    if options:
        out.append("\n")
        out += [_indent(f"option {o};\n") for o in options]
    plain = [f for f in message.field if not f.HasField("oneof_index") or f.proto3_optional]
    if plain:
        out.append("\n")
        out += [_indent(_field(fd, message, f)) for f in plain]
    oneofs = []
    for index, decl in enumerate(message.oneof_decl):
        members = [f for f in message.field if f.HasField("oneof_index") and f.oneof_index == index
                   and not f.proto3_optional]
        if members:
            oneofs.append(f"oneof {decl.name} {{\n" + "".join(_indent(_field(fd, message, f, True))
                                                             for f in members) + "}\n")
    if oneofs:
        out.append("\n")
        out += [_indent(o) for o in oneofs]
    if message.extension_range:
        out.append("\n")
        out += [_indent(f"extensions {_range(r.start, r.end - 1)};\n") for r in message.extension_range]
    if message.extension:
        out.append("\n")
        out += [_indent(e) for e in _extends(fd, message.extension)]
    nested = [n for n in message.nested_type if not n.options.map_entry]
    if nested or message.enum_type:
        out.append("\n")
        out += [_indent(_message(fd, n)) for n in nested]
        out += [_indent(_enum(e)) for e in message.enum_type]
    out.append("}\n")
    return "".join(out)


def _enum(enum) -> str:
    out = [f"enum {enum.name} {{"]
    reserved = _reserved(enum.reserved_range, enum.reserved_name, exclusive_end=False)
    if reserved:
        out.append("\n")
        out += [_indent(r) for r in reserved]
    elif enum.HasField("options") or enum.value:
        out.append("\n")
    out += [_indent(f"option {o};\n") for o in _options(enum.options, ENUM_OPTIONS)]
    for value in enum.value:
        options = _options(value.options, VALUE_OPTIONS)
        out.append(_indent(f"{value.name} = {value.number}" + (f" {_bracket(options)}" if options else "") + ";\n"))
    out.append("}\n")
    return "".join(out)


def _extends(fd, fields) -> list[str]:
    groups: dict[str, list] = {}
    for field in fields:
        groups.setdefault(field.extendee, []).append(field)
    return [f"extend {extendee} {{\n" + "".join(_indent(_field(fd, None, f)) for f in members) + "}\n"
            for extendee, members in groups.items()]


def _service(service) -> str:
    out = [f"service {service.name} {{"]
    options = _options(service.options, SERVICE_OPTIONS)
    if options:
        out.append("\n")
        out += [_indent(f"option {o};\n") for o in options]
    if service.method:
        out.append("\n")
    for method in service.method:
        rpc = (f"rpc {method.name} ({'stream ' if method.client_streaming else ''}{method.input_type}) returns "
               f"({'stream ' if method.server_streaming else ''}{method.output_type})")
        options = _options(method.options, METHOD_OPTIONS)
        if options:
            rpc += " {\n" + "".join(_indent(f"option {o};\n") for o in options) + "}"
        out.append(_indent(rpc + ";\n"))
    out.append("}\n")
    return "".join(out)
