"""Incremental fetch sessions (KIP-227): the broker remembers what a fetcher asks for, so later Fetch requests
name only the partitions whose position changed and the answers carry only the partitions that have news.

A follower fetching a leader's hundred partitions (``__transaction_state``'s fifty among them, idle most of the
time) otherwise names every one of them in every request, and gets every one back in every answer: per-partition
encoding and decoding on both brokers, for nothing. Kafka's replica fetchers and its Java consumer open a session;
so do kafka-python (3.x, tested here) and this broker's own replica fetcher. librdkafka and aiokafka fetch sessionless.

The rules, as Kafka's ``FetchSession.scala`` applies them (Fetch v7+, ``session_id`` and ``session_epoch``):

- ``session_id`` 0, epoch -1: a full fetch without a session (what every Fetch before v7 is).
- epoch 0: a full fetch that opens a session; the answer carries its id (0 when the cache has no room). A
  ``session_id`` named in a full fetch (epoch 0 or -1) is closed first.
- ``session_id`` N, epoch E > 0: an incremental fetch. The partitions it names are added to the session or
  have their position updated; ``forgotten_topics_data`` leaves it. An unknown id is FETCH_SESSION_ID_NOT_FOUND,
  an epoch other than the expected one is INVALID_FETCH_SESSION_EPOCH (both in the answer's top-level error, with
  no partitions and session id 0; the client starts over with a full fetch).
- An incremental answer carries a partition when it has records, an error, or a high watermark, last stable
  offset or log start offset other than the last one this session was told. Partitions that answered with
  records move to the end of the session's order, so one busy partition cannot always take the byte budget first.

Cache: ``max.incremental.fetch.session.cache.slots`` sessions (Kafka's default 1000). When it is full, a new
session takes the place of one unused for ``min.incremental.fetch.session.eviction.ms`` (Kafka's fixed 120 s),
else of the least valuable one, if that one is worth less: a follower's session is worth more than a consumer's,
and among equals a larger one more than a smaller one. Otherwise the fetch runs without a session.

No I/O here: the Fetch handler asks :meth:`FetchSessionCache.open` for a :class:`FetchContext`, reads the logs for
``context.topics()`` and gives the answer's partitions to :meth:`FetchContext.answer`.
"""

from __future__ import annotations

import random
import time
from collections import OrderedDict

from broker.protocol.fetch_response import records_size
from broker.protocol.messages import ErrorCode

INITIAL_EPOCH, FINAL_EPOCH = 0, -1
INVALID_SESSION_ID = 0
EVICTION_MS = 120_000  # Kafka's MIN_INCREMENTAL_FETCH_SESSION_EVICTION_MS
_UNSENT = object()  # a partition's state before its first answer: whatever it is, it is news


class CachedPartition:
    """One partition of a session: the position the fetcher last named, and what it was last told."""
    __slots__ = ("partition", "fetch_offset", "partition_max_bytes", "current_leader_epoch", "log_start_offset",
                 "sent")

    def __init__(self, p):
        self.partition = p.partition
        self.sent = _UNSENT  # (high watermark, last stable offset, log start offset) last answered
        self.update(p)

    def update(self, p) -> None:
        self.fetch_offset = p.fetch_offset
        self.partition_max_bytes = p.partition_max_bytes
        self.current_leader_epoch = getattr(p, "current_leader_epoch", -1)
        self.log_start_offset = getattr(p, "log_start_offset", -1)


class FetchSession:
    __slots__ = ("id", "privileged", "partitions", "epoch", "last_used")

    def __init__(self, session_id: int, privileged: bool, now: float):
        self.id = session_id
        self.privileged = privileged  # a follower's
        self.partitions: OrderedDict[tuple[str, int], CachedPartition] = OrderedDict()
        self.epoch = 1  # the epoch the next incremental fetch must carry
        self.last_used = now

    def worth(self) -> tuple[bool, int]:
        return self.privileged, len(self.partitions)


def next_epoch(epoch: int) -> int:
    return 1 if epoch >= 2**31 - 1 else epoch + 1


