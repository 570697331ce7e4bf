"""Incremental fetch sessions (KIP-227) in the broker's cache: opening, incremental requests, forgotten
partitions, what an incremental answer keeps, epochs, errors and eviction; and the leader's quiet path for a
follower session's partitions with nothing to tell (``broker.handlers.fetch._quiet``). The Fetch handler's use of
them is covered by kafka-python and the replica fetchers in tests/integration/test_fetch_sessions.py."""

from __future__ import annotations

from types import SimpleNamespace as NS

import pytest
from broker.fetch_sessions import FetchSessionCache
from broker.protocol.fetch_response import PartitionData
from broker.protocol.messages import ErrorCode

pytestmark = [pytest.mark.unit, pytest.mark.timeout(60)]


def request(session_id, epoch, topics=(), forgotten=()):
    """topics: {name: [(partition, fetch offset)]}; forgotten: {name: [partition]}."""
    return NS(session_id=session_id, session_epoch=epoch,
              topics=[NS(topic=name, partitions=[NS(partition=i, fetch_offset=o, partition_max_bytes=1 << 20,
                                                   current_leader_epoch=0, log_start_offset=-1)
                                                for i, o in parts])
                      for name, parts in dict(topics).items()],
              forgotten_topics_data=[NS(topic=name, partitions=list(ps)) for name, ps in dict(forgotten).items()])


def answer_of(context, state, records=()):
    """Run ``context`` against a fake log state {(topic, partition): hw}; ``records``: partitions with data."""
    topics = []
    for name, partitions in context.topics():
        topics.append((name, [PartitionData(p.partition, 0, state[(name, p.partition)], state[(name, p.partition)],
                                            0, b"x" if (name, p.partition) in records else b"")
                              for p in partitions]))
    return [(name, [(d.index, d.high_watermark) for d in ds]) for name, ds in context.answer(topics)]


def positions(context):
    return {(name, p.partition): p.fetch_offset for name, ps in context.topics() for p in ps}


def test_a_full_fetch_with_epoch_0_opens_a_session_and_incremental_ones_carry_only_news():
    cache = FetchSessionCache()
    state = {("a", 0): 5, ("a", 1): 7, ("b", 0): 0}
    full = cache.open(request(0, 0, {"a": [(0, 5), (1, 7)], "b": [(0, 0)]}), privileged=True)
    assert answer_of(full, state) == [("a", [(0, 5), (1, 7)]), ("b", [(0, 0)])]
    assert full.session_id > 0 and list(cache.sessions) == [full.session_id]

    # nothing changed: the incremental answer is empty, yet every partition of the session was read
    inc = cache.open(request(full.session_id, 1), privileged=True)
    assert positions(inc) == {("a", 0): 5, ("a", 1): 7, ("b", 0): 0}
    assert answer_of(inc, state) == []

    # a high watermark moved, another partition has records: both are news
    state[("a", 1)] = 9
    inc = cache.open(request(full.session_id, 2), privileged=True)
    assert answer_of(inc, state, records={("b", 0)}) == [("a", [(1, 9)]), ("b", [(0, 0)])]

    # the fetcher names only the partition that moved; the others keep their positions
    inc = cache.open(request(full.session_id, 3, {"b": [(0, 3)]}), privileged=True)
    assert positions(inc) == {("a", 0): 5, ("a", 1): 7, ("b", 0): 3}
    assert answer_of(inc, state) == []


def test_forgotten_partitions_leave_and_new_ones_join_and_are_answered_at_once():
    cache = FetchSessionCache()
    state = {("a", 0): 1, ("a", 1): 1, ("c", 4): 2}
    sid = cache.open(request(0, 0, {"a": [(0, 1), (1, 1)]}), False)
    answer_of(sid, state)
    inc = cache.open(request(sid.session_id, 1, {"c": [(4, 0)]}, forgotten={"a": [0]}), False)
    assert positions(inc) == {("a", 1): 1, ("c", 4): 0}
    assert answer_of(inc, state) == [("c", [(4, 2)])]
    assert cache.partitions_cached() == 2


def test_partitions_with_records_move_to_the_end_of_the_order():
    cache = FetchSessionCache()
    state = {("t", i): 0 for i in range(3)}
    ctx = cache.open(request(0, 0, {"t": [(0, 0), (1, 0), (2, 0)]}), False)
    answer_of(ctx, state)
    inc = cache.open(request(ctx.session_id, 1), False)
    answer_of(inc, state, records={("t", 0)})
    inc = cache.open(request(ctx.session_id, 2), False)
    assert [p.partition for _, ps in inc.topics() for p in ps] == [1, 2, 0]


