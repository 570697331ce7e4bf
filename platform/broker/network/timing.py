"""A request's own running time, for ``request_percentage`` quotas (Kafka's request handler and network thread
time): the broker runs every request on one event loop, so a request that waits (a long-polling fetch, an
``acks=all`` produce) must not be charged for the time other requests ran meanwhile. :class:`Timed` wraps a
handler's awaitable and adds up the time of its steps only, the time between them (the waits) left out. No I/O.
"""

from __future__ import annotations

import time

_clock = time.perf_counter

# SaslHandshake, SaslAuthenticate and WriteTxnMarkers (a broker's, Kafka's cluster action) are never throttled;
# nor are followers' fetches (the listener checks their replica id)
EXEMPT_KEYS = frozenset((17, 36, 27))


class RequestClock:
    """Seconds of running time, started when made."""

    __slots__ = ("spent", "mark")

    def __init__(self):
        self.spent = 0.0
        self.mark = _clock()

    def pause(self) -> None:
        self.spent += _clock() - self.mark

    def resume(self) -> None:
        self.mark = _clock()

    def total(self) -> float:
        """Running time so far (the clock running)."""
        return self.spent + _clock() - self.mark


class Timed:
    """``await Timed(awaitable, clock)``: the awaitable's result, its steps timed on ``clock`` (paused on entry
    and left paused). Cancellation and other exceptions thrown in are passed on to the awaitable."""

    __slots__ = ("awaitable", "clock")

    def __init__(self, awaitable, clock: RequestClock):
        self.awaitable, self.clock = awaitable, clock

    def __await__(self):
        it = self.awaitable.__await__()
        clock = self.clock
        step, value = it.send, None
        while True:
            clock.resume()
            try:
                signal = step(value)
            except StopIteration as done:
                clock.pause()
                return done.value
            except BaseException:
                clock.pause()
                raise
            clock.pause()
            try:
                value, step = (yield signal), it.send
            except GeneratorExit:
                it.close()
                raise
            except BaseException as exc:  # noqa: BLE001 - thrown into the await (a cancellation): passed on
                value, step = exc, it.throw
