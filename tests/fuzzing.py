"""Hypothesis strategies, an annotated request encoder and mutations for the broker fuzz test.

Valid requests are built from kio's generated request dataclasses (``dataclasses.fields`` and their
``kafka_type``): every advertised (api key, version) can be generated without a hand-written model. They are
encoded twice: by kio's ``entity_writer`` (the reference) and by :func:`encode_entity`, which produces a tree of
nodes (fixed-width values, length-prefixed strings/bytes/records, arrays, structs, tagged-field sections) that
renders to the same bytes and knows where every length, count, varint and tag sits. Mutations change nodes of
that tree (a string length set to 2^31-1, a compact array count of 2^32-2, an over-long varint, an unknown tag
with a huge size...) or the rendered frame (truncation, trailing garbage, a wrong size prefix, byte flips), and
the record batches inside Produce requests field by field (lastOffsetDelta, recordCount, length, magic, codec
bits with garbage payloads, CRC left wrong or recomputed so that it is valid).

:func:`batch_problems` is a strict, independent reading of record batches (Kafka's LogValidator rules that keep
a log readable): the test uses it to tell whether a Produce the broker accepted should have been refused.

Nothing here talks to a broker, and nothing here decodes fuzzed bytes with kio's native reader (it may abort
the process on some inputs: that is what the broker must survive, not the test).
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
import gzip
import struct
import uuid
from dataclasses import MISSING
from typing import Callable

import crc32c
from hypothesis import strategies as st
from kio.index import load_request_schema, load_response_schema
from kio.serial import entity_reader, entity_writer
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

API_VERSIONS = 18

# Topics the fuzzer may name (created before the run), and topics it must never name (the records acknowledged
# before the run live there; the second client's canary topic).
POOL_TOPICS = {"fz-0": 3, "fz-1": 1, "fz-compact": 1}
COMPACTED_TOPIC = "fz-compact"
ADVERSARIAL_TOPICS = ["", ".", "..", "../../etc", "a/b", "x" * 249, "y" * 250, "\u00fc", "nul\x00l", " ",
                      "__consumer_offsets", "fz-0\n", "-", "_"]
GROUPS = ["fz-group", "fz-g2", ""]
CONFIG_NAMES = ["cleanup.policy", "retention.ms", "retention.bytes", "segment.bytes", "segment.ms",
                "max.message.bytes", "min.insync.replicas", "min.cleanable.dirty.ratio", "delete.retention.ms",
                "message.timestamp.type", "unclean.leader.election.enable", "no.such.config", ""]
CONFIG_VALUES = ["1", "0", "-1", "14", "1000", "1048576", "86400000", "compact", "delete", "compact,delete",
                 "0.5", "2.5", "CreateTime", "LogAppendTime", "abc", "99999999999999999999", "-5", ""]

INT_RANGES = {
    "int8": (-(2**7), 2**7 - 1), "int16": (-(2**15), 2**15 - 1), "int32": (-(2**31), 2**31 - 1),
    "int64": (-(2**63), 2**63 - 1), "uint8": (0, 2**8 - 1), "uint16": (0, 2**16 - 1), "uint32": (0, 2**32 - 1),
    "uint64": (0, 2**64 - 1), "timedelta_i32": (-(2**31), 2**31 - 1), "timedelta_i64": (-(2**63), 2**63 - 1),
    "datetime_i64": (-(2**63), 2**63 - 1), "error_code": (-(2**15), 2**15 - 1),
}
FIXED_FORMATS = {"int8": ">b", "int16": ">h", "int32": ">i", "int64": ">q", "uint8": ">B", "uint16": ">H",
                 "uint32": ">I", "uint64": ">Q", "float64": ">d", "bool": ">?", "timedelta_i32": ">i",
                 "timedelta_i64": ">q", "datetime_i64": ">q", "error_code": ">h"}
# Fields a broker may legitimately wait on (long polls, rebalances): valid requests keep them small and the
# mutations leave them alone, so that "no answer within the bound" means a hang, not a long poll asked for.
WAIT_FIELDS = {"timeout", "max_wait", "session_timeout", "rebalance_timeout", "transaction_timeout"}
# APIs whose answer may legitimately wait (Fetch long poll, group rebalances)
WAITING_APIS = {1, 11, 14}


# ---- varints, record batches --------------------------------------------------------------------------------
def uvarint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def varint(value: int) -> bytes:
    """Zigzag varint (records), 64-bit."""
    return uvarint((value << 1) ^ (value >> 63))


def overlong_uvarint(value: int, size: int) -> bytes:
    """``value`` encoded in ``size`` bytes: redundant 0x80 continuation bytes (decoders should refuse)."""
    out = bytearray(uvarint(value))
    out[-1] |= 0x80
    while len(out) < size - 1:
        out.append(0x80)
    out.append(0x00)
    return bytes(out)


def encode_record(key: bytes | None, value: bytes | None, headers=(), offset_delta: int = 0,
                  timestamp_delta: int = 0, attributes: int = 0) -> bytes:
    body = bytearray(struct.pack(">b", attributes))
    body += varint(timestamp_delta) + varint(offset_delta)
    body += varint(-1) if key is None else varint(len(key)) + key
    body += varint(-1) if value is None else varint(len(value)) + value
    body += varint(len(headers))
    for hkey, hvalue in headers:
        body += varint(len(hkey)) + hkey
        body += varint(-1) if hvalue is None else varint(len(hvalue)) + hvalue
    return varint(len(body)) + bytes(body)


def compress(codec: int, data: bytes, xerial: bool = False) -> bytes:
    import cramjam

    if codec == 0:
        return data
    if codec == 1:
        return gzip.compress(data, compresslevel=6)
    if codec == 2:
        if not xerial:
            return bytes(cramjam.snappy.compress_raw(data))
        out = bytearray(b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1))
        for i in range(0, len(data), 32 * 1024):
            chunk = bytes(cramjam.snappy.compress_raw(data[i:i + 32 * 1024]))
            out += struct.pack(">i", len(chunk)) + chunk
        return bytes(out)
    if codec == 3:
        return bytes(cramjam.lz4.compress(data))
    if codec == 4:
        return bytes(cramjam.zstd.compress(data))
    raise ValueError(codec)


_BATCH_AFTER_CRC = struct.Struct(">hiqqqhii")


def build_batch(records: list[tuple] = (), codec: int = 0, *, base_offset: int = 0, leader_epoch: int = -1,
                magic: int = 2, attributes: int | None = None, last_offset_delta: int | None = None,
                base_timestamp: int = 1_700_000_000_000, max_timestamp: int | None = None,
                producer_id: int = -1, producer_epoch: int = -1, base_sequence: int = -1,
                record_count: int | None = None, body: bytes | None = None, crc: int | None = None,
                length: int | None = None, xerial: bool = False) -> bytes:
    """A magic-2 record batch of ``records`` ((key, value, headers) tuples), every header field overridable.

    ``body`` replaces the (compressed) records section; ``crc`` and ``length`` replace the computed values.
    """
    raw = b"".join(encode_record(k, v, h, offset_delta=i, timestamp_delta=i) for i, (k, v, h) in enumerate(records))
    if body is None:
        body = compress(codec, raw, xerial)
    if attributes is None:
        attributes = codec
    if last_offset_delta is None:
        last_offset_delta = max(len(records) - 1, 0)
    if max_timestamp is None:
        max_timestamp = base_timestamp + max(len(records) - 1, 0)
    if record_count is None:
        record_count = len(records)
    after_crc = _BATCH_AFTER_CRC.pack(attributes, last_offset_delta, base_timestamp, max_timestamp, producer_id,
                                      producer_epoch, base_sequence, record_count) + body
    if crc is None:
        crc = crc32c.crc32c(after_crc)
    if length is None:
        length = 4 + 1 + 4 + len(after_crc)
    return struct.pack(">qiibI", base_offset, length, leader_epoch, magic, crc) + after_crc


def fix_crc(batch: bytes, pos: int = 0) -> bytes:
    """The batch at ``pos`` with its CRC recomputed over its declared length (clipped to the bytes there)."""
    buf = bytearray(batch)
    length = struct.unpack_from(">i", buf, pos + 8)[0]
    end = min(len(buf), pos + 12 + max(length, 0))
    struct.pack_into(">I", buf, pos + 17, crc32c.crc32c(bytes(buf[pos + 21:end])))
    return bytes(buf)


@functools.lru_cache(maxsize=None)
def bomb(codec: int, size: int) -> bytes:
    """A small compressed payload that expands to ``size`` zero bytes."""
    if codec == 1:
        import zlib

        comp = zlib.compressobj(9, zlib.DEFLATED, 31)
        chunk = b"\x00" * (1 << 20)
        out = bytearray()
        for _ in range(size >> 20):
            out += comp.compress(chunk)
        return bytes(out + comp.flush())
    if codec == 4:
        import zstandard

        # one frame written in pieces: the content size is not in the header, so the reader cannot know
        cctx = zstandard.ZstdCompressor(level=19)
        obj = cctx.compressobj()
        chunk = b"\x00" * (1 << 20)
        out = bytearray()
        for _ in range(size >> 20):
            out += obj.compress(chunk)
        return bytes(out + obj.flush())
    return compress(codec, b"\x00" * size)


def bomb_batch(codec: int, size: int, record_count: int = 1) -> bytes:
    return build_batch([(b"k", b"v", ())], codec, body=bomb(codec, size), record_count=record_count)


# ---- the annotated encoder ------------------------------------------------------------------------------------
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


# ---- valid requests: hypothesis strategies from the kio dataclasses --------------------------------------------
def _ints(kafka_type: str):
    lo, hi = INT_RANGES[kafka_type]
    return st.one_of(st.integers(max(lo, -1), min(hi, 3)), st.sampled_from([lo, hi]), st.integers(lo, hi))


def _small_text(max_size: int = 12):
    return st.text(max_size=max_size)


def _weighted(*pairs):
    """``one_of`` where each strategy appears ``weight`` times."""
    out = []
    for weight, strategy in pairs:
        out.extend([strategy] * weight)
    # (st.one_of does not weight repeated branches: pick the branch with sampled_from, which is near uniform)
    return st.sampled_from(out).flatmap(lambda strategy: strategy)


TOPIC_NAMES = _weighted((6, st.sampled_from(sorted(POOL_TOPICS))), (1, st.sampled_from(ADVERSARIAL_TOPICS)),
                        # valid random names from a tiny alphabet: auto-creation stays bounded (39 names)
                        (1, st.text(alphabet="ab-", min_size=1, max_size=3)),
                        (1, _small_text().map(lambda s: "\u00e9" + s)))
GROUP_IDS = _weighted((4, st.sampled_from(GROUPS)), (1, _small_text(8)))
PARTITIONS = _weighted((6, st.integers(0, 3)), (1, st.sampled_from([-1, 2**31 - 1, -(2**31)])),
                       (1, st.integers(-(2**31), 2**31 - 1)))


def _ms(lo: int, hi: int, kafka_type: str = "timedelta_i32"):
    return st.integers(lo, hi).map(lambda n: datetime.timedelta(milliseconds=n))


@st.composite
def consumer_protocol_bytes(draw, assignment: bool = False):
    """ConsumerProtocolSubscription / Assignment bytes, lengths and counts sometimes lying."""
    if draw(st.integers(0, 4)) == 0:
        return draw(st.binary(max_size=24))
    topics = draw(st.lists(st.sampled_from(sorted(POOL_TOPICS) + ["x"]), max_size=3))
    count = draw(st.sampled_from([len(topics)] * 4 + [2**31 - 1, -1, len(topics) + 1, 1_000_000]))
    out = bytearray(struct.pack(">hi", draw(st.integers(-1, 3)), count))
    for name in topics:
        n = draw(st.sampled_from([len(name)] * 4 + [-1, -2, 32767]))
        out += struct.pack(">h", n) + name.encode()
        if assignment:
            parts = draw(st.lists(st.integers(0, 3), max_size=3))
            pc = draw(st.sampled_from([len(parts)] * 4 + [-1, 2**31 - 1, 2**20]))
            out += struct.pack(">i", pc) + b"".join(struct.pack(">i", p) for p in parts)
    out += draw(st.binary(max_size=8))
    return bytes(out)


@st.composite
def record_values(draw):
    records = draw(st.lists(st.tuples(
        st.one_of(st.none(), st.binary(max_size=8)),
        st.one_of(st.none(), st.binary(max_size=48)),
        st.lists(st.tuples(st.binary(max_size=6), st.one_of(st.none(), st.binary(max_size=6))), max_size=2)),
        min_size=1, max_size=5))
    return [(k, v, tuple(h)) for k, v, h in records]


@st.composite
def valid_batch(draw):
    records = draw(record_values())
    codec = draw(st.sampled_from([0, 0, 0, 1, 2, 3, 4]))
    idempotent = draw(st.integers(0, 5)) == 0
    return build_batch(records, codec, xerial=codec == 2 and draw(st.booleans()),
                       producer_id=draw(st.integers(0, 1000)) if idempotent else -1,
                       producer_epoch=0 if idempotent else -1,
                       base_sequence=draw(st.integers(0, 10)) if idempotent else -1,
                       base_timestamp=draw(st.sampled_from([1_700_000_000_000, 0, -1, 2**62])))


@st.composite
def record_sets(draw):
    """The ``records`` bytes of a Produce partition: real batches mostly, sometimes garbage, empty or null."""
    kind = draw(st.sampled_from(["batch"] * 8 + ["two", "garbage", "empty", "null", "batch+junk"]))
    if kind == "batch":
        return draw(valid_batch())
    if kind == "two":
        return draw(valid_batch()) + draw(valid_batch())
    if kind == "garbage":
        return draw(st.binary(min_size=1, max_size=80))
    if kind == "empty":
        return b""
    if kind == "null":
        return None
    return draw(valid_batch()) + draw(st.binary(min_size=1, max_size=70))


def _hinted(owner, field, kafka_type: str, optional: bool):
    """A strategy for fields whose meaning matters (topic names, partitions, timeouts...), or None."""
    name, owner_name = field.name, owner.__name__
    if kafka_type == "records":
        return record_sets()
    if kafka_type == "string":
        if name in ("topic", "topic_names", "resource_name") or (name == "name" and "Topic" in owner_name):
            return TOPIC_NAMES
        if name == "name" and "Config" in owner_name:
            return _weighted((4, st.sampled_from(CONFIG_NAMES)), (1, _small_text()))
        if name == "configuration_keys":
            return st.sampled_from(CONFIG_NAMES)
        if name == "value" and "Config" in owner_name:
            return _weighted((4, st.sampled_from(CONFIG_VALUES)), (1, _small_text()))
        if name in ("group_id", "groups", "key", "coordinator_keys"):
            return GROUP_IDS
        if name == "protocol_type":
            return _weighted((3, st.just("consumer")), (1, _small_text(8)))
        if name in ("protocol_name",) or (name == "name" and "Protocol" in owner_name):
            return _weighted((3, st.sampled_from(["range", "roundrobin"])), (1, _small_text(8)))
        if name == "client_software_name":
            return _weighted((3, st.just("logbus-fuzz")), (1, _small_text(8)))
        if name == "client_software_version":
            return _weighted((3, st.just("1.0")), (1, _small_text(8)))
        if name == "states_filter":
            return st.sampled_from(["Stable", "Empty", "PreparingRebalance", "Dead", "x"])
        return None
    if kafka_type == "bytes" and name in ("metadata", "assignment"):
        return consumer_protocol_bytes(assignment=name == "assignment")
    if kafka_type == "int32":
        if name in ("partition_index", "index", "partition", "partitions", "partition_indexes"):
            return PARTITIONS
        if name == "num_partitions":
            # what requests normally carry, and now and then a count no broker should accept
            return _weighted((12, st.sampled_from([-1, 1, 2, 3])),
                             (1, st.sampled_from([0, -2, 100_000, 1_000_000, 2**31 - 1])))
        if name == "count" and "CreatePartitions" in owner_name:  # a pool topic's new count: a little growth
            return _weighted((12, st.integers(-1, 8)), (1, st.sampled_from([100_000, 1_000_000, 2**31 - 1])))
        if name in ("max_bytes", "partition_max_bytes"):
            return _weighted((4, st.integers(0, 1 << 20)), (1, st.sampled_from([-1, 2**31 - 1])))
        if name == "min_bytes":
            return _weighted((4, st.integers(0, 1)), (1, st.sampled_from([-1, 2**31 - 1])))
        if name == "replica_id":
            return _weighted((4, st.just(-1)), (1, st.integers(-(2**31), 2**31 - 1)))
        if name in ("session_id", "session_epoch", "generation_id", "generation_id_or_member_epoch",
                    "current_leader_epoch", "leader_epoch", "last_fetched_epoch", "committed_leader_epoch"):
            return _weighted((4, st.integers(-1, 1)), (1, st.integers(-(2**31), 2**31 - 1)))
        if name == "broker_ids":
            return _weighted((4, st.just(0)), (1, st.integers(-(2**31), 2**31 - 1)))
    if kafka_type == "int16":
        if name == "acks":
            return _weighted((6, st.sampled_from([-1, 1, 0])), (1, st.integers(-(2**15), 2**15 - 1)))
        if name == "replication_factor":
            return _weighted((6, st.sampled_from([-1, 1])), (1, st.integers(-(2**15), 2**15 - 1)))
        if name == "producer_epoch":
            return _weighted((4, st.integers(-1, 1)), (1, st.integers(-(2**15), 2**15 - 1)))
    if kafka_type == "int64":
        if name == "fetch_offset" or name == "committed_offset":
            return _weighted((4, st.integers(0, 40)), (1, st.integers(-(2**63), 2**63 - 1)))
        if name == "timestamp":
            return _weighted((4, st.sampled_from([-1, -2, -3, 0, 1_700_000_000_000])),
                             (1, st.integers(-(2**63), 2**63 - 1)))
        if name in ("producer_id", "log_start_offset"):
            return _weighted((4, st.just(-1)), (1, st.integers(-(2**63), 2**63 - 1)))
    if kafka_type == "int8":
        if name == "isolation_level":
            return _weighted((4, st.integers(0, 1)), (1, st.integers(-128, 127)))
        if name == "config_operation":
            return _weighted((4, st.integers(0, 3)), (1, st.integers(-128, 127)))
        if name == "resource_type":
            return _weighted((4, st.sampled_from([2, 4])), (1, st.integers(-128, 127)))
        if name == "key_type":
            return _weighted((4, st.integers(0, 1)), (1, st.integers(-128, 127)))
    if kafka_type == "timedelta_i32":
        if name == "max_wait":
            return _ms(0, 200)
        if name == "session_timeout":
            return _weighted((4, _ms(6000, 7000)), (1, _ms(-1, 100)))
        if name == "rebalance_timeout":
            return _ms(0, 1500)
        if name == "timeout":
            return _ms(0, 3000)
        if name == "transaction_timeout":
            return _ms(-1, 60000)
    if kafka_type == "timedelta_i64" and name == "retention_time":
        return _weighted((2, _ms(-1, -1, kafka_type)), (1, _ms(0, 10**10, kafka_type)))
    return None


def primitive_strategy(kafka_type: str):
    if kafka_type in INT_RANGES and kafka_type not in ("timedelta_i32", "timedelta_i64", "datetime_i64",
                                                       "error_code"):
        return _ints(kafka_type)
    if kafka_type == "bool":
        return st.booleans()
    if kafka_type == "string":
        return _small_text()
    if kafka_type in ("bytes", "records"):
        return st.binary(max_size=24)
    if kafka_type == "uuid":
        return st.one_of(st.just(uuid.UUID(int=0)), st.uuids())
    if kafka_type == "float64":
        return st.floats(allow_nan=True, allow_infinity=True)
    if kafka_type == "timedelta_i32":
        return st.integers(-(2**31), 2**31 - 1).map(lambda n: datetime.timedelta(milliseconds=n))
    if kafka_type == "timedelta_i64":  # datetime.timedelta cannot hold every int64 of milliseconds
        return st.integers(-(8 * 10**16), 8 * 10**16).map(lambda n: datetime.timedelta(milliseconds=n))
    if kafka_type == "datetime_i64":
        return st.integers(0, 253_402_300_799_000).map(
            lambda n: datetime.datetime.fromtimestamp(n / 1000, datetime.timezone.utc))
    if kafka_type == "error_code":
        from kio.schema.errors import ErrorCode

        return st.sampled_from(list(ErrorCode))
    raise NotImplementedError(kafka_type)


def field_strategy(owner, field):
    fclass = classify_field(field)
    tag = get_field_tag(field)
    optional = tag is None and is_optional(field)
    kafka_type = field.metadata.get("kafka_type", "")
    if isinstance(fclass, (PrimitiveField, PrimitiveTupleField)):
        inner = _hinted(owner, field, kafka_type, optional)
        if inner is None:
            inner = primitive_strategy(kafka_type)
        if isinstance(fclass, PrimitiveTupleField):
            inner = st.lists(inner, max_size=3).map(tuple)
        elif optional and kafka_type == "records":
            pass  # record_sets() already yields None sometimes
    elif isinstance(fclass, EntityField):
        inner = entity_strategy(fclass.type_)
    else:
        inner = st.lists(entity_strategy(fclass.type_), max_size=3).map(tuple)
    if tag is not None:  # tagged fields: usually left out (the default), sometimes set
        default = field.default if field.default is not MISSING else get_tagged_field_default(field)
        if default is None and isinstance(fclass, PrimitiveField):
            return _weighted((2, st.just(None)), (1, inner))
        return _weighted((2, st.just(default)), (1, inner))
    if optional:
        return _weighted((4, inner), (1, st.none()))
    return inner


@functools.lru_cache(maxsize=None)
def entity_strategy(cls):
    return st.builds(cls, **{f.name: field_strategy(cls, f) for f in dataclasses.fields(cls)})


# ---- cases: a valid request, then mutations of its tree or of the frame ------------------------------------------
@dataclasses.dataclass(eq=False)
class Case:
    api_key: int
    version: int
    flexible: bool
    request: object
    header: Node
    body: Node
    mutations: list = dataclasses.field(default_factory=list)
    size_override: int | None = None
    stale_size: bool = False  # truncated after the size prefix was computed: the frame is short
    cut: int | None = None
    trailing_in: bytes = b""
    trailing_after: bytes = b""
    flips: list = dataclasses.field(default_factory=list)
    fixed_frame: bytes | None = None  # seed cases: the whole frame as is
    kinds: list = dataclasses.field(default_factory=list)  # the mutation kinds applied
    conforming: bool = False  # mutated, yet still a valid request (an unknown tagged field: KIP-482 skips it)

    @property
    def valid(self) -> bool:
        return not self.mutations and self.fixed_frame is None

    def payload(self) -> bytes:
        out = bytearray()
        render(self.header, out)
        render(self.body, out)
        out += self.trailing_in
        for pos, xor in self.flips:
            if out:
                out[pos % len(out)] ^= xor
        return bytes(out)

    def frame(self) -> bytes:
        if self.fixed_frame is not None:
            return self.fixed_frame
        payload = self.payload()
        size = len(payload)
        if self.cut is not None:
            payload = payload[:self.cut % (len(payload) + 1)]
            if not self.stale_size:
                size = len(payload)
        if self.size_override is not None:
            size = self.size_override
        return struct.pack(">i", size) + payload + self.trailing_after

    def describe(self) -> str:
        what = f"api {self.api_key} v{self.version}"
        if not self.mutations:
            return what + " (valid)"
        return what + (" (still valid)" if self.conforming else "") + ": " + "; ".join(self.mutations)

    def expects_answer(self) -> bool:
        """A valid request the broker must answer (Produce with acks=0 gets no response)."""
        if not (self.valid or self.conforming):
            return False
        return not (self.api_key == 0 and getattr(self.request, "acks", 1) == 0)


def fixed_case(api_key: int, version: int, frame: bytes, description: str) -> Case:
    case = Case(api_key, version, False, None, Node("struct"), Node("struct"), [description])
    case.fixed_frame = frame
    return case


def _spans(case: Case):
    spans = []
    out = bytearray()
    render(case.header, out, spans)
    render(case.body, out, spans)
    return spans


def _nodes(case: Case, predicate: Callable[[Node], bool], header: bool = False) -> list[Node]:
    """Nodes of the body (and of the header if ``header``: it has a mutation of its own) that match."""
    roots = (case.header, case.body) if header else (case.body,)
    return [n for root in roots for n in root.walk() if predicate(n)]


def _int_boundaries(kafka_type: str, width: int) -> list[int]:
    lo, hi = INT_RANGES.get(kafka_type, (-(2 ** (8 * width - 1)), 2 ** (8 * width - 1) - 1))
    return sorted({lo, hi, -1 if lo < 0 else hi, 0, 1, lo + 1, hi - 1})


def _length_choices(node: Node) -> list[tuple[str, bytes]]:
    """Lying length/count prefixes for a sized or array node."""
    real = len(node.data or b"") if node.kind == "sized" else len(node.children)
    out = []
    if node.compact:
        for value, label in [(2**31, "2^31-1"), (2**32 - 1, "2^32-2"), (2**35 - 1, "2^35-2"), (2**28, "2^28-1"),
                             (real + 2, "off by one (+1)"), (real, "off by one (-1)")]:
            out.append((f"compact {label}", uvarint(value)))
        out.append(("compact count 2^32-2 as ffffffff0f", bytes.fromhex("ffffffff0f")))
        out.append(("over-long varint (10 bytes)", overlong_uvarint(real + 1, 10)))
        out.append(("non-terminating varint", b"\xff" * 11))
        if not node.nullable:
            out.append(("null where not nullable", b"\x00"))
    else:
        fmt = ">h" if node.kind == "sized" and node.width == 2 else ">i"
        lo, hi = (-(2**15), 2**15 - 1) if fmt == ">h" else (-(2**31), 2**31 - 1)
        for value, label in [(hi, "max"), (-2, "-2"), (lo, "min"), (real + 1, "off by one (+1)"),
                             (real - 1, "off by one (-1)"), (0, "zero")]:
            if lo <= value <= hi:
                out.append((f"int{8 * struct.calcsize(fmt)} {label}", struct.pack(fmt, value)))
        if fmt == ">i":
            out.append(("int32 2^24", struct.pack(fmt, 1 << 24)))
            out.append(("int32 1000000", struct.pack(fmt, 1_000_000)))
        if not node.nullable:
            out.append(("null (-1) where not nullable", struct.pack(fmt, -1)))
    return out


def _mutate_length(draw, case: Case) -> str | None:
    nodes = _nodes(case, lambda n: n.kind in ("sized", "array"))
    if not nodes:
        return None
    node = draw(st.sampled_from(nodes))
    label, prefix = draw(st.sampled_from(_length_choices(node)))
    node.prefix = prefix
    return f"{node.name} length/count: {label}"


def _mutate_null(draw, case: Case) -> str | None:
    nodes = _nodes(case, lambda n: n.kind in ("sized", "array") and not n.nullable)
    if not nodes:
        return None
    node = draw(st.sampled_from(nodes))
    node.prefix = b"\x00" if node.compact else struct.pack(">h" if node.width == 2 else ">i", -1)
    return f"{node.name}: null where the schema forbids it"


def _mutate_varint(draw, case: Case) -> str | None:
    nodes = _nodes(case, lambda n: (n.kind in ("sized", "array") and n.compact) or n.kind == "tags")
    if not nodes:
        return None
    node = draw(st.sampled_from(nodes))
    true = node.true_prefix()
    value = 0
    for i, b in enumerate(true):
        value |= (b & 0x7F) << (7 * i)
    choice = draw(st.sampled_from(["overlong", "unterminated", "huge"]))
    if choice == "overlong":
        size = draw(st.sampled_from([2, 5, 6, 10, 20]))
        node.prefix = overlong_uvarint(value, max(size, len(true) + 1))
        return f"{node.name}: varint {value} over-long in {len(node.prefix)} bytes"
    if choice == "unterminated":
        node.prefix = b"\x80" * draw(st.integers(5, 40))
        return f"{node.name}: unterminated varint"
    node.prefix = draw(st.sampled_from([bytes.fromhex("ffffffff0f"), bytes.fromhex("ffffffff7f"),
                                        bytes.fromhex("80808080087f"), uvarint(2**31 - 1), uvarint(2**31)]))
    return f"{node.name}: varint {node.prefix.hex()}"


def _mutate_tags(draw, case: Case) -> str | None:
    nodes = _nodes(case, lambda n: n.kind == "tags", header=True)
    if not nodes:
        return None
    node = draw(st.sampled_from(nodes))
    choice = draw(st.sampled_from(["unknown", "huge_count", "huge_size", "duplicate", "garbage_known"]))
    if choice == "unknown":
        tag = draw(st.sampled_from([1, 7, 100, 9999, 2**31 - 1]))
        value = draw(st.binary(max_size=16))
        node.extra += uvarint(tag) + uvarint(len(value)) + value
        node.extra_count += 1
        case.conforming = not node.children or max(c.tag for c in node.children) < tag
        return f"{node.name}: unknown tag {tag} ({len(value)} bytes)"
    if choice == "huge_count":
        node.prefix = draw(st.sampled_from([uvarint(2**31 - 1), bytes.fromhex("ffffffff0f"), uvarint(1 << 20)]))
        return f"{node.name}: tag count {node.prefix.hex()}"
    if choice == "huge_size":
        size = draw(st.sampled_from([2**31 - 1, 2**32 - 1, 1 << 20, 100]))
        node.extra += uvarint(draw(st.sampled_from([0, 5, 999]))) + uvarint(size) + b"\x01\x02"
        node.extra_count += 1
        return f"{node.name}: tagged field of declared size {size}"
    if choice == "duplicate":
        node.extra += b"\x05\x01\x00\x05\x01\x00\x03\x00"
        node.extra_count += 3
        return f"{node.name}: duplicate and out-of-order tags"
    # a known tag with garbage content, or its size lying
    if node.children:
        child = draw(st.sampled_from(node.children))
        if draw(st.booleans()):
            child.replace = draw(st.binary(max_size=12))
            return f"{node.name}: tag {child.tag} with garbage content"
        child.size_bytes = uvarint(draw(st.sampled_from([0, 1, 2**31 - 1])))
        return f"{node.name}: tag {child.tag} with a lying size"
    node.extra += uvarint(0) + uvarint(3) + b"\xff\xff\xff"
    node.extra_count += 1
    return f"{node.name}: tag 0 with garbage content"


def _mutate_int(draw, case: Case) -> str | None:
    nodes = _nodes(case, lambda n: n.kind == "fixed" and n.name.split("[")[0] not in WAIT_FIELDS
                   and n.name != "header.correlation_id")
    if not nodes:
        return None
    node = draw(st.sampled_from(nodes))
    width = len(node.data)
    if node.kafka_type == "bool":
        node.replace = bytes([draw(st.sampled_from([2, 0x80, 0xFF]))])
    elif node.kafka_type in ("uuid", "float64"):
        node.replace = draw(st.binary(min_size=width, max_size=width))
    else:
        fmt = {1: ">b", 2: ">h", 4: ">i", 8: ">q"}[width]
        value = draw(st.sampled_from(_int_boundaries(node.kafka_type if node.kafka_type in INT_RANGES else "",
                                                     width)))
        lo = -(2 ** (8 * width - 1))
        node.replace = struct.pack(fmt, value if value < -lo else value + 2 * lo)
    return f"{node.name} = 0x{node.replace.hex()}"


def _mutate_header(draw, case: Case) -> str | None:
    choice = draw(st.sampled_from(["version", "key", "tags", "client_id"]))
    nodes = {n.name: n for n in case.header.walk()}
    if choice == "version":
        version = draw(st.sampled_from([-1, case.version + 1, 32767, -32768, case.version - 1]))
        nodes["header.api_version"].replace = struct.pack(">h", version)
        return f"header api_version {version} (body encoded as v{case.version})"
    if choice == "key":
        key = draw(st.sampled_from([-1, 67, 999, 32767, 18, 3]))
        nodes["header.api_key"].replace = struct.pack(">h", key)
        return f"header api_key {key} (body of api {case.api_key})"
    if choice == "tags":
        if case.flexible:
            tags = nodes["header.tags"]
            tags.replace = b""
            return "header v2 without its tagged-field section"
        case.header.children.append(Node("tags", "header.tags"))
        return "header v1 with a tagged-field section"
    node = nodes["header.client_id"]
    label, node.prefix = draw(st.sampled_from([("32767", b"\x7f\xff"), ("-2", b"\xff\xfe"),
                                               ("+1", struct.pack(">h", len(node.data or b"") + 1)),
                                               ("-32768", b"\x80\x00")]))
    return f"header client_id length {label}"


def _mutate_truncate(draw, case: Case) -> str | None:
    spans = _spans(case)
    total = spans[-1][1] if spans else 0
    where = draw(st.sampled_from(["span_start", "span_end", "inside", "random"]))
    start, end, node = draw(st.sampled_from(spans))
    cut = {"span_start": start, "span_end": max(end - 1, 0), "inside": (start + end) // 2,
           "random": draw(st.integers(0, max(total, 0)))}[where]
    case.cut = cut
    case.stale_size = draw(st.integers(0, 3)) == 0
    return (f"truncated at byte {cut} of {total} ({where} of {node.name or node.kind})"
            + (", size prefix of the whole" if case.stale_size else ""))


def _mutate_trailing(draw, case: Case) -> str | None:
    garbage = draw(st.binary(min_size=1, max_size=64))
    if draw(st.booleans()):
        case.trailing_in = garbage
        return f"{len(garbage)} bytes of trailing garbage inside the frame"
    case.trailing_after = garbage
    return f"{len(garbage)} bytes of garbage after the frame"


def _mutate_size(draw, case: Case) -> str | None:
    real = len(case.payload())
    size = draw(st.sampled_from([0, 1, 3, 4, 7, 8, real - 1, real + 1, real + 100, -1, -(2**31), 2**31 - 1,
                                 104857600, 104857601]))
    case.size_override = size
    return f"frame size prefix {size} (payload {real})"


def _mutate_flip(draw, case: Case) -> str | None:
    spans = _spans(case)
    protected = set()
    for start, end, node in spans:  # leave the wait fields alone (a flipped max_wait is a legitimate long poll)
        if node.kind == "fixed" and node.name in WAIT_FIELDS:
            protected.update(range(start, end))
    total = spans[-1][1] if spans else 0
    if total == 0:
        return None
    allowed = [i for i in range(total) if i not in protected]
    count = draw(st.integers(1, 8))
    for _ in range(count):
        case.flips.append((draw(st.sampled_from(allowed)), draw(st.integers(1, 255))))
    return f"{count} byte flips at " + ",".join(str(p) for p, _ in case.flips[-count:])


# record batch mutations (Produce): each takes the records bytes and returns new ones and a label
def _mutate_batch(draw, batch: bytes) -> tuple[bytes, str]:
    if len(batch) < 61:
        batch = build_batch([(None, b"x", ())])
    buf = bytearray(batch)
    choice = draw(st.sampled_from(["last_offset_delta", "record_count", "length", "magic", "codec", "attributes",
                                   "crc", "producer", "timestamps", "records", "headers", "two", "tail",
                                   "base_offset"]))
    fix = True
    if choice == "last_offset_delta":
        value = draw(st.sampled_from([2**31 - 1, -1, -(2**31), 0, 1, 1000, 2**30]))
        struct.pack_into(">i", buf, 23, value)
        label = f"lastOffsetDelta {value}"
    elif choice == "record_count":
        value = draw(st.sampled_from([-1, 0, 2**31 - 1, 1_000_000, 2, 100]))
        struct.pack_into(">i", buf, 57, value)
        label = f"recordCount {value}"
    elif choice == "length":
        real = struct.unpack_from(">i", buf, 8)[0]
        value = draw(st.sampled_from([real + 1, real - 1, 0, 48, 49, -1, 2**31 - 1, -(2**31), real + 1000]))
        struct.pack_into(">i", buf, 8, value)
        label = f"batch length {value} (real {real})"
    elif choice == "magic":
        value = draw(st.sampled_from([0, 1, 3, -1, 127]))
        struct.pack_into(">b", buf, 16, value)
        label = f"magic {value}"
    elif choice == "codec":
        codec = draw(st.integers(0, 7))
        attrs = (struct.unpack_from(">h", buf, 21)[0] & ~7) | codec
        payload = draw(st.sampled_from(["garbage", "empty", "truncated", "other"]))
        body = {"garbage": draw(st.binary(min_size=1, max_size=64)), "empty": b"",
                "truncated": compress(max(1, min(codec, 4)), b"x" * 200)[:-5],
                "other": compress(draw(st.integers(1, 4)), encode_record(b"k", b"v"))}[payload]
        buf = bytearray(build_batch([(b"k", b"v", ())], codec, attributes=attrs, body=body,
                                    record_count=draw(st.sampled_from([1, 2, 2**31 - 1]))))
        label = f"codec bits {codec} with {payload} payload"
    elif choice == "attributes":
        value = draw(st.sampled_from([0x08, 0x10, 0x20, 0x30, 0x40, -1, 0x7FFF, -32768]))
        struct.pack_into(">h", buf, 21, value)
        label = f"attributes 0x{value & 0xffff:04x}"
    elif choice == "crc":
        fix = False
        buf[draw(st.integers(17, len(buf) - 1))] ^= draw(st.integers(1, 255))
        label = "a byte flipped, CRC left wrong"
    elif choice == "producer":
        pid = draw(st.sampled_from([-1, 0, 1, 2**63 - 1, -(2**63)]))
        epoch = draw(st.sampled_from([-1, 0, 32767, -32768]))
        seq = draw(st.sampled_from([-1, 0, 2**31 - 1, -(2**31), 5]))
        struct.pack_into(">qhi", buf, 43, pid, epoch, seq)
        label = f"producer id {pid} epoch {epoch} base sequence {seq}"
    elif choice == "timestamps":
        base = draw(st.sampled_from([-1, 0, 2**63 - 1, -(2**63)]))
        top = draw(st.sampled_from([-1, 0, 2**63 - 1, -(2**63)]))
        struct.pack_into(">qq", buf, 27, base, top)
        label = f"timestamps base {base} max {top}"
    elif choice == "records":
        body = draw(st.sampled_from([
            varint(2**31 - 1) + b"\x00", varint(-5) + b"\x00" * 8, b"\x02\x00\x00\x00" + varint(-2) + b"\x00",
            b"\xff" * 12, b"\x10\x00\x00\x00" + varint(1 << 40) + b"k",
            encode_record(b"k", b"v")[:-3]]))
        buf = bytearray(build_batch([(b"k", b"v", ())], body=body))
        label = f"garbage records section {body.hex()}"
    elif choice == "headers":
        rec = bytearray(struct.pack(">b", 0) + varint(0) + varint(0) + varint(1) + b"k" + varint(1) + b"v")
        rec += draw(st.sampled_from([varint(2**31 - 1), varint(-1), varint(1) + varint(-3),
                                     varint(1) + varint(2**31 - 1) + b"h", varint(1_000_000)]))
        body = varint(len(rec)) + bytes(rec)
        buf = bytearray(build_batch([(b"k", b"v", ())], body=body))
        label = f"record headers {bytes(rec[6:]).hex()}"
    elif choice == "two":
        second = build_batch([(b"k2", b"v2", ())], draw(st.integers(0, 4)))
        buf = bytearray(bytes(buf) + second[:draw(st.integers(0, len(second)))])
        label = "a second batch, maybe cut short"
    elif choice == "tail":
        buf = bytearray(bytes(buf) + draw(st.binary(min_size=1, max_size=70)))
        label = "garbage after the batch"
    else:
        struct.pack_into(">q", buf, 0, draw(st.sampled_from([-1, 2**63 - 1, 12345])))
        label = "base offset set"
    if fix and choice not in ("codec", "records", "headers", "two", "tail"):
        fix = draw(st.integers(0, 4)) > 0  # mostly a valid CRC: the broker must not rely on the CRC alone
        if fix and len(buf) >= 21:
            buf = bytearray(fix_crc(bytes(buf)))
        label += ", CRC recomputed" if fix else ", CRC stale"
    return bytes(buf), label


def _mutate_records(draw, case: Case) -> str | None:
    nodes = _nodes(case, lambda n: n.kind == "sized" and n.kafka_type == "records")
    if not nodes:
        return None
    node = draw(st.sampled_from(nodes))
    node.content = None
    batch, label = _mutate_batch(draw, node.data or b"")
    node.data = batch  # the length prefix follows the new content
    return f"{node.name}: {label}"


MUTATIONS = {
    "length": _mutate_length, "null": _mutate_null, "varint": _mutate_varint, "tags": _mutate_tags,
    "int": _mutate_int, "header": _mutate_header, "truncate": _mutate_truncate, "trailing": _mutate_trailing,
    "size": _mutate_size, "flip": _mutate_flip, "records": _mutate_records,
}
MUTATION_WEIGHTS = {"length": 4, "null": 2, "varint": 2, "tags": 2, "int": 4, "header": 1, "truncate": 3,
                    "trailing": 1, "size": 1, "flip": 3, "records": 0}


@st.composite
def targeted_produce(draw, version: int):
    """A Produce request that reaches a partition's log: one pool topic, an existing partition, acks 1 or -1."""
    m = _module(0, version)
    topic = draw(st.sampled_from(sorted(POOL_TOPICS)))
    partition = draw(st.integers(0, POOL_TOPICS[topic] - 1))
    records = draw(_weighted((4, valid_batch()), (1, record_sets())))
    return m.ProduceRequest(transactional_id=None, acks=draw(st.sampled_from([1, -1])),
                            timeout=datetime.timedelta(milliseconds=draw(st.integers(0, 3000))),
                            topic_data=(m.TopicProduceData(name=topic, partition_data=(
                                m.PartitionProduceData(index=partition, records=records),)),))


