"""The purgatories of a leader's partition (broker.cluster.partition). acks=all: a waiting produce is completed by the
follower fetch that moves the high watermark past it — in that same call, not by a timer — and only once every
ISR member has it; it is failed when leadership goes, and times out when the ISR does not catch up. DeleteRecords:
answered once every live replica's log start has moved."""

from __future__ import annotations

import asyncio

import pytest
from broker.cluster.partition import Partition
from broker.protocol.messages import ErrorCode

pytestmark = [pytest.mark.unit, pytest.mark.timeout(30)]


class _Epochs:
    entries: list = []


class _Log:
    """What Partition reads and writes of a PartitionLog."""

    def __init__(self, end: int):
        self.replicated = False
        self.log_start_offset = 0
        self.log_end_offset = end
        self.high_watermark = 0
        self.leader_epoch = -1
        self.epochs = _Epochs()

    def begin_leader_epoch(self, epoch: int) -> None:
        self.leader_epoch = epoch


def leader(end: int, isr=(0, 1, 2)) -> Partition:
    part = Partition("t", 0, _Log(end), broker_id=0)
    part.become_leader(1, tuple(isr), [0, 1, 2], zk_version=0, controller_epoch=1)
    return part


def test_follower_fetches_complete_a_waiting_produce_in_the_call_that_moves_the_high_watermark():
    async def run():
        part = leader(end=10)
        waiting = asyncio.ensure_future(part.wait_committed(10, timeout=30))
        await asyncio.sleep(0)
        part.record_follower_fetch(1, 10)
        await asyncio.sleep(0)
        assert not waiting.done() and part.log.high_watermark == 0  # follower 2 of the ISR has nothing yet
        part.record_follower_fetch(2, 4)
        assert part.log.high_watermark == 4
        await asyncio.sleep(0)
        assert not waiting.done()  # the high watermark passed part of the batch only
        part.record_follower_fetch(2, 10)
        assert part.log.high_watermark == 10
        await asyncio.sleep(0)  # the waiter's result is set in that call; its task resumes on the next pass
        assert waiting.done() and waiting.result() == ErrorCode.none
        assert part._waiters == []

    asyncio.run(run())


def test_only_isr_members_hold_the_high_watermark_back():
    async def run():
        part = leader(end=7, isr=(0, 1))  # follower 2 is out of the ISR: its progress does not count
        waiting = asyncio.ensure_future(part.wait_committed(7, timeout=30))
        await asyncio.sleep(0)
        part.record_follower_fetch(1, 7)
        await asyncio.sleep(0)
        assert waiting.result() == ErrorCode.none and part.log.high_watermark == 7

    asyncio.run(run())


def test_waiting_produces_fail_when_leadership_moves_and_time_out_without_followers():
    async def run():
        part = leader(end=5)
        moved = asyncio.ensure_future(part.wait_committed(5, timeout=30))
        await asyncio.sleep(0)
        part.become_follower(1, 2, (1, 2), [0, 1, 2], zk_version=1, controller_epoch=1)
        assert await moved == ErrorCode.not_leader_or_follower
        part = leader(end=5)
        assert await part.wait_committed(5, timeout=0.05) == ErrorCode.request_timed_out
        assert part._waiters == []

    asyncio.run(run())


def test_a_follower_fetching_past_the_leaders_log_end_does_not_move_the_high_watermark():
    """A follower with a tail this leader does not have (a former leader's uncommitted records) asks past the log
    end: answered OFFSET_OUT_OF_RANGE, and no progress: counted, its offset raised the high watermark to the log
    end over records it does not hold, and an acks=all produce was acknowledged on one copy."""
    async def run():
        part = leader(end=10, isr=(0, 1))
        waiting = asyncio.ensure_future(part.wait_committed(10, timeout=30))
        await asyncio.sleep(0)
        part.record_follower_fetch(1, 15)
        await asyncio.sleep(0)
        assert part.log.high_watermark == 0 and not waiting.done()
        part.record_follower_fetch(1, 6)  # truncated to where the logs agree, it fetches from there
        assert part.log.high_watermark == 6
        part.record_follower_fetch(1, 10)
        await asyncio.sleep(0)
        assert waiting.result() == ErrorCode.none and part.log.high_watermark == 10

    asyncio.run(run())


def test_a_wait_that_starts_after_leadership_moved_fails_even_where_the_high_watermark_is_past_it():
    """The produce handler appends, then waits on a later pass of the event loop (its waits gathered): when
    leadership moved in between, the waiter missed fail_waiters, and a follower's high watermark (the new leader's
    log: other records at those offsets, once truncated) must not acknowledge it. Nor a later epoch of this
    broker's own leadership."""
    async def run():
        part = leader(end=5)
        appended_at = part.leader_epoch
        part.become_follower(1, 2, (1, 2), [0, 1, 2], zk_version=1, controller_epoch=1)
        part.log.high_watermark = 8  # the new leader's, as a follower learns it
        assert await part.wait_committed(5, timeout=30, leader_epoch=appended_at) == ErrorCode.not_leader_or_follower
        part.become_leader(3, (0, 1, 2), [0, 1, 2], zk_version=2, controller_epoch=1)
        part.log.high_watermark = 8
        assert await part.wait_committed(5, timeout=30, leader_epoch=appended_at) == ErrorCode.not_leader_or_follower
        assert await part.wait_committed(5, timeout=30, leader_epoch=3) == ErrorCode.none
        assert part._waiters == []

    asyncio.run(run())


def test_delete_records_waits_for_the_live_replicas_log_starts():
    """Kafka's low watermark (``lowWatermarkIfLeader``): the lowest log start of the leader and of the followers
    whose brokers are live; a follower not heard from since the leadership began counts as -1. A waiting
    DeleteRecords is woken by the fetch that reports a moved log start, ignores a broker that left, times out
    while a live one lags, and fails when leadership moves."""
    async def run():
        part = leader(end=10)
        part.log.log_start_offset = 6  # the leader's own, already moved
        live = {0, 1, 2}
        assert part.low_watermark(live) == -1
        waiting = asyncio.ensure_future(part.wait_low_watermark(6, 30, lambda: live))
        await asyncio.sleep(0)
        part.record_follower_fetch(1, 10, log_start=6)
        part.record_follower_fetch(2, 10, log_start=0)
        await asyncio.sleep(0)
        assert not waiting.done() and part.low_watermark(live) == 0
        part.record_follower_fetch(2, 10, log_start=6)
        await asyncio.sleep(0)
        assert await waiting == (ErrorCode.none, 6)

        part.log.log_start_offset = 8
        assert await part.wait_low_watermark(8, 0.05, lambda: live) == (ErrorCode.request_timed_out, -1)
        live = {0, 1}  # broker 2 left the cluster; follower 1 reports 8 in a quiet fetch
        part.log.high_watermark = 10
        assert part.note_quiet_fetch(1, 10, -1, 123, log_start=8)
        assert await part.wait_low_watermark(8, 30, lambda: live) == (ErrorCode.none, 8)

        part.log.log_start_offset = 9
        moved = asyncio.ensure_future(part.wait_low_watermark(9, 30, lambda: live))
        await asyncio.sleep(0)
        part.become_follower(1, 2, (1, 2), [0, 1, 2], zk_version=1, controller_epoch=1)
        assert await moved == (ErrorCode.not_leader_or_follower, -1)
        assert part._start_waiters == []

    asyncio.run(run())
