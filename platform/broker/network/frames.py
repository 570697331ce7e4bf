"""Size-prefixed frames read straight into their own buffer: the replica fetcher's side of a connection.

asyncio's StreamReader copies what arrives twice on its way to a caller: the transport's read is appended to the
reader's buffer, and ``readexactly`` copies the frame out of it. A follower reads every fetched byte of the
partitions it follows (a leader's fetch responses are up to ``replica.fetch.response.max.bytes``), and in a py-spy
profile of a follower under an acks=all load the two copies were about 29% of its event loop's samples.
:class:`FrameReader` is a buffered protocol instead: the kernel copies a frame's bytes into the ``bytearray`` the
caller gets. The size prefix is read on its own (4 bytes), then the frame, exactly: nothing is read ahead, so a
connection in lockstep (one request, one response) never holds more than the frame it is reading. A frame over
``DIRECT_MAX`` grows as its bytes arrive (one copy each, through a scratch buffer) rather than being allocated
at the size its prefix claims. The buffer of the last frame (up to ``SPARE_MAX``) is reused for the next one
once nothing refers to it any more (the caller has finished with that response): a new buffer's pages are faulted
in again each time (about 0.44 ms per MB on this machine), a reused one's are not. Such frames are delivered as a
``memoryview`` of exactly the frame, so whoever still holds one holds an export of the buffer, which the reuse
check sees (:func:`broker.network.receive.unshared`) on any Python, without counting references.

Wake-ups (issue 20): a follower waits for the leader's answer, so the first bytes of a response wake it, and
each read takes what has arrived by then. A 1 MB fetch response came in about 8 reads (a cProfile of a follower
under acks=all load: 1,843 ``recv_into`` for 230 responses, ``bench/results/follower_cost_lowat/``), each a
wake-up with its context switch and, on a VM, an inter-processor interrupt for the sender. Once a frame's size is
known, the socket's ``SO_RCVLOWAT`` is set to what is missing of it (:func:`broker.network.receive.wake_mark`): the
kernel wakes the reader only when that much has arrived (or the connection ends, or its receive window is nearly
shut: no deadlock), and one read takes it. The mark goes back to 1 when the frame is whole. Plain TCP only (a TLS
transport's bytes are not the frame's); where the option fails it is left alone.

The protocol is swapped in on a connected (and authenticated) transport with :func:`take_over`; it then owns the
reads, the caller writes to the transport. A closed or aborted connection fails the pending and later reads with
ConnectionError. No I/O of its own: the transport does the reads.
"""

from __future__ import annotations

import asyncio

from broker.network.receive import LOWAT_MAX, paced_socket, unshared, wake_mark

DIRECT_MAX = 32 << 20  # frames up to this size get their whole buffer at once
SPARE_MAX = 16 << 20  # the last frame's buffer is kept for the next one up to this size
_SCRATCH = 1 << 20


class FrameReader(asyncio.BufferedProtocol):
    def __init__(self, transport: asyncio.BaseTransport):
        self.transport = transport
        self._frames: list[bytearray | memoryview] = []
        self._waiter: asyncio.Future | None = None
        self._error: BaseException | None = None
        self._spare: bytearray | None = None
        self._sock = paced_socket(transport)  # its SO_RCVLOWAT follows the frame being read (plain TCP only)
        self._lowat = 1
        self._size_prefix()

    # ---- the transport's side ------------------------------------------------------------------------------------
    def _size_prefix(self) -> None:
        self._buf = bytearray(4)
        self._view = memoryview(self._buf)
        self._pos = 0
        self._prefix = True
        self._grown: bytearray | None = None  # a frame over DIRECT_MAX, as it arrives
        self._left = 0

    def get_buffer(self, sizehint: int) -> memoryview:
        if self._grown is not None:
            return self._view[: min(self._left, _SCRATCH)]
        return self._view[self._pos:]

    def buffer_updated(self, nbytes: int) -> None:
        if self._grown is not None:
            self._grown += self._view[:nbytes]
            self._left -= nbytes
            if not self._left:
                self._deliver(self._grown)
            return
        self._pos += nbytes
        if self._pos < len(self._buf):
            if not self._prefix:
                self._wake_at(len(self._buf) - self._pos)
            return
        if not self._prefix:
            self._deliver(self._buf)
            return
        size = int.from_bytes(self._buf, "big", signed=True)
        if size < 0:
            self.connection_lost(ConnectionError(f"a frame of {size} bytes"))
            self.transport.abort()
            return
        if size == 0:
            self._deliver(bytearray())
        elif size <= DIRECT_MAX:
            self._buf = self._frame_buffer(size)
            self._view = memoryview(self._buf)
            self._pos = 0
            self._prefix = False
            self._wake_at(size)
        else:
            self._grown, self._left = bytearray(), size
            self._view = memoryview(bytearray(_SCRATCH))

    def _frame_buffer(self, size: int) -> memoryview:
        """A view of exactly ``size`` bytes: of the last frame's buffer when it is large enough and nothing refers to
        it (no frame waiting unread, no view of it alive), else of a new one."""
        spare = self._spare
        if spare is not None and not self._frames and len(spare) >= size and unshared(spare):
            return memoryview(spare)[:size]
        buf = bytearray(size)
        self._spare = buf if size <= SPARE_MAX else None
        return memoryview(buf)

    def _wake_at(self, missing: int) -> None:
        """Have the kernel wake this reader only once ``missing`` bytes (at most ``LOWAT_MAX``) have arrived."""
        mark = min(missing, LOWAT_MAX)
        if self._sock is None or mark == self._lowat:
            return
        if not wake_mark(self._sock, mark):  # wake on every arrival, as before
            self._sock = None
            return
        self._lowat = mark

    def _deliver(self, frame: bytearray | memoryview) -> None:
        self._frames.append(frame)
        self._wake_at(1)
        self._size_prefix()
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    def eof_received(self) -> bool:
        return False  # the transport closes; connection_lost follows

    def connection_lost(self, exc: BaseException | None) -> None:
        if self._error is None:
            self._error = exc if exc is not None else ConnectionError("connection closed")
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    # ---- the caller's side -----------------------------------------------------------------------------------------
    async def read_frame(self) -> bytearray | memoryview:
        """The next whole frame (without its size prefix); raises ConnectionError once the connection is gone. The
        caller may keep it, or views of it, as long as it likes: its buffer is reused only once nothing refers to it."""
        while not self._frames:
            if self._error is not None:
                raise ConnectionError(str(self._error) or "connection lost") from self._error
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None
        return self._frames.pop(0)


def take_over(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> FrameReader:
    """Make a connected stream's transport deliver its reads to a new :class:`FrameReader`. Nothing may be pending
    in the stream's reader (a connection in lockstep between its requests): else ConnectionError, as the bytes
    would be lost."""
    if reader._buffer or reader.at_eof():  # noqa: SLF001 - StreamReader has no public look at what it holds
        raise ConnectionError("bytes or an end of stream arrived before any request")
    frames = FrameReader(writer.transport)
    writer.transport.set_protocol(frames)
    return frames