@st.composite
def cases(draw, advertised: dict[int, tuple[int, int]], valid_share: int = 20):
    """A Case for one of the advertised (key, version) pairs; ``valid_share`` percent are left valid (hypothesis
    favours small draws: about a third in practice). Half the Produce requests are aimed at an existing
    partition of a pool topic, and most of those only have their record batch mutated."""
    valid = draw(st.integers(0, 99)) < valid_share
    keys = sorted(advertised)
    weights = [4 if k == 0 else 2 if k in (1, 3, 19) else 1 for k in keys]
    api_key = draw(st.sampled_from([k for k, w in zip(keys, weights) for _ in range(w)]))
    lo, hi = advertised[api_key]
    version = draw(st.integers(lo, hi))
    cls = load_request_schema(api_key, version)
    flexible = bool(cls.__flexible__)
    targeted = api_key == 0 and draw(st.booleans())
    request = draw(targeted_produce(version) if targeted else entity_strategy(cls))
    correlation = draw(st.integers(0, 2**31 - 1))
    client_id = draw(_weighted((4, st.just("fuzz")), (1, st.none()), (1, _small_text(8))))
    case = Case(api_key, version, flexible, request,
                header_node(api_key, version, correlation, client_id, flexible), encode_entity(cls, request))
    rendered = bytearray()
    render(case.body, rendered)
    reference = kio_bytes(cls, request)
    if bytes(rendered) != reference:  # the annotated encoder must agree with kio's writer
        raise AssertionError(f"encoder mismatch for api {api_key} v{version}: {bytes(rendered).hex()} != "
                             f"{reference.hex()} ({request!r})")
    if valid:
        return case
    has_records = any(n.kind == "sized" and n.kafka_type == "records" and n.data for n in case.body.walk())
    names = [n for n, w in MUTATION_WEIGHTS.items() for _ in range(w)]
    if has_records:
        names += ["records"] * 20
        if targeted and draw(st.integers(0, 4)) > 0:
            names = ["records"]  # the record batch is what this request is for
    for _ in range(draw(st.integers(1, 3)) if draw(st.integers(0, 2)) == 0 else 1):
        kind = draw(st.sampled_from(names))
        label = MUTATIONS[kind](draw, case)
        if label:
            case.mutations.append(label)
            case.kinds.append(kind)
    if not case.mutations:
        case.mutations.append(MUTATIONS["trailing"](draw, case))
        case.kinds.append("trailing")
    if len(case.mutations) > 1:
        case.conforming = False
    return case


