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

The modules: ``constants`` (names, ranges, wait fields), ``records`` (varints, record batches, bombs),
``encoder`` (the annotated node tree), ``strategies`` (valid requests), ``case`` (a case and its frame),
``mutations``, ``generator`` (:func:`cases`), ``responses`` (splitting and decoding answers), ``seeds``
(:func:`seed_cases`) and ``validator`` (:func:`batch_problems`). Everything public is re-exported here:
``import fuzzing`` / ``from fuzzing import build_batch`` work as they did when this was one module.
"""

from __future__ import annotations

from .case import Case, fixed_case, produced_records
from .constants import (
    ADVERSARIAL_TOPICS,
    API_VERSIONS,
    COMPACTED_TOPIC,
    CONFIG_NAMES,
    CONFIG_VALUES,
    FIXED_FORMATS,
    GROUPS,
    INT_RANGES,
    POOL_TOPICS,
    WAIT_FIELDS,
    WAITING_APIS,
)
from .encoder import (
    Node,
    encode_entity,
    field_node,
    fixed_bytes,
    header_node,
    kio_bytes,
    primitive_node,
    render,
)
from .generator import cases, targeted_produce
from .mutations import MUTATION_WEIGHTS, MUTATIONS
from .records import (
    bomb,
    bomb_batch,
    build_batch,
    compress,
    encode_record,
    fix_crc,
    overlong_uvarint,
    uvarint,
    varint,
)
from .responses import decode_response, effective_header, split_frames
from .seeds import produce_case, raw_frame, request_case, seed_cases
from .strategies import (
    GROUP_IDS,
    PARTITIONS,
    TOPIC_NAMES,
    consumer_protocol_bytes,
    entity_strategy,
    field_strategy,
    primitive_strategy,
    record_sets,
    record_values,
    valid_batch,
)
from .validator import TooLarge, batch_problems

__all__ = [
    "ADVERSARIAL_TOPICS", "API_VERSIONS", "COMPACTED_TOPIC", "CONFIG_NAMES", "CONFIG_VALUES", "FIXED_FORMATS",
    "GROUPS", "GROUP_IDS", "INT_RANGES", "MUTATIONS", "MUTATION_WEIGHTS", "PARTITIONS", "POOL_TOPICS", "TOPIC_NAMES",
    "WAITING_APIS", "WAIT_FIELDS", "Case", "Node", "TooLarge", "batch_problems", "bomb", "bomb_batch", "build_batch",
    "cases", "compress", "consumer_protocol_bytes", "decode_response", "effective_header", "encode_entity",
    "encode_record", "entity_strategy", "field_node", "field_strategy", "fix_crc", "fixed_bytes", "fixed_case",
    "header_node", "kio_bytes", "overlong_uvarint", "primitive_node", "primitive_strategy", "produce_case",
    "produced_records", "raw_frame", "record_sets", "record_values", "render", "request_case", "seed_cases",
    "split_frames", "targeted_produce", "uvarint", "valid_batch", "varint",
]
