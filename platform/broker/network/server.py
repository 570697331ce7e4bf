"""The Kafka listener: asyncio, one task per connection, requests handled and answered strictly in order.

Like Kafka's processors, a connection is served one request at a time (a long-polling Fetch delays the next
response on that connection, never other connections); pipelined requests wait in the socket buffer.
A frame over ``socket.request.max.bytes``, an unknown API key, an unsupported version or a request that does
not decode is logged and closes that connection only. Produce with ``acks=0`` is not answered.

Reading (issue 20): a connection reads what the socket has, up to ``READ_CHUNK`` at a time, and handles every
whole frame in it in order before it reads again, so a burst of pipelined requests (an unbatched producer keeps
hundreds in flight) costs one read, not two ``readexactly`` per frame; their answers leave together
(:class:`Responses`); a run of unbatched Produce requests among them is handled as one
(:mod:`broker.handlers.produce_run`). A frame that is not whole yet is completed with exactly its missing bytes,
so a frame dribbled in many pieces is not copied again with each piece.

A frame larger than ``READ_CHUNK`` and at most ``POOL_FREE_BYTES`` on a plain connection (a batched producer's
Produce request) is received by the kernel straight into a buffer reused across requests
(:mod:`broker.network.receive`).

Memory is bounded: a frame's bytes are read in chunks of at most ``READ_CHUNK`` and only as they arrive (a size
prefix alone allocates nothing, except on the receive path above: a buffer of the frame's size, at most
``POOL_FREE_BYTES`` a connection, as Kafka allocates a request's size once its prefix is read), and frames larger
than ``POOL_FREE_BYTES`` reserve their size from a pool of ``queued.max.request.bytes`` before the rest of them is
read (at most one ``READ_CHUNK`` of a frame can have been read with the frames before it); the reservation is
released once the request has been handled (Kafka's memory pool: a connection waits, unread, while the pool is
exhausted). Small frames skip the pool, so a few slow senders of huge frames cannot starve ordinary clients.
File regions in a response go out with ``sendfile`` (zero copy) when large enough to be worth it: directly while
the socket takes them, through ``loop.sendfile`` once it is full.

Lifecycle: :meth:`KafkaListener.start` binds the port without accepting (connections are refused), so a broker
can register its address before it serves; :meth:`~KafkaListener.serve` starts accepting. :meth:`~KafkaListener.stop`
stops accepting, cancels every connection and waits a bounded time, then aborts whatever is still open (a peer
that stopped reading cannot hold a stopping broker).

Client quotas (:mod:`broker.client_quotas`): a handler that throttles a client sets its session's
``muted_until``; the connection sends what is answered and reads nothing more until then. With a
``request_percentage`` quota set anywhere, each request's running time (:mod:`broker.network.timing`) is charged
to its client when it is answered; a connection over its IP's ``connection_creation_rate`` is closed unread after
its throttle time.

Connections over ``max.connections`` (the inter-broker listener exempt), a listener's own
``listener.name.<listener>.max.connections`` or ``max.connections.per.ip`` are closed as soon as they are accepted
(:mod:`broker.network.quotas`).

Security: an SSL or SASL_SSL listener serves TLS (``broker.security.tls``); on a SASL_PLAINTEXT or SASL_SSL
listener a connection may send only ApiVersions, SaslHandshake and SaslAuthenticate until it has
authenticated (anything else closes it, as Kafka does), and a request other than a re-authentication after its
session ended (KIP-368) closes it without an answer. Each connection's
:class:`~broker.network.session.Session` (principal, peer host, SASL
state) is in the context variable :data:`current_session`.
"""

from __future__ import annotations

import asyncio
import contextvars
import dataclasses
import datetime
import inspect
import logging
import os
import struct
import time
from types import CoroutineType

from broker.client_quotas.manager import requester
from broker.config import ConfigError
from broker.handlers import APIS, NO_RESPONSE, RawResponse
from broker.handlers import produce_run
from broker.handlers.api_versions import unsupported_version_response
from broker.network.quotas import ConnectionQuotas
from broker.network.receive import FrameFiller, ReceiveBuffers
from broker.network.session import Session, current_session  # noqa: F401  (re-exported for the SASL handlers)
from broker.network.timing import EXEMPT_KEYS, RequestClock, Timed
from broker.protocol import codec, fetch_response, produce_response
from broker.protocol.codec import MalformedRequest
from broker.security import tls

