"""The replica fetcher's frame reader (broker.network.frames) over real loopback sockets: frames whole and in
order however the bytes arrive, large ones too, and a closed or broken connection fails the read."""

from __future__ import annotations

import asyncio
import os
import socket
import struct

import pytest

from broker.network import frames
from broker.network.frames import take_over

pytestmark = [pytest.mark.unit, pytest.mark.timeout(30)]


def frame(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


async def pair(server_writes):
    """A server that runs ``server_writes(writer)``, and a client connection taken over by a FrameReader."""
    async def serve(reader, writer):
        await server_writes(writer)

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    return server, writer, take_over(reader, writer)


def test_frames_arrive_whole_and_in_order_however_they_are_cut(monkeypatch):
    monkeypatch.setattr(frames, "DIRECT_MAX", 100_000)  # the 300 KB frame grows as it arrives
    payloads = [b"", b"a", os.urandom(70_000), os.urandom(300_000), b"tail"]
    stream = b"".join(frame(p) for p in payloads)

    async def main():
        async def dribble(writer):
            for cut in (1, 3, 4, 5, 70_003, 70_010, 200_000, len(stream)):  # mid-prefix, mid-frame, many at once
                start = getattr(dribble, "pos", 0)
                writer.write(stream[start:cut])
                dribble.pos = cut
                await writer.drain()
                await asyncio.sleep(0.01)

        server, writer, reader = await pair(dribble)
        got = [bytes(await asyncio.wait_for(reader.read_frame(), 10)) for _ in payloads]
        writer.close()
        server.close()
        return got

    assert asyncio.run(main()) == payloads


def test_a_closed_connection_fails_the_read_and_every_later_one():
    async def main():
        async def half_then_close(writer):
            writer.write(frame(b"whole") + struct.pack(">i", 100) + b"only part")
            await writer.drain()
            writer.close()

        server, writer, reader = await pair(half_then_close)
        first = bytes(await asyncio.wait_for(reader.read_frame(), 10))
        errors = []
        for _ in range(2):
            try:
                await asyncio.wait_for(reader.read_frame(), 10)
            except ConnectionError as exc:
                errors.append(exc)
        server.close()
        return first, errors

    first, errors = asyncio.run(main())
    assert first == b"whole" and len(errors) == 2


def test_a_waiting_read_ends_when_the_connection_is_aborted_and_a_negative_size_is_refused():
    async def main():
        async def silent(writer):
            await asyncio.sleep(5)

        server, writer, reader = await pair(silent)
        pending = asyncio.ensure_future(reader.read_frame())
        await asyncio.sleep(0.05)
        writer.transport.abort()  # what the fetcher's stop() does
        with pytest.raises(ConnectionError):
            await asyncio.wait_for(pending, 5)

        async def negative(writer):
            writer.write(struct.pack(">i", -5))
            await writer.drain()
            await asyncio.sleep(5)

        server2, writer2, reader2 = await pair(negative)
        with pytest.raises(ConnectionError, match="-5"):
            await asyncio.wait_for(reader2.read_frame(), 5)
        assert writer2.transport.is_closing()
        for s in (server, server2):
            s.close()

    asyncio.run(main())


def test_a_stream_with_bytes_already_read_is_not_taken_over():
    """Bytes the stream reader already holds would be lost by the swap: refused."""
    async def main():
        async def hello(_reader, writer):
            writer.write(b"unasked")
            await writer.drain()
            await asyncio.sleep(5)

        server = await asyncio.start_server(hello, "127.0.0.1", 0)
        reader, writer = await asyncio.open_connection("127.0.0.1", server.sockets[0].getsockname()[1])
        await asyncio.sleep(0.1)
        with pytest.raises(ConnectionError):
            take_over(reader, writer)
        writer.close()
        server.close()

    asyncio.run(main())


def test_the_last_frames_buffer_is_reused_only_once_nothing_refers_to_it():
    """A new buffer's pages are faulted in every time, so the reader reuses the last frame's buffer; but never while
    the caller holds that frame or a view of it, nor while it waits unread behind another one."""
    first, second, third = os.urandom(50_000), os.urandom(30_000), os.urandom(40_000)

    async def main():
        sent = asyncio.Event()
        go_on = asyncio.Event()

        async def two_then_one(writer):
            writer.write(frame(first) + frame(second))  # both queued in the reader before the caller reads
            await writer.drain()
            sent.set()
            await go_on.wait()
            writer.write(frame(third))
            await writer.drain()
            await asyncio.sleep(5)

        server, writer, reader = await pair(two_then_one)
        await sent.wait()
        await asyncio.sleep(0.2)
        got_first = await asyncio.wait_for(reader.read_frame(), 10)  # kept as delivered (no copy)
        got_second = await asyncio.wait_for(reader.read_frame(), 10)
        view_of_second = memoryview(got_second)[:10]
        assert bytes(got_first) == first  # the second frame, queued behind it, did not land in its buffer
        del got_second  # only a view of it is left
        go_on.set()
        got_third = await asyncio.wait_for(reader.read_frame(), 10)
        assert bytes(got_first) == first and bytes(view_of_second) == second[:10]  # neither was overwritten
        assert bytes(got_third) == third
        view_of_second.release()
        del got_first, got_third
        writer.close()
        server.close()

    asyncio.run(main())


def test_a_dropped_frames_buffer_carries_the_next_frame_and_a_kept_one_does_not():
    big, small, last = os.urandom(80_000), os.urandom(20_000), os.urandom(10_000)

    async def main():
        steps = [asyncio.Event(), asyncio.Event()]

        async def one_at_a_time(writer):
            for payload, step in ((big, None), (small, steps[0]), (last, steps[1])):
                if step is not None:
                    await step.wait()
                writer.write(frame(payload))
                await writer.drain()
            await asyncio.sleep(5)

        server, writer, reader = await pair(one_at_a_time)
        kept = await asyncio.wait_for(reader.read_frame(), 10)  # held as it is: no view, nothing queued
        steps[0].set()
        second = await asyncio.wait_for(reader.read_frame(), 10)
        assert bytes(kept) == big and bytes(second) == small  # the kept frame's buffer was not reused
        assert isinstance(kept, memoryview) and isinstance(second, memoryview) and second.obj is not kept.obj
        assert reader._spare is second.obj
        del second  # dropped: its buffer carries the next frame
        steps[1].set()
        again = await asyncio.wait_for(reader.read_frame(), 10)
        assert bytes(again) == last
        assert isinstance(again, memoryview) and again.obj is reader._spare and len(again) == len(last)
        writer.close()
        server.close()

    asyncio.run(main())


@pytest.mark.skipif(not hasattr(socket, "SO_RCVLOWAT"), reason="no SO_RCVLOWAT on this platform")
def test_a_frame_dribbled_in_pieces_wakes_the_reader_once_its_size_is_known():
    """Once the size prefix is read, SO_RCVLOWAT asks the kernel to wake the reader only when the whole frame is
    there: the first part and the ten pieces after it make one read, not eleven; the mark is back at 1 after."""
    payload = os.urandom(100_000)
    stream = frame(payload)
    first = 4 + 1_000

    async def main():
        sent_first = asyncio.Event()

        async def dribble(writer):
            writer.write(stream[:first])
            await writer.drain()
            await asyncio.sleep(0.2)
            sent_first.set()
            rest = stream[first:]
            step = len(rest) // 10 + 1
            for start in range(0, len(rest), step):
                writer.write(rest[start:start + step])
                await writer.drain()
                await asyncio.sleep(0.02)

        server, writer, reader = await pair(dribble)
        sock = writer.get_extra_info("socket")
        reads = []
        original = reader.buffer_updated
        reader.buffer_updated = lambda n: (reads.append(n), original(n))[1]
        await sent_first.wait()
        mark_meanwhile = sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT)
        got = bytes(await asyncio.wait_for(reader.read_frame(), 10))
        mark_after = sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT)
        writer.close()
        server.close()
        return got, reads, mark_meanwhile, mark_after

    got, reads, mark_meanwhile, mark_after = asyncio.run(main())
    assert got == payload
    assert mark_meanwhile == len(payload)  # the first part's 1,000 bytes wait in the socket: below the mark
    assert mark_after == 1
    assert reads == [4, len(payload)]  # the size prefix, then the whole frame at once