def test_an_error_is_always_news_and_the_state_after_it_is_sent_again():
    cache = FetchSessionCache()
    ctx = cache.open(request(0, 0, {"t": [(0, 0)]}), False)
    answer_of(ctx, {("t", 0): 3})
    inc = cache.open(request(ctx.session_id, 1), False)
    assert inc.answer([("t", [PartitionData(0, ErrorCode.not_leader_or_follower.value)])]) == [
        ("t", [PartitionData(0, ErrorCode.not_leader_or_follower.value)])]
    inc = cache.open(request(ctx.session_id, 2), False)
    assert answer_of(inc, {("t", 0): 3}) == [("t", [(0, 3)])]


def test_session_errors_epochs_and_closing():
    cache = FetchSessionCache()
    assert cache.open(request(12345, 1), False).error == ErrorCode.fetch_session_id_not_found
    ctx = cache.open(request(0, 0, {"t": [(0, 0)]}), False)
    answer_of(ctx, {("t", 0): 0})
    assert cache.open(request(ctx.session_id, 2), False).error == ErrorCode.invalid_fetch_session_epoch
    assert cache.open(request(ctx.session_id, 1), False).error == ErrorCode.none
    assert cache.open(request(ctx.session_id, 1), False).error == ErrorCode.invalid_fetch_session_epoch  # replayed
    # a full fetch naming the session closes it; epoch -1 then runs without a session
    closing = cache.open(request(ctx.session_id, -1, {"t": [(0, 0)]}), False)
    assert closing.kind == "sessionless" and answer_of(closing, {("t", 0): 0}) == [("t", [(0, 0)])]
    assert closing.session_id == 0 and cache.sessions == {}
    # a sessionless fetch (what librdkafka and aiokafka send) never opens one; an empty full fetch neither
    assert cache.open(request(0, -1, {"t": [(0, 0)]}), False).kind == "sessionless"
    empty = cache.open(request(0, 0), False)
    assert answer_of(empty, {}) == [] and empty.session_id == 0 and cache.sessions == {}


def test_a_request_without_session_fields_is_sessionless():
    cache = FetchSessionCache()
    ctx = cache.open(NS(topics=[NS(topic="t", partitions=[NS(partition=0, fetch_offset=0,
                                                                partition_max_bytes=1)])]), False)
    assert ctx.kind == "sessionless" and ctx.session_id == 0


def test_eviction_prefers_stale_then_less_valuable_sessions():
    now = [0.0]
    cache = FetchSessionCache(max_slots=2, eviction_ms=1000, clock=lambda: now[0])

    def opened(parts, privileged):
        ctx = cache.open(request(0, 0, {"t": parts}), privileged)
        answer_of(ctx, {("t", i): 0 for i, _ in parts})
        return ctx.session_id

    small = opened([(0, 0)], False)
    big = opened([(0, 0), (1, 0)], False)
    # full: a consumer session no larger than the smallest gets none; a larger one takes the smallest's place
    assert opened([(0, 0)], False) == 0
    larger = opened([(0, 0), (1, 0), (2, 0)], False)
    assert larger and set(cache.sessions) == {big, larger} and cache.evictions == 1
    # a follower's session outranks any consumer's
    follower = opened([(0, 0)], True)
    assert follower and set(cache.sessions) == {larger, follower}
    # once unused for the eviction time, a session gives way to anyone; used ones stay
    now[0] = 0.5
    cache.open(request(follower, 1), True)
    now[0] = 1.2
    newcomer = opened([(5, 0)], False)
    assert newcomer and set(cache.sessions) == {follower, newcomer} and small not in cache.sessions


def test_no_slots_means_no_sessions():
    cache = FetchSessionCache(max_slots=0)
    ctx = cache.open(request(0, 0, {"t": [(0, 0)]}), True)
    assert ctx.kind == "sessionless" and answer_of(ctx, {("t", 0): 0}) == [("t", [(0, 0)])]
    assert ctx.session_id == 0


def test_the_epoch_wraps_to_1():
    cache = FetchSessionCache()
    ctx = cache.open(request(0, 0, {"t": [(0, 0)]}), False)
    answer_of(ctx, {("t", 0): 0})
    cache.sessions[ctx.session_id].epoch = 2**31 - 1
    assert cache.open(request(ctx.session_id, 2**31 - 1), False).error == ErrorCode.none
    assert cache.sessions[ctx.session_id].epoch == 1