# ---- responses ------------------------------------------------------------------------------------------------
def split_frames(data: bytes) -> tuple[list[bytes], bytes]:
    """Whole size-prefixed frames in ``data`` and the bytes left over."""
    frames, pos = [], 0
    while len(data) - pos >= 4:
        size = struct.unpack_from(">i", data, pos)[0]
        if size < 0 or len(data) - pos - 4 < size:
            break
        frames.append(data[pos + 4:pos + 4 + size])
        pos += 4 + size
    return frames, data[pos:]


def effective_header(frame: bytes) -> tuple[int, int, int] | None:
    """(api key, version, correlation id) the broker reads from the first frame of ``frame``, if it can."""
    if len(frame) < 12:
        return None
    return struct.unpack_from(">hhi", frame, 4)


def decode_response(api_key: int, version: int, frame: bytes, advertised: dict[int, tuple[int, int]]):
    """Decode a response (without its size prefix) with kio; raises on a malformed one. Returns the body."""
    if api_key == API_VERSIONS:
        lo, hi = advertised.get(API_VERSIONS, (0, 3))
        if not lo <= version <= hi:
            version = 0  # KIP-511: an unknown ApiVersions version is answered with a v0 body
    resp_type = load_response_schema(api_key, version)
    pos = 4
    if resp_type.__flexible__ and api_key != API_VERSIONS:
        count = frame[pos]
        if count != 0:
            raise ValueError(f"response header has {count} tagged fields")
        pos += 1
    body, size = entity_reader(resp_type)(frame, pos)  # the reader returns the bytes it consumed
    if pos + size != len(frame):
        raise ValueError(f"response of {len(frame)} bytes, body ends at {pos + size}")
    return body


