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
