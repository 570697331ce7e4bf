"""Reconciliation: one pure function from audit events to report rows, used by the audit service (and meant
for the warehouse loads' Spark job).

For every (topic, window) the producers' monitoring events say how many messages were produced and which
sequence numbers each producer used; each tier's counts say what that tier received and which sequences it saw.
Per (topic, window, tier): expected, received, distinct, missing (expected sequences never seen, with the ranges),
duplicates (received - distinct), completeness %, and a status: ``complete``, ``pending`` (the window plus the
grace period has not passed yet), ``lost`` or ``duplicated``. Tier events are cumulative snapshots: the latest per
(tier, topic, window, producer) counts, so a counter that restarts and emits again is not counted twice; round
markers (producer id ``__round__``) only carry the counter's positions.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from audit.ranges import RangeSet

PRODUCED, TIER, ROUND = "PRODUCED", "TIER", "__round__"


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
    """Rows for every (topic, window) and tier. With several source datacenters (PRODUCED events carrying an
    ``origin``, the cluster whose ``_audit`` held them), a tier named after a source datacenter is judged against
    that datacenter's producers only; every other tier (the offline cluster, the warehouse) against all of them —
    their sum — and also once per source, as a row of its own named ``<tier>/<source>``."""
    expected: dict[tuple[str, int], dict[str, RangeSet]] = defaultdict(lambda: defaultdict(RangeSet))
    window_end: dict[tuple[str, int], int] = {}
    origin_of: dict[str, str] = {}
    latest: dict[tuple[str, str, int, str], dict] = {}
    all_tiers = set(tiers or [])
    for e in sorted(events, key=lambda e: e.get("emitted_at", 0)):
        if e["kind"] == PRODUCED:
            key = (e["topic"], e["window_start"])
            window_end[key] = max(window_end.get(key, 0), e["window_end"])
            expected[key][e["producer_id"]].add(e["first_seq"], e["last_seq"])
            if e.get("origin"):
                origin_of[e["producer_id"]] = e["origin"]
        elif e["producer_id"] != ROUND:
            latest[(e["tier"], e["topic"], e["window_start"], e["producer_id"])] = e  # cumulative: latest wins
            all_tiers.add(e["tier"])
    # per (tier, topic, window): producer -> (distinct sequences seen, messages received)
    seen: dict[tuple[str, str, int], dict[str, tuple[RangeSet, int]]] = defaultdict(dict)
    for (tier, topic, start, producer_id), e in latest.items():
        seen[(tier, topic, start)][producer_id] = (RangeSet(e.get("sequences") or []), e["count"])
    origins = sorted(set(origin_of.values()))
    rows = []
    for (topic, start), producers in sorted(expected.items()):
        end = window_end[(topic, start)]
        for tier in sorted(all_tiers):
            got = seen.get((tier, topic, start), {})
            if tier in origins:  # a source datacenter's tier: its own producers
                mine = {pid: rs for pid, rs in producers.items() if origin_of.get(pid) == tier}
                rows.append(_row(topic, start, end, tier, mine, got, now_ms, grace_ms))
                continue
            rows.append(_row(topic, start, end, tier, producers, got, now_ms, grace_ms))
            if len(origins) > 1:
                for origin in origins:
                    mine = {pid: rs for pid, rs in producers.items() if origin_of.get(pid) == origin}
                    part = {pid: v for pid, v in got.items() if origin_of.get(pid) == origin}
                    rows.append(_row(topic, start, end, f"{tier}/{origin}", mine, part, now_ms, grace_ms))
    return rows


def _row(topic: str, start: int, end: int, tier: str, producers: dict[str, RangeSet],
         got: dict[str, tuple[RangeSet, int]], now_ms: int, grace_ms: int) -> Row:
    total = sum(len(rs) for rs in producers.values())
    missing_ranges = {pid: rs.difference(got[pid][0] if pid in got else RangeSet()).as_list()
                      for pid, rs in producers.items()}
    missing_ranges = {pid: r for pid, r in missing_ranges.items() if r}
    missing = sum(b - a + 1 for r in missing_ranges.values() for a, b in r)
    distinct = sum(len(rs) for rs, _ in got.values())
    count = sum(n for _, n in got.values())
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
    return Row(topic, start, end, tier, total, count, distinct, missing, duplicates, completeness, status,
               missing_ranges)
