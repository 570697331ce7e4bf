"""Protobuf schemas for the registry (Confluent's ``schemaType`` ``PROTOBUF``): a schema arrives as ``.proto`` text
or as a base64 ``FileDescriptorProto`` (what confluent-kafka's ProtobufSerializer sends); either way it becomes a
descriptor, with the descriptors of the files it imports. :mod:`protobuf_text` writes the stored text from it;
``format=serialized`` serves the descriptor back in base64.

Text is compiled by protoc (grpcio-tools' bundled compiler, run as a child process in a temporary directory):
each reference is written there under its ``name``; Google's well-known types, ``google/type/*`` and Confluent's
own ``confluent/*`` files are found without one, so an ``import`` resolves as it does for Confluent.
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
from schema_registry.protobuf_text import render

F = descriptor_pb2.FieldDescriptorProto
PROTOC_TIMEOUT_S = 30
_BASE64 = re.compile(r"^[A-Za-z0-9+/\s]+={0,2}\s*$")
_WARNING = re.compile(r"^\s*(W\d{4}|\[libprotobuf WARNING|.*warning:)", re.IGNORECASE)  # protoc's, not errors


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
                               if line.strip() and not _WARNING.match(line))
            raise InvalidSchema(f"Invalid schema: {message or 'protoc failed'}")
        found = descriptor_pb2.FileDescriptorSet()
        found.ParseFromString(out.read_bytes())
    files = {fd.name: fd for fd in found.file}
    return files.pop(main), files


def parse(text: str, references: dict[str, str]):
    """(descriptor, dependencies by import name) of a schema given as text or base64; references' texts by name."""
    fd = decode(text)
    if fd is None:
        fd, deps = compile_text(text, references)
        _refuse_groups(fd.message_type)
        return fd, deps
    deps: dict = {}
    pending = list(fd.dependency)
    while pending:
        name = pending.pop()
        if name in deps:
            continue
        if name in references:
            dep, theirs = parse(references[name], {k: v for k, v in references.items() if k != name})
            deps.update(theirs)
        elif is_builtin(name):
            dep = builtin(name)
        else:
            raise InvalidSchema(f"Invalid schema: import {name} is neither a reference's name nor a well-known type")
        deps[name] = dep
        pending += [d for d in dep.dependency if d not in deps]
    _refuse_groups(fd.message_type)
    return fd, deps


def _refuse_groups(messages) -> None:
    for message in messages:
        if any(f.type == F.TYPE_GROUP for f in message.field):
            raise InvalidSchema(f"Invalid schema: message {message.name} has a group field (not supported)")
        _refuse_groups(message.nested_type)


def serialized(fd: descriptor_pb2.FileDescriptorProto) -> str:
    return base64.b64encode(fd.SerializeToString()).decode("ascii")
