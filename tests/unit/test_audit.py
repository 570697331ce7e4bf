"""Audit logic: sequence range sets and the reconciliation function."""

import pytest
from audit.ranges import RangeSet
from audit.reconcile import reconcile

pytestmark = pytest.mark.unit


def test_range_set_merges_and_subtracts():
    rs = RangeSet()
    for first, last in ((5, 9), (0, 2), (3, 4), (20, 20), (11, 12)):
        rs.add(first, last)
    assert rs.as_list() == [[0, 9], [11, 12], [20, 20]]
    assert len(rs) == 13 and 11 in rs and 10 not in rs
    assert RangeSet([(0, 20)]).difference(rs).as_list() == [[10, 10], [13, 19]]
    assert rs.covers(RangeSet([(1, 3), (11, 11)])) and not rs.covers(RangeSet([(9, 10)]))


def produced(topic, start, pid, first, last, emitted=0):
    return {"kind": "PRODUCED", "tier": "producer", "producer_id": pid, "topic": topic, "window_start": start,
            "window_end": start + 60_000, "count": last - first + 1, "first_seq": first, "last_seq": last,
            "emitted_at": emitted}


def tier(name, topic, start, pid, seqs, count, source, emitted=1):
    return {"kind": "TIER", "tier": name, "producer_id": pid, "topic": topic, "window_start": start,
            "window_end": start + 60_000, "count": count, "sequences": seqs, "emitted_at": emitted,
            "source": [{"partition": p, "first": a, "last": b} for p, a, b in source]}


def test_reconcile_tells_loss_from_duplication_and_ignores_replays():
    events = [produced("pv", 0, "p1", 0, 99), produced("pv", 0, "p2", 0, 49),
              tier("live", "pv", 0, "p1", [[0, 99]], 100, [(0, 0, 99)]),
              tier("live", "pv", 0, "p2", [[0, 49]], 50, [(1, 0, 49)]),
              tier("live", "pv", 0, "p2", [[0, 49]], 50, [(1, 0, 49)], emitted=5),  # a restarted counter's replay
              tier("offline", "pv", 0, "p1", [[0, 39], [45, 99]], 95, [(0, 0, 94)]),  # 40..44 lost
              tier("offline", "pv", 0, "p2", [[0, 49]], 60, [(1, 0, 59)])]  # 10 duplicates
    rows = {r.tier: r for r in reconcile(events, now_ms=10**9, grace_ms=0)}
    live, offline = rows["live"], rows["offline"]
    assert (live.expected, live.received, live.distinct, live.missing, live.duplicates, live.status) == \
        (150, 150, 150, 0, 0, "complete")
    assert (offline.received, offline.distinct, offline.missing, offline.duplicates) == (155, 145, 5, 10)
    assert offline.missing_sequences == {"p1": [[40, 44]]} and offline.status == "lost"
    assert offline.completeness == pytest.approx(100 * 145 / 150)


def test_reconcile_status_pending_then_duplicated():
    events = [produced("c", 0, "p", 0, 9), tier("t", "c", 0, "p", [[0, 9]], 12, [(0, 0, 11)])]
    assert reconcile(events, now_ms=30_000, grace_ms=60_000)[0].status == "pending"
    assert reconcile(events, now_ms=10**9, grace_ms=60_000)[0].status == "duplicated"
    missing_tier = reconcile([produced("c", 0, "p", 0, 9)], now_ms=10**9, grace_ms=0, tiers=["offline"])[0]
    assert (missing_tier.tier, missing_tier.missing, missing_tier.status) == ("offline", 10, "lost")
