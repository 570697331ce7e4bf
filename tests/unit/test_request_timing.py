"""A request's own running time (broker.network.timing), what ``request_percentage`` quotas charge: the steps of a
handler that waits are timed, its waits are not; results, exceptions and cancellations pass through."""

import asyncio
import time

import pytest

from broker.network.timing import RequestClock, Timed

pytestmark = [pytest.mark.unit, pytest.mark.timeout(30)]


def busy(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


async def handler(result="answer"):
    busy(0.02)
    await asyncio.sleep(0.2)  # a long poll: other requests run meanwhile
    busy(0.02)
    return result


def test_the_steps_are_timed_and_the_wait_is_not():
    async def run():
        clock = RequestClock()
        clock.pause()
        assert await Timed(handler(), clock) == "answer"
        return clock.spent

    spent = asyncio.run(run())
    assert 0.04 <= spent < 0.15, spent


def test_exceptions_and_cancellations_pass_through():
    cancelled = []

    async def failing():
        await asyncio.sleep(0)
        raise ValueError("refused")

    async def waiting():
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled.append(True)
            raise

    async def timed(coro):
        clock = RequestClock()
        clock.pause()
        return await Timed(coro, clock)

    async def run():
        with pytest.raises(ValueError):
            await timed(failing())
        task = asyncio.ensure_future(timed(waiting()))
        await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert cancelled == [True]  # the handler itself saw the cancellation

    asyncio.run(run())