class FetchContext:
    """What one Fetch request reads and how its answer is cut down. ``error``: a top-level error, nothing read."""

    def __init__(self, cache: "FetchSessionCache", kind: str, request=None, session: FetchSession | None = None,
                 privileged: bool = False, error: ErrorCode = ErrorCode.none):
        self.cache, self.kind, self.request, self.session = cache, kind, request, session
        self.privileged, self.error = privileged, error
        self.session_id = INVALID_SESSION_ID if session is None else session.id

    def topics(self) -> list:
        """[(topic, [partition with .partition, .fetch_offset, .partition_max_bytes, .current_leader_epoch])]."""
        if self.kind != "incremental":
            return [(t.topic, t.partitions) for t in self.request.topics]
        by_topic: dict[str, list] = {}
        for (topic, _), cached in self.session.partitions.items():
            by_topic.setdefault(topic, []).append(cached)
        return list(by_topic.items())

    def answer(self, topics: list) -> list:
        """The answer's topics: all of them for a full fetch (which may open a session), the ones with news for an
        incremental one. Updates what the session was told."""
        if self.kind == "sessionless":
            return topics
        if self.kind == "full":
            session = self.cache.create(self.request, self.privileged)
            if session is not None:
                self.session_id = session.id
                _told(session, topics)
            return topics
        session = self.session
        out = []
        moved = []
        for name, partitions in topics:
            kept = []
            for data in partitions:
                key = (name, data.index)
                cached = session.partitions.get(key)
                state = (data.high_watermark, data.last_stable_offset, data.log_start_offset)
                has_records = records_size(data.records) > 0
                if data.error_code or has_records or cached is None or cached.sent != state:
                    kept.append(data)
                    if cached is not None:
                        cached.sent = state if not data.error_code else _UNSENT
                        if has_records:
                            moved.append(key)
            if kept:
                out.append((name, kept))
        for key in moved:
            session.partitions.move_to_end(key)
        return out


def _told(session: FetchSession, topics: list) -> None:
    for name, partitions in topics:
        for data in partitions:
            cached = session.partitions.get((name, data.index))
            if cached is not None and not data.error_code:
                cached.sent = (data.high_watermark, data.last_stable_offset, data.log_start_offset)


class FetchSessionCache:
    def __init__(self, max_slots: int = 1000, eviction_ms: int = EVICTION_MS, clock=time.monotonic):
        self.max_slots = max_slots
        self.eviction_s = eviction_ms / 1000
        self.clock = clock
        self.sessions: dict[int, FetchSession] = {}
        self.evictions = 0

    def open(self, request, privileged: bool) -> FetchContext:
        """The context of one Fetch request (``privileged``: from a follower)."""
        session_id = getattr(request, "session_id", INVALID_SESSION_ID)
        epoch = getattr(request, "session_epoch", FINAL_EPOCH)
        if epoch in (INITIAL_EPOCH, FINAL_EPOCH):
            if session_id != INVALID_SESSION_ID:
                self.sessions.pop(session_id, None)
            kind = "full" if epoch == INITIAL_EPOCH and self.max_slots > 0 else "sessionless"
            return FetchContext(self, kind, request, privileged=privileged)
        session = self.sessions.get(session_id)
        if session is None:
            return FetchContext(self, "error", error=ErrorCode.fetch_session_id_not_found)
        if session.epoch != epoch:
            return FetchContext(self, "error", error=ErrorCode.invalid_fetch_session_epoch)
        for t in getattr(request, "forgotten_topics_data", ()) or ():
            for index in t.partitions:
                session.partitions.pop((t.topic, index), None)
        for t in request.topics:
            for p in t.partitions:
                cached = session.partitions.get((t.topic, p.partition))
                if cached is None:
                    session.partitions[(t.topic, p.partition)] = CachedPartition(p)
                else:
                    cached.update(p)
        session.epoch = next_epoch(epoch)
        session.last_used = self.clock()
        return FetchContext(self, "incremental", request, session, privileged)

    def create(self, request, privileged: bool) -> FetchSession | None:
        """A new session holding ``request``'s partitions, or None (nothing to hold, or no room)."""
        if not any(t.partitions for t in request.topics):
            return None
        now = self.clock()
        session = FetchSession(self._new_id(), privileged, now)
        for t in request.topics:
            for p in t.partitions:
                session.partitions[(t.topic, p.partition)] = CachedPartition(p)
        if len(self.sessions) >= self.max_slots and not self._evict_for(session, now):
            return None
        self.sessions[session.id] = session
        return session

    def _evict_for(self, new: FetchSession, now: float) -> bool:
        stale = [s for s in self.sessions.values() if now - s.last_used >= self.eviction_s]
        if stale:
            victim = min(stale, key=lambda s: s.last_used)
        else:
            victim = min(self.sessions.values(), key=lambda s: (*s.worth(), s.last_used))
            if victim.worth() >= new.worth():
                return False
        del self.sessions[victim.id]
        self.evictions += 1
        return True

    def _new_id(self) -> int:
        while True:
            session_id = random.randint(1, 2**31 - 1)
            if session_id not in self.sessions:
                return session_id

    def partitions_cached(self) -> int:
        return sum(len(s.partitions) for s in self.sessions.values())
