"""Large request frames received straight into reused buffers (broker.network.receive, used by the listener for
frames between READ_CHUNK and POOL_FREE_BYTES): over real loopback sockets, a frame arrives whole however it is cut,
what follows it stays for the stream reader, and a connection that ends mid-frame fails the read. The buffer cache
reuses a buffer only when no view of it is left."""

from __future__ import annotations

import asyncio
import os
import socket

import pytest

from broker.network import server
from broker.network.receive import FrameFiller, ReceiveBuffers

pytestmark = [pytest.mark.unit, pytest.mark.timeout(30)]


async def _listen(handle):
    srv = await asyncio.start_server(handle, "127.0.0.1", 0)
    return srv, srv.sockets[0].getsockname()[1]


def _run_receive(chunks: list[bytes], size: int, head_len: int, then_close: bool = False, after: bytes = b"",
                 trailing: int = 0):
    """A client sends ``chunks`` (with pauses) then ``after``; the server reads ``head_len`` bytes with the stream
    reader, then ``_receive``s the frame of ``size`` bytes, then reads what follows with the stream reader again
    (``trailing`` bytes of the chunks, then ``after``). {frame, readonly, after} or {error}."""
    out: dict = {}

    async def main():
        done = asyncio.get_running_loop().create_future()

        async def handle(reader, writer):
            try:
                head = await reader.readexactly(head_len)
                buf = ReceiveBuffers().take(size)
                view = await server._receive(reader, writer, buf, head, size)
                out["frame"] = bytes(view)
                out["readonly"] = view.readonly
                out["after"] = await reader.readexactly(trailing + len(after)) if trailing + len(after) else b""
            except (asyncio.IncompleteReadError, ConnectionError) as exc:
                out["error"] = exc
            finally:
                writer.close()
                done.set_result(None)

        srv, port = await _listen(handle)
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        for chunk in chunks:
            writer.write(chunk)
            await writer.drain()
            await asyncio.sleep(0.02)
        if then_close:
            writer.close()
        else:
            writer.write(after)
            await writer.drain()
        await asyncio.wait_for(done, 10)
        writer.close()
        srv.close()
        await srv.wait_closed()

    asyncio.run(main())
    return out


def test_a_frame_cut_in_many_pieces_arrives_whole_and_the_next_bytes_stay_with_the_stream():
    frame = os.urandom(700_000)
    cuts = [frame[:10], frame[10:300_000], frame[300_000:300_001], frame[300_001:]]
    out = _run_receive(cuts, len(frame), head_len=10, after=b"next frame's bytes")
    assert "error" not in out
    assert out["frame"] == frame and out["readonly"]
    assert out["after"] == b"next frame's bytes"  # nothing past the frame was taken by the filler


def test_a_frame_already_buffered_by_the_stream_reader_is_taken_from_it_first():
    frame = os.urandom(400_000)
    out = _run_receive([frame + b"tail"], len(frame), head_len=4, trailing=4)
    assert out["frame"] == frame and out["after"] == b"tail"


def test_a_connection_that_ends_mid_frame_fails_the_read():
    frame = os.urandom(600_000)
    out = _run_receive([frame[:350_000]], len(frame), head_len=100, then_close=True)
    assert isinstance(out.get("error"), (asyncio.IncompleteReadError, ConnectionError))


def test_buffers_are_reused_only_when_no_view_of_them_is_left():
    buffers = ReceiveBuffers()
    first = buffers.take(500_000)
    assert len(first) == 500_000
    assert buffers.give(first)
    assert buffers.take(400_000) is first  # large enough: reused
    kept = memoryview(first)[:10]  # a handler that keeps a slice of the frame
    assert not buffers.give(first)
    kept.release()
    assert buffers.give(first)
    assert buffers.take(600_000) is not first  # too small for this frame: a new one
    assert not buffers.give(bytearray(ReceiveBuffers.MAX_BYTES + 1))  # too large to keep
    for _ in range(ReceiveBuffers.CACHED):
        buffers.give(bytearray(10))
    assert not buffers.give(bytearray(10))  # enough are kept


