"""Large request frames received straight into reused buffers (issue 20: the batched producer's requests).

A batched producer's Produce request is a frame of up to a MB (librdkafka's ``batch.size`` and ``message.max.bytes``
default to 1,000,000). Through asyncio's stream reader every byte of it was copied four times on its way (the
transport's ``recv`` into a new ``bytes``, into the reader's buffer, out of it by ``read``, onto the growing frame),
and the frame's memory was new every time: past glibc's mmap threshold, which ``broker.limits`` fixes at 1 MiB so
that large frames' memory goes back to the OS, every page of it was faulted in again (about 0.4 ms per MB here,
measured in-process). For frames up to :data:`broker.network.server.POOL_FREE_BYTES`:

- :class:`ReceiveBuffers` keeps a few frame buffers per listener (at most ``CACHED`` buffers of at most ``MAX_BYTES``)
  and hands one out for each large frame; a buffer comes back only when no view of it outlives the request (a
  handler that kept a slice of the frame keeps the buffer too: it is simply not reused).
- :class:`FrameFiller` is swapped in as the transport's protocol while such a frame is incomplete, so the kernel
  copies the frame's bytes into the buffer (``recv_into``) and nothing else touches them. Each buffer it offers ends
  where the frame does, so nothing past the frame is read; the stream's protocol is swapped back in the same read
  event that completes the frame. Writes meanwhile still pause and resume the stream's protocol (its ``drain``).
  Plain connections only (a TLS transport decrypts into its own buffers). A fill that fails or is cancelled leaves
  the connection mid-frame: the listener closes it.

Memory: a frame on this path takes a buffer of its size once its size prefix is read (as Kafka allocates a
request's size), before its bytes arrive: at most ``POOL_FREE_BYTES`` per connection, so ``max.connections`` bounds
the total, not ``queued.max.request.bytes`` (which frames over 1 MiB reserve from).

While a frame is being filled, the socket's ``SO_RCVLOWAT`` is what is missing of it (:func:`wake_mark`): a
producer's frame that arrives in many segments wakes the listener once, when it is whole, not once per arrival.

No I/O of its own: the transport does the reads.
"""

from __future__ import annotations

import asyncio
import socket

LOWAT_MAX = 4 << 20  # the kernel grows the receive buffer to fit the mark (up to half of tcp_rmem's maximum)
_SO_RCVLOWAT = getattr(socket, "SO_RCVLOWAT", None)


def paced_socket(transport: asyncio.BaseTransport):
    """The transport's socket when its reads can be paced with ``SO_RCVLOWAT`` (plain TCP), else None."""
    sock = transport.get_extra_info("socket")
    if (_SO_RCVLOWAT is None or sock is None or transport.get_extra_info("ssl_object") is not None
            or sock.family not in (socket.AF_INET, socket.AF_INET6) or sock.type != socket.SOCK_STREAM):
        return None
    return sock


def wake_mark(sock, missing: int) -> bool:
    """Ask the kernel to wake ``sock``'s reader only once ``missing`` bytes (at most ``LOWAT_MAX``) are there, or the
    connection ends, or its receive window is nearly shut (no deadlock); 1 restores the default. False if the
    option failed (the socket is gone, or this platform ignores it): the reader then wakes on every arrival."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, _SO_RCVLOWAT, max(1, min(missing, LOWAT_MAX)))
    except OSError:
        return False
    return True


class ReceiveBuffers:
    CACHED = 4
    MAX_BYTES = 1 << 20

    def __init__(self) -> None:
        self._free: list[bytearray] = []

    def take(self, size: int) -> bytearray:
        """A buffer of at least ``size`` bytes (contents undefined): the smallest kept one that fits, else new."""
        fits = [i for i, buf in enumerate(self._free) if len(buf) >= size]
        if fits:
            return self._free.pop(min(fits, key=lambda i: len(self._free[i])))
        return bytearray(size)

    def give(self, buf: bytearray) -> bool:
        """Keep ``buf`` for a later frame, unless it is too large, enough are kept, or a view of it is still alive
        (then it stays with whoever holds the view); True if kept."""
        if len(buf) > self.MAX_BYTES or len(self._free) >= self.CACHED or not unshared(buf):
            return False
        self._free.append(buf)
        return True


def unshared(buf: bytearray) -> bool:
    """True if no view of ``buf`` is alive (nothing else can see it change). A bytearray with a live export cannot
    change size, so it is shrunk by one byte and grown back (within its allocation: no copy); its last byte becomes
    0, which is fine for a buffer whose contents are about to be overwritten."""
    if not buf:
        return True
    try:
        del buf[-1]
    except BufferError:
        return False
    buf.append(0)
    return True


class FrameFiller(asyncio.BufferedProtocol):
    """Receives the rest of one frame into ``target`` (a writable view of exactly the frame), ``filled`` bytes of
    which are already there; see the module docstring."""

    def __init__(self, transport: asyncio.Transport, target: memoryview, filled: int, done: asyncio.Future):
        self.transport, self.original = transport, transport.get_protocol()
        self.target, self.filled, self.done = target, filled, done
        self.sock = paced_socket(transport)
        if self.sock is not None and not wake_mark(self.sock, len(target) - filled):
            self.sock = None

    @classmethod
    async def fill(cls, transport: asyncio.Transport, target: memoryview, filled: int) -> None:
        """Receive ``target[filled:]``; IncompleteReadError or ConnectionError if the connection ends first."""
        done = asyncio.get_running_loop().create_future()
        filler = cls(transport, target, filled, done)
        transport.set_protocol(filler)
        if not transport.is_reading():  # the stream reader had paused it (its buffer was full): it is empty now
            transport.resume_reading()
        try:
            lost = await done
        finally:
            filler._give_back()
        # raised here rather than set on the future: an exception kept by the future would hold this frame in a
        # reference cycle (future → exception → traceback → frame) until the garbage collector ran
        if lost == "eof":
            raise asyncio.IncompleteReadError(b"", len(target))
        if lost is not None:
            raise ConnectionError(f"connection lost in a request frame: {lost}")

    def _give_back(self) -> None:
        self.target = None
        if self.sock is not None:
            wake_mark(self.sock, 1)  # the stream's reads wake on every arrival again
            self.sock = None
        if self.transport.get_protocol() is self:
            self.transport.set_protocol(self.original)

    def get_buffer(self, sizehint: int) -> memoryview:
        return self.target[self.filled:]

    def buffer_updated(self, nbytes: int) -> None:
        self.filled += nbytes
        if self.filled >= len(self.target):
            self._give_back()  # the next read event (the next frames) goes to the stream reader again
            if not self.done.done():
                self.done.set_result(None)
        elif self.sock is not None and len(self.target) - self.filled < LOWAT_MAX:
            wake_mark(self.sock, len(self.target) - self.filled)  # woken early (a shut window): wait for the rest

    # writing is the stream's business: responses written while a frame comes in pause and resume the stream's
    # protocol (its drain), not this one
    def pause_writing(self) -> None:
        self.original.pause_writing()

    def resume_writing(self) -> None:
        self.original.resume_writing()

    def eof_received(self) -> bool:
        self._end("eof")
        return False  # the transport closes: connection_lost follows

    def connection_lost(self, exc: BaseException | None) -> None:
        self._end(str(exc) if exc is not None else "closed")
        self.original.connection_lost(exc)  # the stream's protocol learns it too (its reader, its close waiter)

    def _end(self, why: str) -> None:
        if not self.done.done():
            self.done.set_result(why)
