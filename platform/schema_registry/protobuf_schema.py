"""Protobuf schemas for the registry (Confluent's ``schemaType`` ``PROTOBUF``): a schema arrives as ``.proto`` text
or as a base64 ``FileDescriptorProto`` (what confluent-kafka's ProtobufSerializer sends); either way it becomes a
descriptor, and the text stored and served is that descriptor written as Confluent writes one
(``ProtobufSchema.toProtoFile`` + ``ProtobufSchemaUtils.toString``). ``format=serialized`` serves the descriptor
back in base64.

Text is compiled by protoc (grpcio-tools' bundled compiler, run as a child process in a temporary directory):
each reference is written there under its ``name``, and Google's well-known types are on protoc's path, so an
``import`` resolves as it does for Confluent. Maps are written ``map<K, V>``, not as Confluent's map-entry message:
the text stays one that protoc compiles back to the same descriptor.
"""

from __future__ import annotations

import base64
import binascii
import importlib
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from google.protobuf import descriptor_pb2
from google.protobuf.message import DecodeError

from schema_registry.compatibility import InvalidSchema

F = descriptor_pb2.FieldDescriptorProto
TYPE_NAMES = {v: k[len("TYPE_"):].lower() for k, v in F.Type.items()}
MAX_TAG = 536870911
PROTOC_TIMEOUT_S = 30
_BASE64 = re.compile(r"^[A-Za-z0-9+/\s]+={0,2}\s*$")


# ---- parsing ----------------------------------------------------------------------------------------------------
def _include_dirs() -> list[str]:
    """protoc's search path besides the schema's own files: protoc's bundled ``google/protobuf/*.proto``, then
    googleapis-common-protos' ``google/type/*.proto``."""
    import google.type  # noqa: PLC0415 (a registry with no Protobuf schemas does not load these)
    import grpc_tools  # noqa: PLC0415
    return [os.path.join(os.path.dirname(grpc_tools.__file__), "_proto"),
            str(Path(google.type.__path__[0]).parent.parent)]


CONFLUENT_MODULES = {  # Confluent's own files, imported without a reference; confluent-kafka ships them compiled
    "confluent/meta.proto": "confluent_kafka.schema_registry.confluent.meta_pb2",
    "confluent/type/decimal.proto": "confluent_kafka.schema_registry.confluent.type.decimal_pb2",
}


def _confluent_file(name: str) -> descriptor_pb2.FileDescriptorProto | None:
    module = CONFLUENT_MODULES.get(name)
    if module is None:
        return None
    fd = descriptor_pb2.FileDescriptorProto()
    importlib.import_module(module).DESCRIPTOR.CopyToProto(fd)
    return fd


def is_builtin(name: str) -> bool:
    """The imports Confluent resolves without a reference: Google's well-known types, ``google/type/*`` and
    Confluent's own ``confluent/*`` files (confluent-kafka's clients register none of them)."""
    return name in CONFLUENT_MODULES or any(os.path.isfile(os.path.join(d, name)) for d in _include_dirs())


def builtin(name: str) -> descriptor_pb2.FileDescriptorProto:
    found = _confluent_file(name)
    if found is not None:
        return found
    path = next(Path(d, name) for d in _include_dirs() if os.path.isfile(os.path.join(d, name)))
    return compile_text(path.read_text(), {}, main=name)[0]


def decode(text: str) -> descriptor_pb2.FileDescriptorProto | None:
    """The descriptor a base64 text holds, or None when the text is not base64 of one."""
    if not _BASE64.match(text):
        return None
    try:
        raw = base64.b64decode("".join(text.split()), validate=True)
        fd = descriptor_pb2.FileDescriptorProto()
        fd.ParseFromString(raw)
    except (binascii.Error, ValueError, DecodeError):
        return None
    return fd if fd.message_type or fd.enum_type or fd.package or fd.syntax or fd.dependency else None