# ---- seed cases: known hostile inputs, sent before the generated ones --------------------------------------------
def request_case(api_key: int, version: int, request, label: str, correlation_id: int = 7) -> Case:
    cls = load_request_schema(api_key, version)
    flexible = bool(cls.__flexible__)
    header = header_node(api_key, version, correlation_id, "fuzz-seed", flexible)
    return Case(api_key, version, flexible, request, header, encode_entity(cls, request), [label])


def _module(api_key: int, version: int):
    import sys

    return sys.modules[load_request_schema(api_key, version).__module__]


def produce_case(topic: str, records: bytes, label: str, version: int = 7, partition: int = 0) -> Case:
    m = _module(0, version)
    request = m.ProduceRequest(transactional_id=None, acks=1, timeout=datetime.timedelta(seconds=5), topic_data=(
        m.TopicProduceData(name=topic, partition_data=(m.PartitionProduceData(index=partition, records=records),)),))
    case = request_case(0, version, request, label)
    case.kinds.append("records")
    return case


def produced_records(case: Case) -> dict[tuple[str, int], bytes | None] | None:
    """(topic, partition) -> the records bytes a Produce case sends, when nothing but its records was mutated
    (None when the request cannot be read that way: other mutations, or a partition named twice)."""
    if case.api_key != 0 or case.fixed_frame is not None or any(k != "records" for k in case.kinds):
        return None
    out: dict[tuple[str, int], bytes | None] = {}
    topics = next((n for n in case.body.children if n.name == "topic_data"), None)
    for topic in (topics.children if topics is not None else []):
        fields = {n.name: n for n in topic.children}
        name = (fields["name"].data or b"").decode("utf-8", "replace")
        for part in fields["partition_data"].children:
            pfields = {n.name: n for n in part.children}
            key = (name, struct.unpack(">i", pfields["index"].data)[0])
            if key in out:
                return None
            rec = pfields["records"]
            out[key] = rec.content if rec.content is not None else rec.data
    return out