log = logging.getLogger(__name__)

# The listener name of the connection a request came in on (each connection is its own task, with its own
# context): Metadata and FindCoordinator answer with the brokers' addresses on that listener.
current_listener: contextvars.ContextVar[str | None] = contextvars.ContextVar("logbus_listener", default=None)
SASL_KEYS = frozenset((17, 18, 36))  # SaslHandshake, ApiVersions, SaslAuthenticate: allowed before SASL auth
SENDFILE_MIN_BYTES = 64 * 1024  # below this a pread + write is cheaper than draining for sendfile
READ_CHUNK = 256 * 1024
POOL_FREE_BYTES = 1024 * 1024  # frames up to this size do not reserve from queued.max.request.bytes
STREAM_LIMIT = 64 * 1024  # asyncio stops reading a socket once twice this much is buffered
_SIZE = struct.Struct(">i").unpack_from
_clock = time.perf_counter


def _sendfile_now(sock_fd: int, part) -> int:
    """Bytes of a file region the socket took at once (``os.sendfile`` until it would block). Only when the
    transport has nothing buffered, so order is kept; asyncio's ``loop.sendfile`` would first pause reading,
    wait for an empty buffer and register a writer, which costs more than the send itself when the socket has
    room (a consumer's or a follower's fetch of a few hundred KB: most of them)."""
    sent = 0
    while sent < part.size:
        try:
            n = os.sendfile(sock_fd, part.fd, part.position + sent, part.size - sent)
        except BlockingIOError:
            break
        if n == 0:  # end of file: the region is no longer there; the caller's fallback finds it short
            break
        sent += n
    return sent


async def _more(reader: asyncio.StreamReader) -> bytes:
    """What the socket has delivered, at most ``READ_CHUNK`` (waiting for some): often many pipelined frames."""
    chunk = await reader.read(READ_CHUNK)
    if not chunk:
        raise asyncio.IncompleteReadError(b"", None)
    return chunk


class SessionExpired(ConnectionError):
    """A request on a connection whose SASL session ended without a re-authentication (KIP-368)."""


class MemoryPool:
    """Bytes of large request frames being read or handled, at most ``capacity`` (-1: unbounded)."""

    def __init__(self, capacity: int):
        self.capacity = capacity
        self.used = 0
        self._freed = asyncio.Condition()

    async def reserve(self, size: int) -> int:
        if self.capacity < 0:
            return 0
        size = min(size, self.capacity)  # one frame larger than the pool waits for the whole pool
        async with self._freed:
            await self._freed.wait_for(lambda: self.used + size <= self.capacity)
            self.used += size
        return size

    async def release(self, size: int) -> None:
        if size:
            async with self._freed:
                self.used -= size
                self._freed.notify_all()


class Responses:
    """A connection's small responses, written together: the first one added schedules a flush for the event
    loop's next pass, so the answers to every request handled in the meantime (pipelined frames that one ``recv``
    delivered) leave in one ``send`` instead of one each. Order is kept: large file regions first flush what is
    pending (:meth:`KafkaListener._write`). At most ``FLUSH_COUNT`` responses or ``FLUSH_BYTES`` wait."""

    FLUSH_COUNT = 32
    FLUSH_BYTES = 64 * 1024

    def __init__(self, writer: asyncio.StreamWriter):
        self.writer = writer
        self.parts: list = []
        self.size = 0
        self.count = 0
        self.scheduled = False

    def add_bytes(self, data: bytes) -> None:
        """:meth:`add` of a response that is one ``bytes`` (the hot path: Produce answers)."""
        self.parts.append(data)
        self.size += len(data)
        self._added()

    def add(self, parts: list) -> None:
        for part in parts:
            data = part if isinstance(part, (bytes, bytearray)) else part.read()
            self.parts.append(data)
            self.size += len(data)
        self._added()

    def _added(self) -> None:
        """One more response buffered: write now when enough is waiting, else once the loop is idle."""
        self.count += 1
        if self.count >= self.FLUSH_COUNT or self.size >= self.FLUSH_BYTES:
            self.flush()
        elif not self.scheduled:
            self.scheduled = True
            asyncio.get_running_loop().call_soon(self.flush)

    def flush(self) -> None:
        self.scheduled = False
        if self.parts and not self.writer.transport.is_closing():
            self.writer.transport.writelines(self.parts)
        self.parts, self.size, self.count = [], 0, 0


