"""Reconciliation: one pure function from audit events to report rows, used by the audit service (and meant
for the warehouse loads' Spark job).

For every (topic, window) the producers' monitoring events say how many messages were produced and which
sequence numbers each producer used; each tier's counts say what that tier received and which sequences it saw.
Per (topic, window, tier): expected, received, distinct, missing (expected sequences never seen, with the ranges),
duplicates (received - distinct), completeness %, and a status: ``complete``, ``pending`` (the window plus the
grace period has not passed yet), ``lost`` or ``duplicated``. A tier event whose source offsets are already
covered by an earlier one is a replay (a restarted counter) and is not counted twice.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from audit.ranges import RangeSet

PRODUCED, TIER = "PRODUCED", "TIER"


@dataclass
class Row:
    topic: str
    window_start: int
    window_end: int
    tier: str
    expected: int
    received: int
    distinct: int
    missing: int
    duplicates: int
    completeness: float
    status: str
    missing_sequences: dict[str, list[list[int]]] = field(default_factory=dict)

    def as_dict(self) -> dict:
        return dict(self.__dict__)


def reconcile(events: list[dict], now_ms: int, grace_ms: int, tiers: list[str] | None = None) -> list[Row]:
    expected: dict[tuple[str, int], dict[str, RangeSet]] = defaultdict(lambda: defaultdict(RangeSet))
    window_end: dict[tuple[str, int], int] = {}
    seen: dict[tuple[str, str, int], dict[str, RangeSet]] = defaultdict(lambda: defaultdict(RangeSet))
    received: dict[tuple[str, str, int], int] = defaultdict(int)
    covered: dict[tuple[str, str, int, str], dict[int, RangeSet]] = defaultdict(lambda: defaultdict(RangeSet))
    all_tiers = set(tiers or [])
    for e in sorted(events, key=lambda e: e.get("emitted_at", 0)):
        key = (e["topic"], e["window_start"])
        window_end[key] = max(window_end.get(key, 0), e["window_end"])
        if e["kind"] == PRODUCED:
            expected[key][e["producer_id"]].add(e["first_seq"], e["last_seq"])
            continue
        tier_key = (e["tier"], e["topic"], e["window_start"])
        all_tiers.add(e["tier"])
        sources = covered[(*tier_key, e["producer_id"])]
        offsets = {r["partition"]: RangeSet([(r["first"], r["last"])]) for r in e.get("source") or []}
        if offsets and all(sources[p].covers(rs) for p, rs in offsets.items()):
            continue  # a replay of counts already merged
        for p, rs in offsets.items():
            for first, last in rs.ranges:
                sources[p].add(first, last)
        received[tier_key] += e["count"]
        for first, last in e.get("sequences") or []:
            seen[tier_key][e["producer_id"]].add(first, last)
    rows = []
    for (topic, start), producers in sorted(expected.items()):
        total = sum(len(rs) for rs in producers.values())
        end = window_end[(topic, start)]
        for tier in sorted(all_tiers):
            tier_key = (tier, topic, start)
            got = seen.get(tier_key, {})
            missing_ranges = {pid: rs.difference(got.get(pid, RangeSet())).as_list() for pid, rs in producers.items()}
            missing_ranges = {pid: r for pid, r in missing_ranges.items() if r}
            missing = sum(b - a + 1 for r in missing_ranges.values() for a, b in r)
            distinct = sum(len(rs) for rs in got.values())
            count = received.get(tier_key, 0)
            duplicates = max(count - distinct, 0)
            completeness = 100.0 if total == 0 else round(100.0 * (total - missing) / total, 4)
            if missing == 0 and duplicates == 0:
                status = "complete"
            elif now_ms < end + grace_ms:
                status = "pending"
            elif missing:
                status = "lost"
            else:
                status = "duplicated"
            rows.append(Row(topic, start, end, tier, total, count, distinct, missing, duplicates, completeness,
                            status, missing_ranges))
    return rows
