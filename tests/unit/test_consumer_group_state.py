"""The "consumer" group protocol's state machine (KIP-848; broker.groups.consumer_group): epochs, the target
assignment, revocation before reassignment, fencing, session expiry, offset-commit checks."""

from __future__ import annotations

import pytest

from broker.groups.consumer_group import (
    STABLE,
    UNRELEASED,
    UNREVOKED,
    ConsumerGroup,
    HeartbeatError,
    range_assignment,
    uniform_assignment,
)
from broker.protocol.messages import ErrorCode

pytestmark = [pytest.mark.unit, pytest.mark.timeout(30)]

META = {"t": 4, "u": 2, "other": 3}


def beat(group, member_id="", epoch=0, topics=None, owned=None, regex=None, assignor=None, instance_id=None,
         now=0.0, rebalance_timeout_ms=-1):
    return group.heartbeat(member_id=member_id, epoch=epoch, instance_id=instance_id, rack_id=None,
                           rebalance_timeout_ms=rebalance_timeout_ms, topics=topics, regex=regex, assignor=assignor,
                           owned=owned, metadata=META, now=now)


def test_a_first_member_gets_everything_it_subscribes_to():
    g = ConsumerGroup("g")
    b = beat(g, topics=("t",))
    assert b.member_id and len(b.member_id) == 22 and b.epoch == 1
    assert b.assignment == {("t", p) for p in range(4)}
    assert g.state == "Stable"
    again = beat(g, b.member_id, 1, owned=b.assignment)
    assert again.assignment is None and again.epoch == 1  # nothing new: no assignment in the answer


def test_a_second_member_waits_for_the_first_to_revoke():
    g = ConsumerGroup("g")
    a = beat(g, "a", topics=("t",))
    b = beat(g, "b", topics=("t",))
    assert b.epoch == 2 and b.assignment == set()  # its partitions are still a's
    assert g.members["b"].state == UNRELEASED
    a2 = beat(g, "a", 1, owned=a.assignment)
    assert a2.epoch == 1 and len(a2.assignment) == 2  # a keeps its epoch while revoking
    assert g.members["a"].state == UNREVOKED and g.state == "Reconciling"
    assert beat(g, "b", 2, owned=set()).assignment is None  # a has not acknowledged yet: nothing for b
    a3 = beat(g, "a", 1, owned=a2.assignment)  # a no longer owns the revoked two
    assert a3.epoch == 2 and g.members["a"].state == STABLE
    b2 = beat(g, "b", 2, owned=set())
    assert len(b2.assignment) == 2 and not b2.assignment & a3.assignment if a3.assignment else True
    assert g.members["b"].assigned | g.members["a"].assigned == {("t", p) for p in range(4)}
    assert g.state == "Stable"


def test_no_partition_ever_has_two_owners_across_joins_and_leaves():
    g = ConsumerGroup("g")
    owned = {}
    ids = ["m1", "m2", "m3"]
    for i, mid in enumerate(ids):
        owned[mid] = beat(g, mid, topics=("t", "u")).assignment or set()
        for _ in range(4):  # everyone heartbeats with what it holds until the group settles
            for other in ids[: i + 1]:
                b = beat(g, other, g.members[other].epoch, owned=owned[other])
                if b.assignment is not None:
                    owned[other] = b.assignment
                holders = [p for m in g.members.values() for p in (m.assigned | m.revoking)]
                assert len(holders) == len(set(holders))
    assert g.state == "Stable"
    assert sorted(len(v) for v in owned.values()) == [2, 2, 2]
    beat(g, "m2", -1)
    assert "m2" not in g.members and g.epoch > g.members["m1"].epoch


def test_stale_epochs_unknown_members_and_bad_requests():
    g = ConsumerGroup("g")
    a = beat(g, "a", topics=("t",))
    with pytest.raises(HeartbeatError) as err:
        beat(g, "a", 7)
    assert err.value.error == ErrorCode.fenced_member_epoch
    with pytest.raises(HeartbeatError) as err:
        beat(g, "nobody", 3)
    assert err.value.error == ErrorCode.unknown_member_id
    with pytest.raises(HeartbeatError) as err:
        beat(g, "c")  # a join must name its subscription
    assert err.value.error == ErrorCode.invalid_request
    with pytest.raises(HeartbeatError) as err:
        beat(g, "c", topics=("t",), assignor="sticky")
    assert err.value.error == ErrorCode.unsupported_assignor
    with pytest.raises(HeartbeatError) as err:
        beat(g, "c", topics=(), regex="(")
    assert err.value.error == ErrorCode.invalid_regular_expression
    assert beat(g, "a", a.epoch, owned=a.assignment).epoch == 1


def test_a_regex_subscription_follows_the_topics():
    g = ConsumerGroup("g")
    b = beat(g, "a", topics=(), regex="t|u")
    assert b.assignment == {("t", p) for p in range(4)} | {("u", 0), ("u", 1)}


def test_a_member_that_does_not_revoke_in_time_is_fenced_and_silent_ones_expire():
    g = ConsumerGroup("g")
    a = beat(g, "a", topics=("t",), rebalance_timeout_ms=1000)
    beat(g, "b", topics=("t",), now=0.5)
    beat(g, "a", 1, owned=a.assignment, now=0.6)  # told to revoke two, by 1.6
    with pytest.raises(HeartbeatError) as err:
        beat(g, "a", 1, owned=a.assignment, now=2.0)
    assert err.value.error == ErrorCode.fenced_member_epoch and "a" not in g.members
    assert g.expire(100.0, 45_000) == ["b"] and g.state == "Empty"