# ---- the leader's quiet path (broker.handlers.fetch._quiet) ------------------------------------------------------
def quiet_setup(**changes):
    """A leader (broker 1) of t-0 at offset 10, all committed; follower 2 in the ISR, its session told (10, 10, 0)."""
    from broker.cluster.partition import FollowerState, Partition

    plog = NS(high_watermark=10, log_end_offset=10, last_stable_offset=10, log_start_offset=0)
    part = Partition("t", 0, plog, broker_id=1)
    part.leader_id, part.leader_epoch, part.isr, part.followers = 1, 4, (1, 2), {2: FollowerState(leo=7)}
    broker = NS(cluster=NS(partitions={("t", 0): part}), logs=NS(is_offline=lambda topic, index: False))
    cached = NS(partition=0, current_leader_epoch=4, fetch_offset=10, sent=(10, 10, 0))
    for key, value in changes.items():
        target, attr = key.split("__")
        setattr({"plog": plog, "part": part, "cached": cached}[target], attr, value)
    return broker, part, cached


def test_a_quiet_partition_notes_the_follower_at_the_log_end():
    from broker.handlers.fetch import _quiet

    broker, part, cached = quiet_setup()
    assert _quiet(broker, "t", cached, 2, now=12345)
    state = part.followers[2]
    assert (state.leo, state.leader_leo_at_last_fetch, state.last_caught_up_ms, state.last_fetch_ms) == \
        (10, 10, 12345, 12345)
    assert _quiet(broker, "t", cached, 2, now=None) and state.last_fetch_ms == 12345  # a later pass notes nothing


@pytest.mark.parametrize("change", [
    {"part__leader_id": 3},  # no longer the leader
    {"cached__current_leader_epoch": 3},  # the follower's epoch is stale: the general path fences it
    {"cached__fetch_offset": 9},  # the follower has not everything
    {"plog__log_end_offset": 11},  # new records
    {"plog__high_watermark": 9, "cached__fetch_offset": 9},  # not all committed: the HW may move
    {"part__isr": (1,)},  # the follower may rejoin the ISR
    {"plog__last_stable_offset": 8},  # news for the follower
    {"plog__log_start_offset": 5},
    {"cached__sent": object()},  # never told
    {"part__followers": {}},
])
def test_anything_to_do_or_tell_takes_the_general_path(change):
    from broker.handlers.fetch import _quiet

    broker, part, cached = quiet_setup(**change)
    assert not _quiet(broker, "t", cached, 2, now=1)


def test_an_offline_or_unknown_partition_takes_the_general_path():
    from broker.handlers.fetch import _quiet

    broker, _, cached = quiet_setup()
    broker.logs.is_offline = lambda topic, index: True
    assert not _quiet(broker, "t", cached, 2, now=1)
    broker, _, cached = quiet_setup()
    assert not _quiet(broker, "u", cached, 2, now=1)


def collect_quiet(broker, cached, first_pass=True, denied=frozenset(), partitions=1):
    from broker.handlers.fetch import collect

    broker.topics = {"t": NS(partitions=partitions)}
    request = NS(max_bytes=1 << 20, replica_id=2, isolation_level=0)
    return collect(broker, request, first_pass, denied, [("t", [cached])], incremental=True)


def test_collect_leaves_quiet_partitions_out_and_notes_progress_on_the_first_pass_only():
    broker, part, cached = quiet_setup()
    assert collect_quiet(broker, cached) == ([("t", [])], 0, False)
    noted = part.followers[2].last_fetch_ms
    assert noted > 0
    part.followers[2].last_fetch_ms = 1
    assert collect_quiet(broker, cached, first_pass=False) == ([("t", [])], 0, False)
    assert part.followers[2].last_fetch_ms == 1


def test_collect_still_refuses_unknown_partitions_and_denied_topics():
    broker, _, cached = quiet_setup()
    topics, _, errors = collect_quiet(broker, cached, partitions=0)  # the topic shrank: not quiet, unknown
    assert errors and topics[0][1][0].error_code == ErrorCode.unknown_topic_or_partition.value
    broker, _, cached = quiet_setup()
    topics, _, errors = collect_quiet(broker, cached, denied=frozenset({"t"}))
    assert errors and topics[0][1][0].error_code == ErrorCode.topic_authorization_failed.value
