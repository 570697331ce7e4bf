"""Bounded exponential backoff for long-running services (mirror, audit counters, ...): every retriable error is
retried after a pause that doubles from ``initial`` up to ``maximum``, with jitter, and resets after a success."""

from __future__ import annotations

import random


class Backoff:
    def __init__(self, initial: float = 0.5, maximum: float = 30.0, jitter: float = 0.2):
        if initial <= 0 or maximum < initial:
            raise ValueError("backoff needs 0 < initial <= maximum")
        self.initial, self.maximum, self.jitter = initial, maximum, jitter
        self.attempts = 0

    def delay(self, failures: int) -> float:
        """The pause after ``failures`` earlier failures in a row, without jitter: initial, doubling, capped."""
        return min(self.maximum, self.initial * 2.0 ** min(max(failures, 0), 64))  # no overflow, however long

    def next(self) -> float:
        """The pause before the next attempt (and count this failure)."""
        base = self.delay(self.attempts)
        self.attempts += 1
        return base * (1 - self.jitter * random.random())

    def reset(self) -> None:
        self.attempts = 0
