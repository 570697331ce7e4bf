"""One replicated partition as this broker sees it: its role (leader or follower), the leader's view of each
follower (log end and log start offsets, when it was last caught up), the ISR, the high watermark over the ISR,
the low watermark over the live replicas, and the requests waiting for either (the purgatories: produce with
``acks=all``, DeleteRecords). No I/O here: ISR changes are proposed to
the replica manager, which writes them to ZooKeeper."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

from broker.log.log import PartitionLog
from broker.protocol.messages import ErrorCode


def now_ms() -> int:
    return int(time.monotonic() * 1000)


@dataclass
class FollowerState:
    leo: int = -1
    last_caught_up_ms: int = field(default_factory=now_ms)
    last_fetch_ms: int = 0
    leader_leo_at_last_fetch: int = -1
    log_start: int = -1  # as its last fetch said (Kafka's UnknownOffset until then)


class Partition:
    def __init__(self, topic: str, index: int, plog: PartitionLog, broker_id: int):
        self.topic = topic
        self.index = index
        self.log = plog
        self.broker_id = broker_id
        plog.replicated = True
        self.leader_id = -1
        self.leader_epoch = -1
        self.controller_epoch = -1
        self.isr: tuple[int, ...] = ()
        self.replicas: list[int] = []
        self.zk_version = -1
        self.zk_created = -1  # the state znode's creation zxid: (zk_created, zk_version) orders its reads
        self.followers: dict[int, FollowerState] = {}
        self._waiters: list[tuple[int, asyncio.Future]] = []
        self._start_waiters: list[asyncio.Future] = []  # DeleteRecords: woken when a follower's log start moves
        self.isr_update_pending = False

    @property
    def is_leader(self) -> bool:
        return self.leader_id == self.broker_id

    # ---- role changes --------------------------------------------------------------------------------------
    def become_leader(self, leader_epoch: int, isr: tuple[int, ...], replicas: list[int], zk_version: int,
                      controller_epoch: int) -> None:
        self.leader_id, self.leader_epoch = self.broker_id, leader_epoch
        self.isr, self.replicas, self.zk_version = tuple(isr), list(replicas), zk_version
        self.controller_epoch = controller_epoch
        self.log.begin_leader_epoch(leader_epoch)  # never raises: a full disk must not half-make a leader
        self.followers = {r: FollowerState() for r in replicas if r != self.broker_id}
        self.maybe_advance_high_watermark()

    def become_follower(self, leader_id: int, leader_epoch: int, isr: tuple[int, ...], replicas: list[int],
                        zk_version: int, controller_epoch: int) -> None:
        self.leader_id, self.leader_epoch = leader_id, leader_epoch
        self.isr, self.replicas, self.zk_version = tuple(isr), list(replicas), zk_version
        self.controller_epoch = controller_epoch
        self.log.leader_epoch = leader_epoch
        self.followers = {}
        self.fail_waiters(ErrorCode.not_leader_or_follower)
        self.wake_start_waiters()

    # ---- leader: followers' progress, high watermark ------------------------------------------------------
    def record_follower_fetch(self, replica_id: int, fetch_offset: int,
                              log_start: int = -1) -> tuple[int, ...] | None:
        """A follower asked for ``fetch_offset`` (so its log ends there; ``log_start``: its log starts there).
        Returns a larger ISR to propose when it has caught up and is not in the ISR, else None. A fetch past this
        log's end is no progress (it is answered OFFSET_OUT_OF_RANGE: the follower holds a tail this leader does
        not have, to be truncated): counted, it would raise the high watermark over records that follower does not
        hold (Kafka records a follower's position only after a successful read)."""
        follower = self.followers.get(replica_id)
        leader_leo = self.log.log_end_offset
        if follower is None or fetch_offset > leader_leo:
            return None
        now = now_ms()
        follower.leo = fetch_offset
        self.note_log_start(follower, log_start)
        if fetch_offset >= leader_leo:
            follower.last_caught_up_ms = now
        elif fetch_offset >= follower.leader_leo_at_last_fetch >= 0:
            follower.last_caught_up_ms = max(follower.last_caught_up_ms, follower.last_fetch_ms)
        follower.last_fetch_ms, follower.leader_leo_at_last_fetch = now, leader_leo
        self.maybe_advance_high_watermark()
        if replica_id not in self.isr and fetch_offset >= self.log.high_watermark:
            epoch_start = self._epoch_start()
            if fetch_offset >= epoch_start:
                return tuple(r for r in self.replicas if r in self.isr or r == replica_id)
        return None

    def note_quiet_fetch(self, replica_id: int, fetch_offset: int, leader_epoch: int, now: int | None,
                         log_start: int = -1) -> bool:
        """:meth:`record_follower_fetch` for the one case where it can only note progress: this broker leads at
        ``leader_epoch`` (-1: not checked), every record is committed, and a follower in the ISR asks for the log end
        (so neither the high watermark nor the ISR can move). Notes it (``now``; None: only checks) and returns
        True; False, noting nothing, in any other case."""
        hw = self.log.high_watermark
        if (not self.is_leader or leader_epoch not in (-1, self.leader_epoch) or fetch_offset != hw
                or self.log.log_end_offset != hw or replica_id not in self.isr):
            return False
        follower = self.followers.get(replica_id)
        if follower is None:
            return False
        if now is not None:
            follower.leo = follower.leader_leo_at_last_fetch = hw
            follower.last_caught_up_ms = follower.last_fetch_ms = now
            self.note_log_start(follower, log_start)
        return True

    # ---- leader: followers' log starts, the low watermark (DeleteRecords) ---------------------------------
    def note_log_start(self, follower: FollowerState, log_start: int) -> None:
        if log_start != follower.log_start:
            follower.log_start = log_start
            self.wake_start_waiters()

    def low_watermark(self, alive) -> int:
        """Kafka's ``lowWatermarkIfLeader``: the lowest log start offset of this replica and of the followers
        whose brokers are alive (``alive``: their ids); a follower not heard from since this broker became leader
        counts as -1."""
        low = self.log.log_start_offset
        for replica_id, follower in self.followers.items():
            if replica_id in alive and follower.log_start < low:
                low = follower.log_start
        return low

    async def wait_low_watermark(self, offset: int, timeout: float, alive) -> tuple[ErrorCode, int]:
        """Kafka's DelayedDeleteRecords: wait until every live replica's log starts at ``offset`` or later (the
        followers take the leader's log start from their next fetch and report theirs in the one after). ``alive``:
        a callable giving the live brokers' ids, asked again at every wake-up and twice a second (a broker that
        left stops counting). (NONE, low watermark), or REQUEST_TIMED_OUT, or NOT_LEADER_OR_FOLLOWER."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        leader_epoch = self.leader_epoch
        while True:
            if not self.is_leader or self.leader_epoch != leader_epoch:
                return ErrorCode.not_leader_or_follower, -1
            low = self.low_watermark(alive())
            if low >= offset:
                return ErrorCode.none, low
            remaining = deadline - loop.time()
            if remaining <= 0:
                return ErrorCode.request_timed_out, -1
            future = loop.create_future()
            self._start_waiters.append(future)
            try:
                async with asyncio.timeout(min(remaining, 0.5)):
                    await future
            except asyncio.TimeoutError:
                pass
            finally:
                if future in self._start_waiters:
                    self._start_waiters.remove(future)

    def wake_start_waiters(self) -> None:
        waiters, self._start_waiters = self._start_waiters, []
        for future in waiters:
            if not future.done():
                future.set_result(None)

    def _epoch_start(self) -> int:
        entries = self.log.epochs.entries
        return entries[-1][1] if entries and entries[-1][0] == self.leader_epoch else 0

    def lagging(self, max_lag_ms: int) -> tuple[int, ...] | None:
        """A smaller ISR without the followers not caught up for ``max_lag_ms``, or None if all keep up."""
        now = now_ms()
        out = [r for r in self.isr if r != self.broker_id
               and (r not in self.followers or now - self.followers[r].last_caught_up_ms > max_lag_ms)]
        if not out:
            return None
        return tuple(r for r in self.isr if r not in out)

    def maybe_advance_high_watermark(self) -> bool:
        if not self.is_leader:
            return False
        leos = [self.log.log_end_offset]
        for r in self.isr:
            if r != self.broker_id:
                follower = self.followers.get(r)
                leos.append(follower.leo if follower else -1)
        candidate = min(leos)
        if candidate <= self.log.high_watermark:
            return False
        self.log.high_watermark = candidate
        self._complete_waiters()
        return True

    # ---- acks=all purgatory -----------------------------------------------------------------------------------
    async def wait_committed(self, offset: int, timeout: float, leader_epoch: int | None = None) -> ErrorCode:
        """Wait until the high watermark reaches ``offset`` (the end of a produced batch). ``leader_epoch``: the
        epoch this broker led at when it appended; if it no longer leads at that epoch, NOT_LEADER_OR_FOLLOWER at
        once (a waiter not yet registered when leadership moved missed :meth:`fail_waiters`, and a follower's high
        watermark, or a new epoch's, says nothing of what this broker appended)."""
        if leader_epoch is not None and (not self.is_leader or self.leader_epoch != leader_epoch):
            return ErrorCode.not_leader_or_follower
        if self.log.high_watermark >= offset:
            return ErrorCode.none
        future = asyncio.get_running_loop().create_future()
        self._waiters.append((offset, future))
        try:
            async with asyncio.timeout(timeout):  # not wait_for: it can swallow a cancellation (Python 3.11)
                return await future
        except asyncio.TimeoutError:
            return ErrorCode.request_timed_out
        finally:
            self._waiters = [(o, f) for o, f in self._waiters if f is not future]

    def _complete_waiters(self) -> None:
        hw = self.log.high_watermark
        for offset, future in self._waiters:
            if offset <= hw and not future.done():
                future.set_result(ErrorCode.none)

    def fail_waiters(self, error: ErrorCode) -> None:
        for _, future in self._waiters:
            if not future.done():
                future.set_result(error)
