"""Kafka's quota arithmetic (``metrics.stats.Rate`` over a ``SampledStat``, ``QuotaUtils.throttleTime``). No I/O.

A rate is kept in ``quota.window.num`` samples of ``quota.window.size.seconds`` each. Its value is the sum of
the samples over the time they span, counted as at least ``num - 1`` whole windows (so a client's first burst
is spread over the whole window, as in Kafka, rather than measured over a few milliseconds). A sample is dropped
once ``num`` windows have passed since its last event. Over the bound, the throttle time is how long the client
must stay quiet for the rate to come back to it: ``(rate - bound) / bound × window``.
"""

from __future__ import annotations

from collections import deque


class Rate:
    __slots__ = ("num", "window_ms", "_samples")

    def __init__(self, num: int = 11, window_ms: int = 1000):
        self.num, self.window_ms = num, window_ms
        self._samples: deque = deque()  # [start ms, value, last event ms], oldest first

    def _purge(self, now: float) -> None:
        expire = self.num * self.window_ms
        samples = self._samples
        while samples and now - samples[0][2] >= expire:
            samples.popleft()

    def record(self, value: float, now: float) -> None:
        """Add ``value`` at ``now`` (milliseconds); a negative value takes back what was recorded."""
        self._purge(now)
        samples = self._samples
        if not samples or now - samples[-1][0] >= self.window_ms:
            samples.append([now, 0.0, now])
            if len(samples) > self.num + 1:  # Kafka keeps one sample more than num (the one overlapping the start)
                samples.popleft()
        last = samples[-1]
        last[1] += value
        last[2] = now

    def window(self, now: float) -> float:
        """Milliseconds the rate is measured over: the samples' span, at least ``num - 1`` whole windows."""
        self._purge(now)
        elapsed = now - (self._samples[0][0] if self._samples else now)
        full = int(elapsed // self.window_ms)
        if full < self.num - 1:
            elapsed += (self.num - 1 - full) * self.window_ms
        return max(elapsed, 1.0)

    def measure(self, now: float) -> float:
        """Units per second."""
        window = self.window(now)
        return sum(s[1] for s in self._samples) * 1000.0 / window

    def throttle_ms(self, bound: float, now: float) -> int:
        """Kafka's ``QuotaUtils.throttleTime``: 0 within the bound."""
        value = self.measure(now)
        if value <= bound:
            return 0
        return round((value - bound) / bound * self.window(now))

    def max_in_window(self, bound: float) -> float:
        """``ClientQuotaManager.getMaxValueInQuotaWindow``: what one request may take at most (a fetch's bytes)."""
        return bound * (self.num - 1) * self.window_ms / 1000.0


class TokenBucket:
    """Kafka's ``TokenBucket`` (KIP-599, the controller mutation quota): ``num × window`` seconds' worth of the
    quota as a burst, refilled at the quota's rate; a mutation takes its partitions' worth of tokens (the bucket
    may go below zero). Below zero the quota is exceeded, for ``-tokens / quota`` seconds."""

    __slots__ = ("num", "window_ms", "tokens", "last")

    def __init__(self, num: int = 11, window_ms: int = 1000):
        self.num, self.window_ms = num, window_ms
        self.tokens: float | None = None  # full at the first look
        self.last = 0.0

    def _refill(self, quota: float, now: float) -> None:
        burst = quota * self.num * self.window_ms / 1000.0
        tokens = burst if self.tokens is None else self.tokens + quota * (now - self.last) / 1000.0
        self.tokens, self.last = min(burst, tokens), now

    def record(self, value: float, quota: float, now: float) -> None:
        self._refill(quota, now)
        self.tokens -= value

    def throttle_ms(self, quota: float, now: float) -> int:
        self._refill(quota, now)
        return 0 if self.tokens >= 0 else round(-self.tokens / quota * 1000.0)