def compile_text(text: str, references: dict[str, str], main: str = "default.proto"):
    """protoc's descriptor of ``text`` and of every file it imports (name -> descriptor); ``references`` maps
    import names to their texts. InvalidSchema with protoc's messages when it does not compile."""
    with tempfile.TemporaryDirectory(prefix="logbus-proto-") as tmp:
        root = Path(tmp, "src")
        confluent = {n: render(_confluent_file(n)) for n in CONFLUENT_MODULES if n not in references}
        for name, ref_text in {**confluent, **references, main: text}.items():
            path = (root / name).resolve()
            if root.resolve() not in path.parents:
                raise InvalidSchema(f"Invalid schema: reference name {name!r} is not a relative path")
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(ref_text)
        out = Path(tmp, "out.pb")
        try:
            done = subprocess.run([sys.executable, "-m", "grpc_tools.protoc", f"-I{root}",
                                   *(f"-I{d}" for d in _include_dirs()),
                                   f"--descriptor_set_out={out}", "--include_imports", main],
                                  capture_output=True, text=True, timeout=PROTOC_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            raise InvalidSchema(f"Invalid schema: protoc took over {PROTOC_TIMEOUT_S} s") from None
        if done.returncode != 0:
            message = " ".join(line.strip() for line in done.stderr.replace(f"{root}/", "").splitlines()
                               if line.strip())
            raise InvalidSchema(f"Invalid schema: {message or 'protoc failed'}")
        found = descriptor_pb2.FileDescriptorSet()
        found.ParseFromString(out.read_bytes())
    files = {fd.name: fd for fd in found.file}
    return files.pop(main), files


def parse(text: str, references: dict[str, str]):
    """(descriptor, dependencies by import name) of a schema given as text or base64; references' texts by name."""
    fd = decode(text)
    if fd is None:
        return compile_text(text, references)
    deps = {}
    for name in fd.dependency:
        if name in references:
            deps.update(parse(references[name], {k: v for k, v in references.items() if k != name})[1])
            deps[name] = parse(references[name], {k: v for k, v in references.items() if k != name})[0]
        elif is_builtin(name):
            deps[name] = builtin(name)
        else:
            raise InvalidSchema(f"Invalid schema: import {name} is neither a reference's name nor a well-known type")
    _refuse_groups(fd.message_type)
    return fd, deps


def _refuse_groups(messages) -> None:
    for message in messages:
        if any(f.type == F.TYPE_GROUP for f in message.field):
            raise InvalidSchema(f"Invalid schema: message {message.name} has a group field (not supported)")
        _refuse_groups(message.nested_type)


def serialized(fd: descriptor_pb2.FileDescriptorProto) -> str:
    return base64.b64encode(fd.SerializeToString()).decode("ascii")


# ---- Confluent's text ---------------------------------------------------------------------------------------------
def render(fd: descriptor_pb2.FileDescriptorProto, normalize: bool = False) -> str:
    """The descriptor as Confluent writes it (its canonical string for a schema registered as a descriptor).
    ``normalize`` also sorts what Confluent's normalized form sorts: imports, fields and oneofs by number, enum
    constants by number and name, reserved ranges; and drops a proto2 file's ``syntax`` line."""
    if normalize:
        fd = _sorted(fd)
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
    """The standard options Confluent carries over, in its order, each as ``name = value``. Custom options are
    unknown fields to a descriptor read without their extensions, and Confluent drops them too."""
    return [f"{name} = {_value(message, name)}" for name in names if message.HasField(name)]


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


def _range(start: int, end_inclusive: int) -> str:
    if start == end_inclusive:
        return str(start)
    return f"{start} to {end_inclusive if end_inclusive < MAX_TAG else 'max'}"


def _reserved(ranges, names, exclusive_end: bool) -> list[str]:
    out = [f"reserved {_range(r.start, r.end - 1 if exclusive_end else r.end)};\n" for r in ranges]
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
        quoted = field.type in (F.TYPE_STRING,)
        options.append(f'default = "{escape(field.default_value)}"' if quoted else f"default = {field.default_value}")
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
