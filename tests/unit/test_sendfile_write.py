"""A response's file regions go out byte for byte and in order: sent directly while the socket takes them, and
through asyncio's sendfile for what is left once the socket is full (a consumer that reads slowly). A region
that is no longer in the file (it shrank) drops the connection instead of sending a wrong frame."""

import asyncio
import os
import socket

import pytest
from broker.log.segment import FileRegion
from broker.network import server

pytestmark = [pytest.mark.unit, pytest.mark.timeout(60)]


async def _serve_and_read(parts: list, read_delay: float, small_buffers: bool) -> tuple[bytes, list]:
    """Serve ``parts`` with the listener's writer to one client that starts reading after ``read_delay``;
    (what the client read until the server closed, the errors the write raised)."""
    errors: list = []

    async def handle(reader, writer):
        if small_buffers:
            writer.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 32 * 1024)
        try:
            await server.KafkaListener._write(None, writer, parts)
        except ConnectionError as exc:
            errors.append(exc)
        finally:
            writer.close()

    srv = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = srv.sockets[0].getsockname()[1]
    sock = socket.socket()
    if small_buffers:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 32 * 1024)
    sock.connect(("127.0.0.1", port))
    sock.setblocking(False)
    await asyncio.sleep(read_delay)  # the server fills the socket meanwhile
    loop = asyncio.get_running_loop()
    received = bytearray()
    while chunk := await loop.sock_recv(sock, 1 << 16):
        received += chunk
    sock.close()
    srv.close()
    await srv.wait_closed()
    return bytes(received), errors


@pytest.fixture
def segment(tmp_path):
    data = os.urandom(6 * 1024 * 1024)
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(data)
    fd = os.open(path, os.O_RDONLY)
    yield fd, data
    os.close(fd)


@pytest.mark.parametrize("read_delay,small_buffers", [(0.0, False), (0.3, True)])
def test_regions_arrive_whole_and_in_order(segment, monkeypatch, read_delay, small_buffers):
    fd, data = segment
    direct: list[tuple[int, int]] = []
    real = server._sendfile_now

    def counted(sock_fd, part):
        sent = real(sock_fd, part)
        direct.append((sent, part.size))
        return sent

    monkeypatch.setattr(server, "_sendfile_now", counted)
    big = FileRegion(fd, 1000, 5 * 1024 * 1024)
    small = FileRegion(fd, 7, 100)  # below SENDFILE_MIN_BYTES: read and written as bytes
    parts = [b"head", big, b"middle", small, FileRegion(fd, 0, 200 * 1024), b"tail"]
    received, errors = asyncio.run(_serve_and_read(parts, read_delay, small_buffers))
    assert not errors
    expected = (b"head" + data[1000:1000 + 5 * 1024 * 1024] + b"middle" + data[7:107] + data[:200 * 1024]
                + b"tail")
    assert received == expected
    assert direct and direct[0][1] == 5 * 1024 * 1024
    assert direct[0][0] > 0  # the direct path sent part of the region itself (all of it when the socket had room)
    if small_buffers:  # the socket could not take 5 MiB at once: asyncio's sendfile sent the rest
        assert direct[0][0] < direct[0][1]


def test_a_region_after_bytes_still_queued_waits_for_them(segment, monkeypatch):
    """Bytes the transport could not send yet go first: the direct path must not jump ahead of them."""
    fd, data = segment
    direct: list[int] = []
    real = server._sendfile_now

    def counted(sock_fd, part):
        direct.append(part.size)
        return real(sock_fd, part)

    monkeypatch.setattr(server, "_sendfile_now", counted)
    head = os.urandom(3 * 1024 * 1024)  # more than a 32 KB socket takes: most of it stays in the transport's buffer
    parts = [head, FileRegion(fd, 0, 1024 * 1024), b"tail"]
    received, errors = asyncio.run(_serve_and_read(parts, 0.3, True))
    assert not errors
    assert received == head + data[:1024 * 1024] + b"tail"
    assert direct == []  # the region went through asyncio's sendfile, after the queued bytes


def test_a_region_past_the_end_of_the_file_drops_the_connection(segment):
    fd, data = segment
    parts = [b"head", FileRegion(fd, len(data) - 100 * 1024, 200 * 1024)]
    received, errors = asyncio.run(_serve_and_read(parts, 0.0, False))
    assert len(errors) == 1 and "short sendfile" in str(errors[0])
    assert received == b"head" + data[-100 * 1024:]  # what was there went out; the frame is cut, the link closed