def test_writes_while_a_frame_comes_in_still_pause_and_resume_the_streams_drain():
    """A response that filled the socket before the frame began (the stream's protocol paused) and drained while
    the frame came in: the resume must reach the stream's protocol, or every later drain waits for ever."""
    size = 400_000
    out: dict = {}

    async def main():
        loop = asyncio.get_running_loop()
        loop_errors: list = []
        loop.set_exception_handler(lambda _loop, context: loop_errors.append(context.get("message")))
        paused_before = asyncio.Event()

        async def handle(reader, writer):
            writer.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 8192)
            await reader.readexactly(4)
            protocol = writer.transport.get_protocol()
            writer.write(b"R" * 4_000_000)  # the client is not reading yet: the stream's protocol is paused
            out["paused_before"] = protocol._paused
            paused_before.set()
            view = await server._receive(reader, writer, ReceiveBuffers().take(size), b"", size)
            out["frame_ok"] = bytes(view) == b"F" * size
            writer.write(b"x")
            try:
                await asyncio.wait_for(writer.drain(), 5)  # hung when the resume went to the filler
                out["drained"] = True
            except asyncio.TimeoutError:
                out["drained"] = False
            writer.close()

        srv, port = await _listen(handle)
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8192)
        sock.connect(("127.0.0.1", port))
        sock.setblocking(False)
        reader, writer = await asyncio.open_connection(sock=sock)
        writer.write(size.to_bytes(4, "big"))
        await writer.drain()
        await paused_before.wait()
        await asyncio.sleep(0.2)  # the filler is installed
        assert await asyncio.wait_for(reader.readexactly(4_000_000), 10) == b"R" * 4_000_000  # drains meanwhile
        await asyncio.sleep(0.1)
        writer.write(b"F" * size)
        await writer.drain()
        assert await asyncio.wait_for(reader.read(), 10) == b"x"
        writer.close()
        srv.close()
        await srv.wait_closed()
        out["loop_errors"] = loop_errors

    asyncio.run(main())
    assert out["paused_before"] and out["frame_ok"]
    assert out["drained"]
    assert out["loop_errors"] == []


@pytest.mark.skipif(not hasattr(socket, "SO_RCVLOWAT"), reason="no SO_RCVLOWAT on this platform")
def test_a_frame_filled_in_pieces_wakes_the_listener_once_it_is_whole():
    """While a frame is filled, the socket's SO_RCVLOWAT is what is missing of it: ten pieces make one read, and the
    stream's reads wake on every arrival again afterwards."""
    async def main():
        server_side: asyncio.Future = asyncio.get_running_loop().create_future()

        async def accepted(reader, writer):
            server_side.set_result((reader, writer))

        listener = await asyncio.start_server(accepted, "127.0.0.1", 0)
        _, client = await asyncio.open_connection("127.0.0.1", listener.sockets[0].getsockname()[1])
        reader, writer = await server_side
        payload = os.urandom(200_000)
        target = memoryview(bytearray(len(payload)))
        reads = []
        original = FrameFiller.buffer_updated

        def counted(self, nbytes):
            reads.append(nbytes)
            original(self, nbytes)

        FrameFiller.buffer_updated = counted
        try:
            filling = asyncio.ensure_future(FrameFiller.fill(writer.transport, target, 0))
            await asyncio.sleep(0.05)  # the filler is in place before the first byte arrives
            step = len(payload) // 10
            for start in range(0, len(payload), step):
                client.write(payload[start:start + step])
                await client.drain()
                await asyncio.sleep(0.02)
            await asyncio.wait_for(filling, 10)
        finally:
            FrameFiller.buffer_updated = original
        mark_after = writer.get_extra_info("socket").getsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT)
        client.close()
        writer.close()
        listener.close()
        return bytes(target) == payload, reads, mark_after

    whole, reads, mark_after = asyncio.run(main())
    assert whole
    assert reads == [200_000]
    assert mark_after == 1