async def _receive(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, buf: bytearray, head, size: int):
    """A frame of ``size`` bytes into ``buf``: ``head`` (already read), then what the stream reader holds, then the
    rest straight from the socket (:class:`~broker.network.receive.FrameFiller`). A read-only view of the frame."""
    view = memoryview(buf)[:size]
    filled = len(head)
    view[:filled] = head
    while filled < size and (reader._buffer or reader.at_eof()):  # noqa: SLF001 - what the reader holds already
        chunk = await reader.read(size - filled)
        if not chunk:
            raise asyncio.IncompleteReadError(b"", size)
        view[filled:filled + len(chunk)] = chunk
        filled += len(chunk)
    if filled < size:
        if writer.transport.is_closing() or reader.exception() is not None:  # gone before the rest could come
            raise ConnectionError("connection lost in a request frame")
        await FrameFiller.fill(writer.transport, view, filled)
    return view.toreadonly()  # kio reads only read-only buffers


class KafkaListener:
    def __init__(self, broker, host: str, port: int, max_request_bytes: int, pool: MemoryPool | None = None,
                 name: str = "PLAINTEXT", quotas: ConnectionQuotas | None = None):
        self.broker = broker
        self.name = name
        self.host = host
        self.port = port
        self.max_request_bytes = max_request_bytes
        self.pool = pool if pool is not None else MemoryPool(-1)
        self.quotas = quotas if quotas is not None else ConnectionQuotas()
        self.client_quotas = getattr(broker, "client_quotas", None)  # the broker's ClientQuotaManager, if any
        self._server: asyncio.base_events.Server | None = None
        self._connections: dict[asyncio.Task, asyncio.StreamWriter] = {}
        self._closing = False
        self.buffers = ReceiveBuffers()
        config = getattr(broker, "config", None)
        self.protocol = config.listener_protocol(name) if config is not None else "PLAINTEXT"

    def _ssl_context(self):
        if self.protocol not in ("SSL", "SASL_SSL"):
            return None
        try:
            return tls.server_context(lambda key: self.broker.config.listener_value(self.name, key))
        except tls.TlsConfigError as exc:
            raise ConfigError(f"listener {self.name}: {exc}") from None

    async def start(self) -> None:
        """Bind (the port is known from here on, even for port 0) without accepting connections yet."""
        self._server = await asyncio.start_server(self._serve, self.host or None, self.port, limit=STREAM_LIMIT,
                                                  reuse_address=True, start_serving=False,
                                                  ssl=self._ssl_context())
        self.port = self._server.sockets[0].getsockname()[1]

    async def serve(self) -> None:
        """Start accepting connections."""
        if self._server is not None and not self._closing:
            await self._server.start_serving()

    def close(self) -> None:
        """Stop accepting connections; open ones end after the request in hand (idle ones at :meth:`stop`)."""
        self._closing = True
        if self._server is not None:
            self._server.close()

    async def stop(self, timeout: float = 5.0) -> bool:
        """Close every connection, waiting at most ``timeout`` seconds for their tasks; False if some overran."""
        self.close()
        for task in list(self._connections):
            task.cancel()
        pending = set()
        if self._connections:
            _, pending = await asyncio.wait(set(self._connections), timeout=timeout)
        for writer in list(self._connections.values()):
            writer.transport.abort()  # also when a task overran: its socket is closed under it
        if pending:
            log.warning("%s: %d connection(s) did not close within %gs; aborted", self.name, len(pending), timeout)
        return not pending

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self._closing:  # accepted in the same loop pass as close()
            writer.transport.abort()
            return
        peer = writer.get_extra_info("peername")
        ip = peer[0] if isinstance(peer, tuple) else str(peer)
        refused = self.quotas.admit(self.name, ip)
        if refused is not None:
            if (count := sum(self.quotas.refused.values())) & (count - 1) == 0:  # 1st, 2nd, 4th, ...: a flood logs little
                log.warning("closing connection from %s at once: %s (%d refused so far)", peer, refused, count)
            writer.transport.abort()
            return
        client_quotas = self.client_quotas
        if client_quotas is not None and client_quotas.ip_rates and (delay := client_quotas.connection_throttle(ip)):
            # KIP-612: over its IP's connection_creation_rate, closed unread after the throttle time (Kafka's
            # acceptor's delayed close), not counted as a connection
            self.quotas.release(self.name, ip)
            count = client_quotas.throttled["connection_creation_rate"][0]
            if count & (count - 1) == 0:
                log.warning("closing connection from %s after %d ms: over its IP's connection_creation_rate "
                            "(%d throttled so far)", peer, delay, count)
            try:
                await asyncio.sleep(delay / 1000)
            finally:
                writer.transport.abort()
            return
        task = asyncio.current_task()
        self._connections[task] = writer
        current_listener.set(self.name)
        ssl_object = writer.get_extra_info("ssl_object")
        session = Session(self.name, self.protocol,
                          tls.peer_principal(ssl_object) if ssl_object is not None else "User:ANONYMOUS", ip)
        current_session.set(session)
        responses = Responses(writer)
        encrypted = ssl_object is not None
        received = None  # the reused buffer a large frame was received into (plain connections)
        data, pos = b"", 0  # bytes read from the socket and not handled yet: data[pos:]
        quotas = client_quotas
        try:
            while not self._closing:
                if session.muted_until:  # a client over its quota: nothing more is read until its throttle ends
                    wait = session.muted_until - time.monotonic()
                    session.muted_until = 0.0
                    if wait > 0:
                        responses.flush()  # the throttled answer goes out now (KIP-219: the client waits too)
                        await asyncio.sleep(wait)
                if writer.transport.get_write_buffer_size() > STREAM_LIMIT:  # a client that does not read
                    await writer.drain()
                have = len(data) - pos
                if have < 4:  # every frame that was read is handled: read what the socket has now
                    data, pos = data[pos:] + await (reader.readexactly(4 - have) if have else _more(reader)), 0
                    continue
                size = _SIZE(data, pos)[0]
                if size < 0 or size > self.max_request_bytes:
                    log.warning("closing connection from %s: request frame of %d bytes exceeds "
                                "socket.request.max.bytes=%d", peer, size, self.max_request_bytes)
                    return
                start = pos + 4
                reserved = 0
                if have - 4 >= size:  # a whole frame is here already (pipelined requests: most of them)
                    if (size <= produce_run.FRAME_MAX and have - 8 >= size and not data[start] and not data[start + 1]
                            and session.authenticated and not session.raw_tokens
                            and (quotas is None or not quotas.enabled)
                            and (session.expires is None or not session.expired(time.monotonic()))):
                        # a small Produce, a frame behind, on a live session
                        run = produce_run.answer(self, data, pos, session)
                        if run is not None:  # a run of unbatched requests, handled as one
                            answers, pos = run
                            for answer in answers:
                                responses.add_bytes(answer)
                            continue
                    payload = data[start:start + size]
                    pos = start + size
                elif size <= READ_CHUNK:  # the rest of this frame, exactly, so a frame sent in pieces is not
                    # copied again with every piece
                    data, pos = data[pos:] + await reader.readexactly(size - (have - 4)), 0
                    continue
                elif size <= POOL_FREE_BYTES and not encrypted:  # a batched producer's request: straight into a buffer
                    received = self.buffers.take(size)
                    # the head already read goes into the buffer from a view of it: one copy, not two
                    payload = await _receive(reader, writer, received, memoryview(data)[start:], size)
                    data, pos = b"", 0
                else:
                    reserved = await self.pool.reserve(size) if size > POOL_FREE_BYTES else 0
                    try:
                        payload = await self._read_frame(reader, data[start:], size)
                    except BaseException:
                        await self.pool.release(reserved)
                        raise
                    data, pos = b"", 0
                try:
                    if session.raw_tokens:  # SaslHandshake v0: a bare token, answered bare
                        parts = await self._raw_sasl_token(session, bytes(payload))
                    else:
                        parts = self.dispatch(payload, session)
                        if type(parts) is CoroutineType:  # a request that waits (acks=all, a long-polling fetch)
                            parts = await parts
                    del payload
                finally:
                    if reserved:
                        await self.pool.release(reserved)
                if received is not None:
                    self.buffers.give(received)  # kept only if no view of it outlived the request
                    received = None
                if parts is not None:
                    if len(parts) == 1 and type(parts[0]) is bytes:  # the common answer: one small frame
                        responses.add_bytes(parts[0])
                    elif all(isinstance(p, (bytes, bytearray)) or p.size < SENDFILE_MIN_BYTES for p in parts):
                        responses.add(parts)
                    else:
                        responses.flush()
                        await self._write(writer, parts)
                if session.close_after_response:
                    responses.flush()
                    return
        except SessionExpired as exc:  # Kafka closes such a connection without an answer
            log.info("closing connection from %s: %s", peer, exc)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        except MalformedRequest as exc:
            log.warning("closing connection from %s: %s", peer, exc)
        except asyncio.CancelledError:
            pass
        except Exception:
            log.exception("closing connection from %s after an internal error", peer)
        finally:
            responses.flush()  # what was answered before an error or a close still goes out
            self._connections.pop(task, None)
            self.quotas.release(self.name, ip)
            writer.close()

    @staticmethod
    async def _read_frame(reader: asyncio.StreamReader, head, size: int) -> memoryview:
        """A large frame of ``size`` bytes, starting with ``head`` (what was already read), gathered as the rest
        arrives: memory grows with what was sent, not with what was claimed."""
        frame = bytearray(head)  # grown in place (mremap once past the mmap threshold): no second copy at the end
        while len(frame) < size:
            chunk = await reader.read(min(size - len(frame), READ_CHUNK))
            if not chunk:
                raise asyncio.IncompleteReadError(bytes(frame), size)
            frame += chunk
        return memoryview(frame).toreadonly()  # kio reads only read-only buffers

    def dispatch(self, payload, session: Session | None = None):
        """Handle one request frame (without its size prefix); the response's parts, or None (no response), or
        for a request that waits (a handler that returned an awaitable) a coroutine that gives one of those.
        Not a coroutine itself, so a request answered at once costs no coroutine (the produce hot path).
        ``session``: the connection's (default: the task's :data:`current_session`)."""
        header = codec.read_header(payload)
        api = APIS.get(header.api_key)
        if api is None:
            raise MalformedRequest(f"unknown api key {header.api_key}")
        if session is None:
            session = current_session.get()
        if session is not None:
            if not session.authenticated and header.api_key not in SASL_KEYS:
                raise MalformedRequest(f"{api.name} before SASL authentication on listener {self.name}")
            if session.expires is not None and session.reauthenticating_as is None and \
                    session.expired(now := time.monotonic()) and \
                    not (header.api_key == 17 and session.may_reauthenticate(now)):
                self.broker.metrics.expired_connections_killed[self.name] += 1
                raise SessionExpired(f"{api.name} after the SASL session of {session.principal} expired "
                                     "(KIP-368: connections.max.reauth.ms or the token's expiry)")
        if not api.min_version <= header.api_version <= api.max_version:
            if header.api_key == codec.API_VERSIONS_KEY:
                return [codec.encode_response(header.api_key, 0, header.correlation_id,
                                              unsupported_version_response())]
            raise MalformedRequest(f"{api.name} v{header.api_version} is not supported "
                                   f"(v{api.min_version}-{api.max_version})")
        clock = None
        quotas = self.client_quotas
        if quotas is not None and quotas.requests_enabled and header.api_key not in EXEMPT_KEYS:
            clock = RequestClock()  # request_percentage: this request's running time is charged to its client
        request = codec.decode_body(header, payload)
        if clock is not None and getattr(request, "replica_id", -1) >= 0:
            clock = None  # a follower's fetch
        started = _clock()
        result = api.handler(self.broker, header, request)
        if type(result) is CoroutineType or (type(result) is not RawResponse and inspect.isawaitable(result)):
            return self._answer_later(api.name, header, started, result, clock)
        return self._answer(api.name, header, started, result, clock)

    async def _answer_later(self, name: str, header, started: float, result, clock: RequestClock | None = None):
        if clock is None:
            return self._answer(name, header, started, await result)
        clock.pause()
        result = await Timed(result, clock)
        clock.resume()
        return self._answer(name, header, started, result, clock)

    def _charge(self, header, result, clock: RequestClock):
        """request_percentage: the request's running time recorded against its client's quota; over it, the
        connection muted and the answer's ``throttle_time_ms`` raised to the throttle."""
        session, principal = requester()
        throttle = self.client_quotas.record_request(principal, header.client_id, clock.total(), session)
        if not throttle:
            return result
        if type(result) is RawResponse:  # the hand-framed answers: Produce (one frame) and Fetch (its head first)
            if header.api_key == 0 and len(result.parts) == 1 and header.api_version >= 1:
                result.parts[0] = produce_response.raise_throttle(result.parts[0], header.api_version, throttle)
            elif header.api_key == 1 and result.parts:
                fetch_response.raise_throttle(result.parts, header.api_version, throttle)
            return result
        current = getattr(result, "throttle_time", None)
        if isinstance(current, datetime.timedelta) and current.total_seconds() * 1000 < throttle:
            result = dataclasses.replace(result, throttle_time=datetime.timedelta(milliseconds=throttle))
        return result

    def _answer(self, name: str, header, started: float, result, clock: RequestClock | None = None) -> list | None:
        self.broker.metrics.request(name, _clock() - started)
        if clock is not None:
            result = self._charge(header, result, clock)
        if type(result) is RawResponse:
            return result.parts
        if result is NO_RESPONSE:
            return None
        return [codec.encode_response(header.api_key, header.api_version, header.correlation_id, result)]

    async def _raw_sasl_token(self, session: Session, token: bytes) -> list:
        from broker.security.sasl import SaslFailure, finish

        session.raw_tokens = False
        try:
            reply = await session.sasl.respond(token)
            if session.sasl.complete:
                finish(session, self.broker.config, session.sasl)  # no way to tell the client a lifetime
            else:
                session.raw_tokens = True
        except SaslFailure as exc:
            self.broker.metrics.failed_authentications[session.listener] += 1
            raise MalformedRequest(f"SASL authentication failed: {exc}") from None
        return [len(reply).to_bytes(4, "big") + reply]

    async def _write(self, writer: asyncio.StreamWriter, parts: list) -> None:
        loop = asyncio.get_running_loop()
        tls = writer.get_extra_info("ssl_object") is not None
        for part in parts:
            if isinstance(part, (bytes, bytearray)):
                writer.write(part)
            elif part.size < SENDFILE_MIN_BYTES or tls:
                # TLS cannot be zero-copy, and asyncio's sendfile fallback swaps the transport's protocol while it
                # runs: a pipelined request arriving meanwhile broke the connection ("SSL connection closed by peer")
                writer.write(part.read())
            else:
                sent = 0
                transport = writer.transport
                if transport.get_write_buffer_size() == 0 and not transport.is_closing():  # nothing queued ahead
                    sent = _sendfile_now(writer.get_extra_info("socket").fileno(), part)
                if sent < part.size:  # the socket is full: asyncio's sendfile waits for room and sends the rest
                    await writer.drain()
                    with os.fdopen(part.fd, "rb", buffering=0, closefd=False) as file:
                        rest = await loop.sendfile(writer.transport, file, part.position + sent, part.size - sent)
                    if rest != part.size - sent:  # the file shrank under us: the frame is now wrong, so drop the link
                        raise ConnectionError("short sendfile")
        await writer.drain()
