"""A replica fetcher always ends when stopped, whatever it is waiting on at that moment.

Regression: the fetcher used ``asyncio.wait_for`` around its connect and reads; on Python 3.11 ``wait_for``
returns the awaited result (or raises its error) instead of the cancellation when both arrive together, and the
fetcher, having no stop flag, carried on reconnecting for ever: ``Broker.stop`` waited on it and SIGTERM seemed
ignored (two brokers replicating from each other both hung). Here the leader answers every request with a
frame the fetcher rejects, so the fetcher cycles connect → request → read → error as fast as it can, and is
stopped at random moments."""

import asyncio
import random
import types

import pytest
from broker.cluster import znodes
from broker.cluster.fetcher import LeaderFetcher

pytestmark = [pytest.mark.unit, pytest.mark.timeout(60)]


class Config(dict):
    inter_broker_listener = "PLAINTEXT"


def fake_manager(port: int):
    config = Config({"replica.fetch.backoff.ms": 0, "replica.socket.timeout.ms": 30000})
    leader = znodes.BrokerInfo(1, "127.0.0.1", port, None, (("PLAINTEXT", "127.0.0.1", port),))
    return types.SimpleNamespace(broker=types.SimpleNamespace(node_id=2, config=config),
                                 metadata=types.SimpleNamespace(brokers={1: leader}))


def followed_partition():
    log = types.SimpleNamespace(epochs=types.SimpleNamespace(latest_epoch=0), log_end_offset=0, high_watermark=0)
    return types.SimpleNamespace(topic="t", index=0, leader_epoch=0, log=log)


async def answer_with_wrong_correlation_ids(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while True:
            size = int.from_bytes(await reader.readexactly(4), "big")
            await reader.readexactly(size)
            writer.write((8).to_bytes(4, "big") + bytes(8))  # correlation id 0: never the fetcher's
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError):
        pass
    finally:
        writer.close()


def test_a_stopped_fetcher_always_ends_even_when_stopped_as_a_read_completes():
    async def scenario() -> list[int]:
        server = await asyncio.start_server(answer_with_wrong_correlation_ids, "127.0.0.1", 0)
        manager = fake_manager(server.sockets[0].getsockname()[1])
        rng = random.Random(11)
        outlived = []
        for attempt in range(60):
            fetcher = LeaderFetcher(manager, 1)
            fetcher.add(followed_partition())
            await asyncio.sleep(rng.uniform(0, 0.004))
            stopped = await fetcher.stop(1.0)
            if not stopped or not fetcher._task.done():
                outlived.append(attempt)
                fetcher._task.cancel()
        server.close()
        return outlived

    assert asyncio.run(scenario()) == []
