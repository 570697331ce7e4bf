"""A connection's acks=all Produce requests are appended while earlier ones wait for replicas (issue 20), and the
answers still leave in request order: the listener over a real loopback socket, with fake handlers (a Produce
whose answer waits on a future the test resolves; a Metadata answered at once)."""

from __future__ import annotations

import asyncio
import struct

import pytest

from broker.handlers import Appended, RawResponse
from broker.handlers.registry import Api
from broker.network import server

pytestmark = [pytest.mark.unit, pytest.mark.timeout(30)]

PRODUCE, METADATA = 0, 3


class _Metrics:
    def request(self, name, seconds):
        pass


class _Broker:
    metrics = _Metrics()


def _frame(key: int, version: int, correlation_id: int) -> bytes:
    body = struct.pack(">hhih", key, version, correlation_id, -1)  # null client id, no body (decoding is faked)
    return struct.pack(">i", len(body)) + body


def _answer(correlation_id: int) -> RawResponse:
    return RawResponse([struct.pack(">ii", 4, correlation_id)])


def _scenario(monkeypatch, script):
    """Run a listener whose Produce handler records each correlation id it handles and returns an Appended answer
    waiting on ``waits[id]``; ``script(send, read_ids, handled, waits)`` drives it from a client."""
    handled: list[int] = []
    waits: dict[int, asyncio.Future] = {}

    def produce(broker, header, request):
        handled.append(header.correlation_id)
        waits[header.correlation_id] = asyncio.get_running_loop().create_future()

        async def answer(cid=header.correlation_id):
            await waits[cid]
            if waits[cid].result() == "fail":
                raise RuntimeError("an internal error in a waiting answer")
            return _answer(cid)

        return Appended(answer())

    def metadata(broker, header, request):
        handled.append(header.correlation_id)
        return _answer(header.correlation_id)

    monkeypatch.setattr(server, "APIS", {PRODUCE: Api(PRODUCE, "Produce", 3, 3, produce),
                                         METADATA: Api(METADATA, "Metadata", 1, 1, metadata)})
    monkeypatch.setattr(server.codec, "decode_body", lambda header, payload: None)

    async def main():
        listener = server.KafkaListener(_Broker(), "127.0.0.1", 0, 1 << 20)
        await listener.start()
        port = listener._server.sockets[0].getsockname()[1]  # noqa: SLF001
        serving = asyncio.create_task(listener.serve())
        await _until(lambda: listener._server.is_serving(), "the listener serving")  # noqa: SLF001
        reader, writer = await asyncio.open_connection("127.0.0.1", port)

        def send(*frames: bytes) -> None:
            writer.write(b"".join(frames))

        async def read_ids(count: int) -> list[int]:
            ids = []
            for _ in range(count):
                size, cid = struct.unpack(">ii", await asyncio.wait_for(reader.readexactly(8), 5))
                assert size == 4
                ids.append(cid)
            return ids

        try:
            await script(send, read_ids, handled, waits, reader)
        finally:
            writer.close()
            await listener.stop(2)
            serving.cancel()

    asyncio.run(main())


async def _until(condition, what: str) -> None:
    for _ in range(500):
        if condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"timed out: {what}")


def test_produce_requests_are_appended_while_earlier_answers_wait_and_answers_keep_their_order(monkeypatch):
    async def script(send, read_ids, handled, waits, reader):
        send(_frame(PRODUCE, 3, 1), _frame(PRODUCE, 3, 2), _frame(PRODUCE, 3, 3), _frame(METADATA, 1, 4))
        # a serial listener would stop at [1] until the first answer is ready
        await _until(lambda: handled == [1, 2, 3], "three Produce requests handled while none is answered")
        await asyncio.sleep(0.1)
        assert handled == [1, 2, 3], "the Metadata request ran before the Produce answers ahead of it were out"
        waits[3].set_result("ok")
        waits[2].set_result("ok")
        await asyncio.sleep(0.1)
        assert not reader._buffer, "answers 2 and 3 left before answer 1"  # noqa: SLF001
        waits[1].set_result("ok")
        assert await read_ids(4) == [1, 2, 3, 4]
        assert handled == [1, 2, 3, 4]

    _scenario(monkeypatch, script)


def test_at_most_max_appended_answers_wait_on_a_connection(monkeypatch):
    total = server.MAX_APPENDED + 2

    async def script(send, read_ids, handled, waits, reader):
        send(*(_frame(PRODUCE, 3, cid) for cid in range(1, total + 1)))
        await _until(lambda: len(handled) == server.MAX_APPENDED, "MAX_APPENDED requests handled")
        await asyncio.sleep(0.2)
        assert handled == list(range(1, server.MAX_APPENDED + 1)), "more answers waited than MAX_APPENDED"
        waits[1].set_result("ok")
        assert await read_ids(1) == [1]
        await _until(lambda: len(handled) == server.MAX_APPENDED + 1, "the next request handled")
        for cid in range(2, total + 1):
            await _until(lambda c=cid: c in waits, f"request {cid} handled")
            waits[cid].set_result("ok")
        assert await read_ids(total - 1) == list(range(2, total + 1))

    _scenario(monkeypatch, script)


def test_a_failed_waiting_answer_closes_the_connection_and_no_later_answer_leaves(monkeypatch):
    async def script(send, read_ids, handled, waits, reader):
        send(_frame(PRODUCE, 3, 1), _frame(PRODUCE, 3, 2), _frame(PRODUCE, 3, 3))
        await _until(lambda: handled == [1, 2, 3], "three Produce requests handled")
        waits[1].set_result("ok")
        waits[3].set_result("ok")
        assert await read_ids(1) == [1]
        waits[2].set_result("fail")
        assert await asyncio.wait_for(reader.read(), 5) == b"", "an answer left after a failed one, or no close"

    _scenario(monkeypatch, script)
