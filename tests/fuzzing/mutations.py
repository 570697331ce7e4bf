"""Mutations of a case: of its node trees (lengths, nulls, varints, tags, ints, the header), of the rendered
frame (truncation, trailing garbage, the size prefix, byte flips), and of Produce record batches field by field.

Each takes hypothesis's ``draw`` and a :class:`Case`, changes the case and returns a label (None: nothing to
mutate in this case).
"""

from __future__ import annotations

import struct
from typing import Callable

from hypothesis import strategies as st

from .case import Case
from .constants import INT_RANGES, WAIT_FIELDS
from .encoder import Node, render
from .records import build_batch, compress, encode_record, fix_crc, overlong_uvarint, uvarint, varint


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
