"""Follower side of replication: one fetcher per leader broker copies that leader's partitions, like a consumer
that says who it is (Fetch with ``replica_id`` = this broker's id), asking for its own log end offset.

Before fetching a partition it has just started to follow, the fetcher asks the leader where this replica's
latest leader epoch ends (OffsetForLeaderEpoch) and truncates its log there: a divergent tail written under
an older leader is dropped, acknowledged data is kept (KIP-101/279). Copied batches are appended as they are
(offsets and epochs kept); the follower's high watermark follows the leader's.

A write this replica's disk refuses (a full log dir) leaves its log as it was (see PartitionLog) and only pauses
that partition: it is fetched again from the same offset after ``replica.fetch.backoff.ms`` (at most
``STORAGE_RETRY_S``), the connection and the other partitions carry on, and the incident is reported once, not
per attempt. Meanwhile the leader drops this replica from the ISR if it falls behind; it rejoins once it catches
up after space returns.

The fetcher keeps an incremental fetch session (KIP-227, :mod:`broker.fetch_sessions`) with its leader: after a
full fetch that opens it, a request names only the partitions whose position (offset, leader epoch) changed
since the last one and the partitions that left (forgotten), and the answer carries only partitions with news.
An idle partition then costs neither broker an entry per fetch. A session error (the leader restarted, evicted
it, or lost count of its epoch) or a new connection starts over with a full fetch, which closes the old session.

Timeouts use ``asyncio.timeout``, never ``asyncio.wait_for``: on Python 3.11 ``wait_for`` swallows a
cancellation that arrives as the awaited read completes (a third of the time on a busy connection in a
test), and a fetcher that outlived its cancellation kept a stopping broker from ever exiting. :meth:`stop`
also sets a flag the loop checks and closes the connection, and waits a bounded time.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass

from broker.log.log import NotContiguous
from broker.log.storage_errors import incidents, log_dir_of
from broker.network.connect import open_broker_connection, renewal_due
from broker.network.frames import FrameReader, take_over
from broker.protocol import codec, fetch_request, fetch_response, records
from broker.protocol.messages import ErrorCode

log = logging.getLogger(__name__)

FETCH_KEY, FETCH_VERSION = fetch_request.KEY, fetch_request.VERSION
EPOCH_KEY, EPOCH_VERSION = 23, 3
STORAGE_RETRY_S = 1.0
RETRY_ERRORS = {ErrorCode.not_leader_or_follower, ErrorCode.fenced_leader_epoch, ErrorCode.unknown_leader_epoch,
                ErrorCode.unknown_topic_or_partition, ErrorCode.leader_not_available}


@dataclass
class Followed:
    partition: object  # broker.cluster.partition.Partition
    needs_truncation: bool = True
    retry_at: float = 0.0  # the leader refused it (e.g. it has not learnt of its leadership yet): retry then


class LeaderFetcher:
    def __init__(self, manager, leader_id: int):
        self.manager = manager
        self.broker = manager.broker
        self.leader_id = leader_id
        self.partitions: dict[tuple[str, int], Followed] = {}
        self._wakeup = asyncio.Event()
        self._task: asyncio.Task | None = None
        self._reader: FrameReader | None = None  # the connection's reads (a buffered protocol: no copies)
        self._writer: asyncio.StreamWriter | None = None
        self._correlation = 0
        self._login_refused: str | None = None  # the last refused login, logged once
        self._client_id = f"replica-fetcher-{self.broker.node_id}".encode()
        self._stopping = False
        self._session_id = 0  # the leader's fetch session (0: none yet)
        self._session_epoch = 0  # the epoch of the next request in it (0: a full fetch that opens one)
        self._in_session: dict[tuple[str, int], tuple[int, int]] = {}  # what the session holds: (epoch, offset)
        self._restart = False  # the next fetch must be full (a session partition was skipped or replaced)

    def add(self, partition) -> None:
        if self._stopping:
            return
        key = (partition.topic, partition.index)
        self.partitions[key] = Followed(partition)
        if key in self._in_session:  # followed anew (a new leader epoch): what the leader told the old one may
            self._restart = True  # never have been applied, so the next fetch is a full one
        self._wakeup.set()
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run())

    def remove(self, key: tuple[str, int]) -> None:
        self.partitions.pop(key, None)

    async def stop(self, timeout: float) -> bool:
        """Stop fetching and close the connection; False when the task did not end within ``timeout``."""
        self._stopping = True
        self._wakeup.set()
        self._close(abort=True)  # a pending read ends at once
        if self._task is None or self._task.done():
            return True
        self._task.cancel()
        done, _ = await asyncio.wait({self._task}, timeout=timeout)
        if not done:
            log.warning("replica fetcher for broker %d did not stop within %gs", self.leader_id, timeout)
        return bool(done)

    # ---- connection -------------------------------------------------------------------------------------------
    def _close(self, abort: bool = False, renewing: bool = False) -> None:
        if not renewing:  # an answer may have been lost with the connection: start over with a full fetch
            self._session_epoch = 0
        if self._writer is not None:
            if abort:
                self._writer.transport.abort()
            else:
                self._writer.close()
        self._reader = self._writer = None

    async def _connect(self) -> bool:
        info = self.manager.metadata.brokers.get(self.leader_id)
        if info is None:
            return False
        host, port = info.endpoint(self.broker.config.inter_broker_listener)
        if host is None:  # the leader has no listener of our inter-broker name: its registered address
            host, port = info.host, info.port
        try:
            async with asyncio.timeout(10):
                reader, writer = await open_broker_connection(self.broker.config, host, port,
                                                              self._client_id.decode())
        except (OSError, asyncio.TimeoutError) as exc:  # ConnectionError included: authentication refused
            # a refused login (a ConnectionError of ours: no errno, unlike the OS's refused or reset connections)
            # is told once while it stays the same; a peer away is not
            login = isinstance(exc, ConnectionError) and exc.errno is None
            refused = login and str(exc) != self._login_refused
            self._login_refused = str(exc) if login else None
            (log.warning if refused else log.debug)("replica fetcher: cannot connect to broker %d: %s",
                                                    self.leader_id, exc)
            return False
        self._login_refused = None
        if self._stopping:
            writer.transport.abort()
            return False
        try:
            self._reader, self._writer = take_over(reader, writer), writer
        except ConnectionError as exc:
            writer.transport.abort()
            log.warning("replica fetcher: connection to broker %d: %s", self.leader_id, exc)
            return False
        return True

    async def _call(self, api_key: int, version: int, body):
        self._correlation += 1
        frame = codec.encode_request(api_key, version, self._correlation, self._client_id.decode(), body)
        return await self._exchange(api_key, version, frame)

    async def _exchange(self, api_key: int, version: int, frame: bytes):
        """Send a request frame (correlation id ``self._correlation``) and read and decode its response."""
        reader, writer = self._reader, self._writer  # stop() may clear them meanwhile
        writer.transport.write(frame)  # a small request, one in flight: nothing to drain
        async with asyncio.timeout(self.broker.config["replica.socket.timeout.ms"] / 1000):
            payload = await reader.read_frame()
        if api_key == FETCH_KEY and version == 12:  # by hand: the records stay views of the frame, not copies
            correlation, response = fetch_response.decode_v12(payload)
        else:
            correlation, response = codec.decode_response(api_key, version, memoryview(payload).toreadonly())
        if correlation != self._correlation:
            raise ConnectionError("correlation id mismatch")
        return response

    # ---- the loop -----------------------------------------------------------------------------------------------
    async def _run(self) -> None:
        backoff = self.broker.config["replica.fetch.backoff.ms"] / 1000
        while not self._stopping:
            now = time.monotonic()
            active = {k: f for k, f in self.partitions.items() if f.retry_at <= now}
            if not active:
                self._wakeup.clear()
                waiting = [f.retry_at for f in self.partitions.values()]
                try:
                    async with asyncio.timeout(min(waiting) - now if waiting else None):
                        await self._wakeup.wait()
                except asyncio.TimeoutError:
                    pass
                continue
            if self._writer is not None and renewal_due(self._writer):  # KIP-368: a new session, between
                self._close(renewing=True)  # requests, so no answer is lost: the fetch session goes on
            try:
                connected = self._writer is not None or await self._connect()
            except Exception:  # never let the fetcher die on a connection attempt: log, back off, retry
                log.exception("replica fetcher: connecting to broker %d", self.leader_id)
                connected = False
            if not connected:
                await asyncio.sleep(backoff)
                continue
            try:
                truncating = {k: f for k, f in active.items() if f.needs_truncation}
                if truncating:
                    await self._truncate(truncating)
                    continue
                await self._fetch(active)
            except asyncio.CancelledError:
                raise
            except (OSError, ConnectionError, asyncio.IncompleteReadError, asyncio.TimeoutError) as exc:
                if self._stopping:
                    break
                log.info("fetch from broker %d failed: %s", self.leader_id, exc)
                self._close()
                await asyncio.sleep(backoff)
            except Exception:
                if self._stopping:
                    break
                log.exception("replica fetcher for broker %d", self.leader_id)
                self._close()
                await asyncio.sleep(backoff)

    async def _truncate(self, followed: dict[tuple[str, int], Followed]) -> None:
        mod = codec.request_type(EPOCH_KEY, EPOCH_VERSION)
        module = __import__(mod.__module__, fromlist=["x"])
        by_topic: dict[str, list] = {}
        for (topic, index), f in followed.items():
            by_topic.setdefault(topic, []).append(module.OffsetForLeaderPartition(
                partition=index, current_leader_epoch=f.partition.leader_epoch,
                leader_epoch=max(f.partition.log.epochs.latest_epoch, -1)))
        request = mod(replica_id=self.broker.node_id, topics=tuple(
            module.OffsetForLeaderTopic(topic=t, partitions=tuple(ps)) for t, ps in by_topic.items()))
        response = await self._call(EPOCH_KEY, EPOCH_VERSION, request)
        if self._stopping:  # the logs may be closing: apply nothing more
            return
        for topic in response.topics:
            for p in topic.partitions:
                f = self.partitions.get((topic.topic, p.partition))
                if f is None or not f.needs_truncation:
                    continue
                error = ErrorCode(p.error_code)
                if error in RETRY_ERRORS:
                    f.retry_at = time.monotonic() + self.broker.config["replica.fetch.backoff.ms"] / 1000
                    continue
                plog = f.partition.log
                target, done = self._truncation_point(plog, error, p.leader_epoch, p.end_offset)
                if target < plog.log_end_offset:
                    try:
                        plog.truncate_to(target)
                    except OSError as exc:
                        self._refused(f, exc)
                        continue
                else:  # an epoch stamped at the log end (a leadership that wrote nothing) is no common history
                    plog.epochs.truncate_from_end(target)
                f.needs_truncation = not done  # not done: ask again with the epoch now latest here (KIP-279)

    @staticmethod
    def _truncation_point(plog, error: ErrorCode, leader_epoch: int, leader_end: int) -> tuple[int, bool]:
        """(offset to truncate to, whether the logs agree up to it) from the leader's answer to OffsetForLeaderEpoch
        for this replica's latest epoch: the largest epoch it has up to that one and where it ends there.

        When this replica does not have that epoch itself, its records from its own largest epoch below it on were
        written under leaders the leader never followed: cut them, and ask again about the epoch now latest here
        (KIP-279: one answer is not enough after leaderships that changed in quick succession)."""
        end = plog.log_end_offset
        if error != ErrorCode.none or leader_end < 0:
            return min(plog.high_watermark, end), True  # no epoch information: the pre-KIP-101 rule
        own_epoch, own_end = plog.epochs.end_offset_for(leader_epoch, end)
        if own_epoch < 0:  # this replica knows no epoch at or below the leader's: the leader's end it is
            return min(leader_end, end), True
        if own_epoch != leader_epoch:
            return min(own_end, end), False
        return min(own_end, leader_end, end), True

    async def _fetch(self, followed: dict[tuple[str, int], Followed]) -> None:
        cfg = self.broker.config
        limit = cfg["replica.fetch.max.bytes"]
        wanted = {key: (f.partition.leader_epoch, f.partition.log.log_end_offset, f.partition.log.log_start_offset)
                  for key, f in followed.items()}  # a moved log start is news too: the leader's low watermark
        full = self._session_epoch == 0 or self._restart
        self._restart = False
        by_topic: dict[str, list] = {}
        for key, position in wanted.items():
            if full or self._in_session.get(key) != position:
                by_topic.setdefault(key[0], []).append((key[1], *position, limit))
        forgotten: dict[str, list] = {}
        if not full:
            for key in self._in_session.keys() - wanted.keys():
                forgotten.setdefault(key[0], []).append(key[1])
        self._correlation += 1
        frame = fetch_request.encode_v12(self._correlation, self._client_id, self.broker.node_id,
                                         cfg["replica.fetch.wait.max.ms"], cfg["replica.fetch.min.bytes"],
                                         cfg["replica.fetch.response.max.bytes"], list(by_topic.items()),
                                         self._session_id, 0 if full else self._session_epoch,
                                         list(forgotten.items()))
        response = await self._exchange(FETCH_KEY, FETCH_VERSION, frame)
        if self._stopping:
            return
        if response.error_code:  # FETCH_SESSION_ID_NOT_FOUND, INVALID_FETCH_SESSION_EPOCH: no partitions in it
            log.info("fetch session %d with broker %d: error %d; starting a new one", self._session_id,
                     self.leader_id, response.error_code)
            self._session_epoch = 0  # the full fetch names the old id, which closes it if the leader still has it
            return
        if full:
            self._session_id = response.session_id
            self._session_epoch = 1 if response.session_id else 0
        elif response.session_id != self._session_id:  # the leader closed it: start over
            self._session_epoch = 0
        else:
            self._session_epoch = 1 if self._session_epoch >= 2**31 - 1 else self._session_epoch + 1
        self._in_session = wanted
        for topic in response.responses:
            for p in topic.partitions:
                f = self.partitions.get((topic.topic, p.partition_index))
                if f is None or f.needs_truncation:
                    # not applied, though the leader counts it as told (a high watermark, say): a full fetch next,
                    # so a partition followed again later learns its whole state
                    self._restart = True
                    continue
                self._apply(f, p)

    def _apply(self, f: Followed, p) -> None:
        error = ErrorCode(p.error_code)
        plog = f.partition.log
        if error in RETRY_ERRORS:
            f.retry_at = time.monotonic() + self.broker.config["replica.fetch.backoff.ms"] / 1000
            return
        if error == ErrorCode.offset_out_of_range:
            if p.log_start_offset > plog.log_end_offset:  # the leader deleted what we would need next
                try:
                    plog.reset_to(p.log_start_offset)
                except OSError as exc:
                    self._refused(f, exc)
            else:
                f.needs_truncation = self._restart = True  # the next fetch is full (see _fetch)
            return
        if error != ErrorCode.none:
            log.warning("fetch of %s-%d from broker %d: %s", plog.topic, plog.partition, self.leader_id,
                        error.name)
            return
        data = p.records
        if data:
            whole = records.whole_batches_length(data)
            if whole:
                chunk = memoryview(data)[:whole]
                records.validate(chunk, 2**31 - 1)
                try:
                    plog.append_as_follower(chunk)
                except NotContiguous as exc:
                    log.warning("%s-%d: %s; truncating again", plog.topic, plog.partition, exc)
                    f.needs_truncation = self._restart = True  # the next fetch is full (see _fetch)
                    return
                except OSError as exc:
                    self._refused(f, exc)
                    return
                if incidents.any:
                    incidents.succeeded(self._site(plog))
        plog.high_watermark = max(min(p.high_watermark, plog.log_end_offset), plog.log_start_offset)
        if p.log_start_offset > plog.log_start_offset:  # DeleteRecords on the leader (or its retention), as Kafka's
            plog.advance_start(p.log_start_offset, asyncio.get_running_loop().call_later)  # followers take it

    def _refused(self, f: Followed, exc: OSError) -> None:
        """The disk refused a write of this partition's log: retry it from the same offset a little later."""
        plog = f.partition.log
        incidents.failed(self._site(plog), exc, f"{plog.topic}-{plog.partition} at offset {plog.log_end_offset}")
        backoff = self.broker.config["replica.fetch.backoff.ms"] / 1000
        f.retry_at = time.monotonic() + min(max(backoff, 0.1), STORAGE_RETRY_S)

    @staticmethod
    def _site(plog) -> str:
        return f"replica appends to {log_dir_of(plog.dir)}"
