"""Sets of integers kept as sorted, disjoint, inclusive ranges: sequence numbers seen by a tier, source offsets
covered by a counter. Memory grows with the number of gaps, not with the number of messages. Pure."""

from __future__ import annotations

from bisect import bisect_left


class RangeSet:
    def __init__(self, ranges=()):
        self.ranges: list[list[int]] = []
        for first, last in ranges:
            self.add(first, last)

    def add(self, first: int, last: int | None = None) -> None:
        last = first if last is None else last
        if last < first:
            return
        i = bisect_left(self.ranges, [first, first])
        if i > 0 and self.ranges[i - 1][1] >= first - 1:
            i -= 1
        j = i
        while j < len(self.ranges) and self.ranges[j][0] <= last + 1:
            first = min(first, self.ranges[j][0])
            last = max(last, self.ranges[j][1])
            j += 1
        self.ranges[i:j] = [[first, last]]

    def update(self, ranges) -> None:
        """Add sorted, disjoint ranges ``[(first, last), ...]`` (:func:`runs` gives them): only the part of this
        set that they reach is merged with them, in one pass, and spliced back once, so a batch costs its own size
        plus the ranges already in its span, not one list shift per value (``add``)."""
        if not ranges:
            return
        mine = self.ranges
        lo, hi = ranges[0][0], ranges[-1][1]
        i = bisect_left(mine, [lo, lo])
        if i > 0 and mine[i - 1][1] >= lo - 1:
            i -= 1
        j = bisect_left(mine, [hi + 2, hi + 2], i)  # the ranges before j start at most at hi + 1
        merged: list[list[int]] = []
        a, b = i, 0
        while a < j or b < len(ranges):
            if b >= len(ranges) or (a < j and mine[a][0] <= ranges[b][0]):
                first, last = mine[a]
                a += 1
            else:
                first, last = ranges[b]
                b += 1
            if merged and first <= merged[-1][1] + 1:
                if last > merged[-1][1]:
                    merged[-1][1] = last
            else:
                merged.append([first, last])
        mine[i:j] = merged

    def __len__(self) -> int:
        return sum(b - a + 1 for a, b in self.ranges)

    def __contains__(self, value: int) -> bool:
        i = bisect_left(self.ranges, [value + 1, value + 1]) - 1
        return i >= 0 and self.ranges[i][0] <= value <= self.ranges[i][1]

    def covers(self, other: "RangeSet") -> bool:
        return len(self.intersection(other)) == len(other)

    def intersection(self, other: "RangeSet") -> "RangeSet":
        out = RangeSet()
        i = j = 0
        while i < len(self.ranges) and j < len(other.ranges):
            a = max(self.ranges[i][0], other.ranges[j][0])
            b = min(self.ranges[i][1], other.ranges[j][1])
            if a <= b:
                out.add(a, b)
            if self.ranges[i][1] < other.ranges[j][1]:
                i += 1
            else:
                j += 1
        return out

    def difference(self, other: "RangeSet") -> "RangeSet":
        out = RangeSet()
        for first, last in self.ranges:
            start = first
            for a, b in other.ranges:
                if b < start or a > last:
                    continue
                if a > start:
                    out.add(start, a - 1)
                start = max(start, b + 1)
            if start <= last:
                out.add(start, last)
        return out

    def as_list(self) -> list[list[int]]:
        return [list(r) for r in self.ranges]


def runs(values) -> list[tuple[int, int]]:
    """The maximal runs of consecutive integers in ``values`` (any order, duplicates allowed), sorted."""
    out: list[tuple[int, int]] = []
    first = last = None
    for v in sorted(values):
        if last is not None and v <= last + 1:
            if v > last:
                last = v
            continue
        if last is not None:
            out.append((first, last))
        first = last = v
    if last is not None:
        out.append((first, last))
    return out