def raw_frame(api_key: int, version: int, body: bytes, correlation_id: int = 1, client_id: bytes = b"x") -> bytes:
    """A frame of header v1 (v2 with an empty tagged-field section when flexible) and ``body`` as given."""
    payload = struct.pack(">hhih", api_key, version, correlation_id, len(client_id)) + client_id
    if load_request_schema(api_key, version).__flexible__:
        payload += b"\x00"
    payload += body
    return struct.pack(">i", len(payload)) + payload


def seed_cases(bombs: bool = True) -> list[Case]:
    """Hand-written hostile inputs: regressions for holes found before (see the fuzz test's docstring)."""
    out = [
        fixed_case(3, 12, bytes.fromhex("000000110003000c0000000100017800ffffffff0f"),
                   "Metadata v12, topics compact array count 0xffffffff0f (2^32-2)"),
        fixed_case(3, 1, bytes.fromhex("0000000f00030001000000010001787fffffff"),
                   "Metadata v1, topics array count 2^31-1"),
        fixed_case(1, 4, raw_frame(1, 4, struct.pack(">iiiibi", -1, 0, 0, 0, 0, -1)),
                   "Fetch v4, topics array null (-1), not nullable"),
        produce_case("fz-0", build_batch([(None, b"a", ()), (None, b"b", ())], last_offset_delta=2**31 - 1),
                     "Produce: lastOffsetDelta 2^31-1, CRC valid"),
        produce_case("fz-0", build_batch([(None, b"a", ())], record_count=-5), "Produce: recordCount -5, CRC valid"),
        produce_case(COMPACTED_TOPIC, build_batch([(b"k", b"v", ())], body=varint(10) + b"\x00" + varint(0)
                                                  + varint(0) + varint(1) + b"k" + varint(1) + b"v"
                                                  + varint(2**31 - 1)),
                     "Produce to a compacted topic: a record with 2^31-1 headers"),
    ]
    if bombs:
        mb = 1 << 20
        out += [
            produce_case(COMPACTED_TOPIC, bomb_batch(4, 256 * mb), "Produce to a compacted topic: zstd bomb, 256 MB"),
            produce_case(COMPACTED_TOPIC, bomb_batch(1, 256 * mb), "Produce to a compacted topic: gzip bomb, 256 MB"),
            produce_case(COMPACTED_TOPIC, bomb_batch(4, 64 * mb, record_count=2**31 - 1),
                         "Produce to a compacted topic: zstd bomb of 64 MB zeros, recordCount 2^31-1"),
        ]
    # last: these stall the broker, or leave its log dir with more partitions than it can open
    m = _module(11, 0)
    meta = struct.pack(">hi", 0, 2**31 - 1) + struct.pack(">h", -2)
    out.append(request_case(11, 0, m.JoinGroupRequest(
        group_id="fz-seed-group", session_timeout=datetime.timedelta(seconds=6), member_id="", protocol_type="consumer",
        protocols=(m.JoinGroupRequestProtocol(name="range", metadata=meta),)),
        "JoinGroup v0: consumer subscription with 2^31-1 topics, a topic name of length -2"))
    m = _module(19, 2)
    out.append(request_case(19, 2, m.CreateTopicsRequest(topics=(m.CreatableTopic(
        name="fz-many-partitions", num_partitions=1_000_000, replication_factor=1, assignments=(), configs=()),),
        timeout=datetime.timedelta(seconds=5), validate_only=False),
        "CreateTopics v2: num_partitions 1000000"))
    return out


