"""Valid requests: hypothesis strategies from the kio request dataclasses (field names that matter get hints)."""

from __future__ import annotations

import dataclasses
import datetime
import functools
import struct
import uuid
from dataclasses import MISSING

from hypothesis import strategies as st
from kio.serial._implicit_defaults import get_tagged_field_default
from kio.serial._introspect import (
    EntityField,
    PrimitiveField,
    PrimitiveTupleField,
    classify_field,
    get_field_tag,
    is_optional,
)

from .constants import ADVERSARIAL_TOPICS, CONFIG_NAMES, CONFIG_VALUES, GROUPS, INT_RANGES, POOL_TOPICS
from .records import build_batch


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
