"""Cases: a valid request for an advertised (api key, version), then mutations of its tree or of the frame."""

from __future__ import annotations

import datetime

from hypothesis import strategies as st
from kio.index import load_request_schema

from .case import Case
from .constants import POOL_TOPICS
from .encoder import _module, encode_entity, header_node, kio_bytes, render
from .mutations import MUTATION_WEIGHTS, MUTATIONS
from .strategies import _small_text, _weighted, entity_strategy, record_sets, valid_batch


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