# ---- what a broker must refuse: a strict reading of the record batches of a Produce request -----------------------
def _read_varint(buf: bytes, pos: int, max_bytes: int) -> tuple[int, int]:
    raw = shift = 0
    for i in range(max_bytes):
        if pos >= len(buf):
            raise ValueError("varint runs past the end")
        byte = buf[pos]
        pos += 1
        raw |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return (raw >> 1) ^ -(raw & 1), pos
        shift += 7
    raise ValueError("varint too long")


def _check_record(rec: bytes) -> bool:
    """Raises ValueError unless ``rec`` (one record, its length prefix stripped) is well formed; returns whether
    its key is null."""
    pos = 1  # attributes
    if len(rec) < 1:
        raise ValueError("empty record")
    _, pos = _read_varint(rec, pos, 10)  # timestamp delta
    _, pos = _read_varint(rec, pos, 5)  # offset delta
    null_key = False
    for what in ("key", "value"):
        n, pos = _read_varint(rec, pos, 5)
        if n < -1:
            raise ValueError(f"record {what} length {n}")
        null_key = null_key or (what == "key" and n == -1)
        pos += max(n, 0)
        if pos > len(rec):
            raise ValueError(f"record {what} runs past the record")
    count, pos = _read_varint(rec, pos, 5)
    if count < 0:
        raise ValueError(f"record header count {count}")
    for _ in range(count):
        n, pos = _read_varint(rec, pos, 5)
        if n < 0:
            raise ValueError(f"record header key length {n}")
        pos += n
        n, pos = _read_varint(rec, pos, 5)
        if n < -1:
            raise ValueError(f"record header value length {n}")
        pos += max(n, 0)
        if pos > len(rec):
            raise ValueError("record header runs past the record")
    if pos != len(rec):
        raise ValueError(f"record of {len(rec)} bytes, fields end at {pos}")
    return null_key