def test_a_static_member_that_left_with_minus_two_comes_back_to_its_place():
    g = ConsumerGroup("g")
    beat(g, "a1", topics=("t",), instance_id="i")
    with pytest.raises(HeartbeatError) as err:
        beat(g, "a2", topics=("t",), instance_id="i")
    assert err.value.error == ErrorCode.unreleased_instance_id
    assert beat(g, "a1", -2).epoch == -2
    back = beat(g, "a2", topics=("t",), instance_id="i")
    assert back.assignment == {("t", p) for p in range(4)} and "a1" not in g.members


def test_offset_commits_need_the_current_epoch():
    g = ConsumerGroup("g")
    a = beat(g, "a", topics=("t",))
    assert g.check_commit("a", a.epoch) == ErrorCode.none
    assert g.check_commit("a", a.epoch - 1) == ErrorCode.stale_member_epoch
    assert g.check_commit("x", 1) == ErrorCode.unknown_member_id


def test_the_assignors():
    subs = {"a": {"t"}, "b": {"t", "u"}}
    uniform = uniform_assignment(subs, {"t": 4, "u": 2}, {})
    assert sorted(len(v) for v in uniform.values()) == [3, 3]
    assert all(tp[0] == "t" for tp in uniform["a"])
    sticky = uniform_assignment(subs, {"t": 4, "u": 2}, uniform)
    assert sticky == uniform
    ranged = range_assignment({"a": {"t"}, "b": {"t"}, "c": {"t"}}, {"t": 4})
    assert ranged == {"a": {("t", 0), ("t", 1)}, "b": {("t", 2)}, "c": {("t", 3)}}


def test_refused_joins_leave_nothing_and_a_static_rejoin_keeps_its_instance():
    g = ConsumerGroup("g")
    with pytest.raises(HeartbeatError):
        beat(g, "x", topics=(), regex="(", instance_id="i")
    assert not g.members and not g.static and g.epoch == 0
    beat(g, "a", topics=("t",), instance_id="i")
    assert beat(g, "a", -2).epoch == -2
    beat(g, "a", topics=("t",), instance_id="i")  # the same member id back (KIP-1082 clients keep theirs)
    assert g.static == {"i": "a"}
    with pytest.raises(HeartbeatError) as err:
        beat(g, "b", topics=("t",), instance_id="i")
    assert err.value.error == ErrorCode.unreleased_instance_id


def test_a_new_assignor_computes_the_target_again():
    g = ConsumerGroup("g")
    a = beat(g, "a", topics=("t",))
    epoch = g.epoch
    beat(g, "a", a.epoch, owned=a.assignment, assignor="range")
    assert g.epoch == epoch + 1 and g.assignor == "range" and g.assignment_epoch == g.epoch


def test_a_static_member_back_after_minus_two_gets_its_partitions_and_nobody_took_them():
    g = ConsumerGroup("g")
    owned = {"a": beat(g, "a", topics=("t",), instance_id="i").assignment, "b": set()}
    owned["b"] = beat(g, "b", topics=("t",)).assignment
    for _ in range(3):  # settle at two each
        for mid in ("a", "b"):
            b = beat(g, mid, g.members[mid].epoch, owned=owned[mid])
            owned[mid] = b.assignment if b.assignment is not None else owned[mid]
    assert len(owned["a"]) == len(owned["b"]) == 2 and g.state == "Stable"
    before = set(owned["a"])
    beat(g, "a", -2)
    for _ in range(3):
        b = beat(g, "b", g.members["b"].epoch, owned=owned["b"])
        owned["b"] = b.assignment if b.assignment is not None else owned["b"]
    assert owned["b"].isdisjoint(before)  # held for the static member meanwhile
    back = beat(g, "a2", topics=("t",), instance_id="i")
    assert back.assignment == before


def test_a_restored_group_goes_on_where_the_snapshot_left_it():
    """What a new coordinator reads (snapshot → JSON → restore): members keep their ids, epochs, partitions and
    a revocation under way; the next heartbeats carry on with no rejoin."""
    import json

    g = ConsumerGroup("g")
    a = beat(g, "a", topics=("t",), instance_id="ia")
    beat(g, "b", topics=("t",))
    a2 = beat(g, "a", 1, owned=a.assignment)  # a revoking two partitions for b
    state = json.loads(json.dumps(g.snapshot()))
    r = ConsumerGroup.restore("g", state, now=100.0)
    assert r.snapshot() == g.snapshot()
    assert (r.epoch, r.assignment_epoch, r.static) == (2, 2, {"ia": "a"})
    assert r.members["a"].state == UNREVOKED and r.members["a"].revoke_deadline == 100.0 + 300
    assert r.members["a"].last_heartbeat == 100.0
    a3 = beat(r, "a", 1, owned=a2.assignment, now=100.5)  # the same epoch goes on: no UNKNOWN_MEMBER_ID
    assert a3.epoch == 2 and r.members["a"].state == STABLE
    b2 = beat(r, "b", 2, owned=set(), now=100.5)
    assert len(b2.assignment) == 2 and not b2.assignment & r.members["a"].assigned
    assert r.expire(100.0 + 44, 45_000) == [] and r.expire(100.6 + 46, 45_000) == ["a", "b"]
