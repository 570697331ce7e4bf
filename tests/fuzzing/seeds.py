"""Seed cases: known hostile inputs, sent before the generated ones."""

from __future__ import annotations

import datetime
import struct

from kio.index import load_request_schema

from .case import Case, fixed_case
from .constants import COMPACTED_TOPIC
from .encoder import _module, encode_entity, header_node
from .records import bomb_batch, build_batch, varint


def request_case(api_key: int, version: int, request, label: str, correlation_id: int = 7) -> Case:
    cls = load_request_schema(api_key, version)
    flexible = bool(cls.__flexible__)
    header = header_node(api_key, version, correlation_id, "fuzz-seed", flexible)
    return Case(api_key, version, flexible, request, header, encode_entity(cls, request), [label])


def produce_case(topic: str, records: bytes, label: str, version: int = 7, partition: int = 0) -> Case:
    m = _module(0, version)
    request = m.ProduceRequest(transactional_id=None, acks=1, timeout=datetime.timedelta(seconds=5), topic_data=(
        m.TopicProduceData(name=topic, partition_data=(m.PartitionProduceData(index=partition, records=records),)),))
    case = request_case(0, version, request, label)
    case.kinds.append("records")
    return case


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