class TooLarge(Exception):
    """Decompresses to more than the checker looks at (a bomb): no verdict."""


def _snappy_raw(data: bytes, limit: int) -> bytes:
    import cramjam

    size = shift = pos = 0
    while True:  # the raw format starts with the uncompressed length
        if pos >= len(data) or pos > 5:
            raise ValueError("bad snappy length")
        byte = data[pos]
        pos += 1
        size |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            break
    if size > limit:
        raise TooLarge()
    return bytes(cramjam.snappy.decompress_raw(data))


def _decompress(codec: int, data: bytes, limit: int = 1 << 20) -> bytes:
    """Decompress with a bound on the output (raises TooLarge beyond ``limit``)."""
    if codec == 1:
        import zlib

        d = zlib.decompressobj(47)
        out = d.decompress(data, limit + 1)
        if len(out) > limit:
            raise TooLarge()
        if not d.eof:
            raise ValueError("truncated gzip stream")
        return out
    if codec == 2:
        if data.startswith(b"\x82SNAPPY\x00"):
            out, pos = bytearray(), 16
            while pos < len(data):
                (size,) = struct.unpack_from(">i", data, pos)
                if size < 0 or pos + 4 + size > len(data):
                    raise ValueError("xerial snappy block runs past the end")
                out += _snappy_raw(data[pos + 4:pos + 4 + size], limit - len(out))
                pos += 4 + size
            return bytes(out)
        return _snappy_raw(data, limit)
    if codec == 3:
        import lz4.frame

        d = lz4.frame.LZ4FrameDecompressor()
        out = d.decompress(data, max_length=limit + 1)
        if len(out) > limit:
            raise TooLarge()
        if not d.eof:
            raise ValueError("truncated lz4 frame")
        return out
    if codec == 4:
        import io

        import zstandard

        out = zstandard.ZstdDecompressor().stream_reader(io.BytesIO(data)).read(limit + 1)
        if len(out) > limit:
            raise TooLarge()
        return out
    return data


def batch_problems(data: bytes | None, null_keys: list | None = None) -> list[str]:
    """Why a broker must refuse ``data`` as the records of a Produce partition (empty list: it may accept it).

    Kafka's LogValidator rules that keep the log readable: whole magic-2 batches, a valid CRC, a record count
    that is positive and matches lastOffsetDelta + 1, a known codec, no control batch from a producer, and a
    records section that decodes to exactly that many well-formed records. ``null_keys`` (a list) gets True
    appended if a record has a null key (a compacted topic refuses it).
    """
    if not data:
        return ["no record batch"]
    problems: list[str] = []
    pos = 0
    while pos < len(data):
        if len(data) - pos < 61:
            return problems + ["a partial batch header"]
        (base, length, _epoch, magic, crc, attributes, last_delta, _bts, _mts, _pid, _pe, _seq,
         count) = struct.unpack_from(">qiibIhiqqqhii", data, pos)
        if magic != 2:
            return problems + [f"magic {magic}"]
        if length < 49 or pos + 12 + length > len(data):
            return problems + [f"batch length {length} does not match the bytes"]
        end = pos + 12 + length
        if crc32c.crc32c(data[pos + 21:end]) != crc:
            problems.append("CRC mismatch")
        if count <= 0:
            problems.append(f"record count {count}")
        elif last_delta + 1 != count:
            problems.append(f"lastOffsetDelta {last_delta} with {count} records")
        codec = attributes & 7
        if codec > 4:
            problems.append(f"compression codec {codec}")
        if attributes & 0x20:
            problems.append("a control batch from a producer")
        body = data[pos + 61:end]
        if codec <= 4 and 0 < count <= 10_000:
            try:
                raw = _decompress(codec, body) if codec else body
                rpos = 0
                for _ in range(count):
                    n, rpos = _read_varint(raw, rpos, 5)
                    if n < 0 or rpos + n > len(raw):
                        raise ValueError(f"record length {n}")
                    if _check_record(raw[rpos:rpos + n]) and null_keys is not None:
                        null_keys.append(True)
                    rpos += n
                if rpos != len(raw):
                    raise ValueError(f"{len(raw) - rpos} bytes after the last record")
            except TooLarge:
                pass
            except Exception as exc:  # noqa: BLE001 - any decoding failure makes the batch invalid
                problems.append(f"records do not decode: {type(exc).__name__}: {exc}"[:120])
        pos = end
    return problems
