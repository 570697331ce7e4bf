"""The replica fetcher's side of an incremental fetch session (KIP-227), against a scripted leader: it opens a
session with a full fetch, then names only partitions whose position changed and the ones it stopped following,
and starts over with a full fetch (naming the old session, which closes it) after a session error, a leader that
gave no session, or a lost connection. The real leader's side: tests/unit/test_fetch_session_cache.py; both together
on a cluster: tests/integration/test_fetch_sessions.py."""

import asyncio
import types

import pytest
from broker.cluster import znodes
from broker.cluster.fetcher import LeaderFetcher
from broker.protocol import codec, fetch_response
from broker.protocol.fetch_response import PartitionData
from broker.protocol.messages import ErrorCode

pytestmark = [pytest.mark.unit, pytest.mark.timeout(60)]


class Config(dict):
    inter_broker_listener = "PLAINTEXT"


def fake_manager(port: int):
    config = Config({"replica.fetch.backoff.ms": 0, "replica.socket.timeout.ms": 30000, "replica.fetch.max.bytes": 1000,
                     "replica.fetch.wait.max.ms": 10, "replica.fetch.min.bytes": 1,
                     "replica.fetch.response.max.bytes": 10000})
    leader = znodes.BrokerInfo(1, "127.0.0.1", port, None, (("PLAINTEXT", "127.0.0.1", port),))
    return types.SimpleNamespace(broker=types.SimpleNamespace(node_id=2, config=config),
                                 metadata=types.SimpleNamespace(brokers={1: leader}))


def followed(topic, index):
    log = types.SimpleNamespace(epochs=types.SimpleNamespace(latest_epoch=0), log_end_offset=0, high_watermark=0,
                                log_start_offset=0, topic=topic, partition=index)
    return types.SimpleNamespace(topic=topic, index=index, leader_epoch=0, log=log)


class ScriptedLeader:
    """Answers each Fetch with the next scripted (error, session id), or closes the connection on "drop";
    records (session id, epoch, named partitions, forgotten partitions) of every request."""

    def __init__(self, script, on_request=None):
        self.script = list(script)
        self.on_request = on_request or (lambda n: None)
        self.seen = []
        self.done = asyncio.Event()

    async def serve(self, reader, writer):
        try:
            while True:
                size = int.from_bytes(await reader.readexactly(4), "big")
                payload = memoryview(await reader.readexactly(size)).toreadonly()
                header = codec.read_header(payload)
                body = codec.decode_body(header, payload)
                self.seen.append((body.session_id, body.session_epoch,
                                  sorted((t.topic, p.partition, p.fetch_offset) for t in body.topics
                                         for p in t.partitions),
                                  sorted((t.topic, i) for t in body.forgotten_topics_data for i in t.partitions)))
                self.on_request(len(self.seen) - 1)
                if not self.script:
                    self.done.set()
                    await asyncio.sleep(3600)
                step = self.script.pop(0)
                if step == "drop":
                    writer.transport.abort()
                    return
                error, session_id = step
                topics = [] if error else [(t.topic, [PartitionData(p.partition, 0, 0, 0, 0) for p in t.partitions])
                                           for t in body.topics]
                parts = fetch_response.encode(12, header.correlation_id, topics, error, session_id)
                writer.write(b"".join(parts))
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass


def run(script, change=None):
    async def scenario():
        parts = [followed("a", 0), followed("a", 1), followed("b", 0)]
        leader = ScriptedLeader(script, on_request=lambda n: change and change(n, fetcher, parts))
        server = await asyncio.start_server(leader.serve, "127.0.0.1", 0)
        fetcher = LeaderFetcher(fake_manager(server.sockets[0].getsockname()[1]), 1)
        for p in parts:
            fetcher.add(p)
        for f in fetcher.partitions.values():
            f.needs_truncation = False
        async with asyncio.timeout(20):
            await leader.done.wait()
        await fetcher.stop(1.0)
        server.close()
        return leader.seen

    return asyncio.run(scenario())


ALL = [("a", 0, 0), ("a", 1, 0), ("b", 0, 0)]


def test_opens_a_session_then_names_nothing_unchanged_and_starts_over_after_session_errors():
    seen = run([(0, 77), (0, 77), (ErrorCode.fetch_session_id_not_found.value, 0), (0, 0), (0, 0), (0, 5),
                (ErrorCode.invalid_fetch_session_epoch.value, 0), "drop", (0, 9)])
    assert seen == [
        (0, 0, ALL, []),  # full: opens a session
        (77, 1, [], []),  # incremental: nothing moved
        (77, 2, [], []),  # -> FETCH_SESSION_ID_NOT_FOUND
        (77, 0, ALL, []),  # full again, naming the old session (closing it); the leader gives none (0)
        (0, 0, ALL, []),  # so every fetch stays full, asking for one
        (0, 0, ALL, []),  # -> session 5
        (5, 1, [], []),  # -> INVALID_FETCH_SESSION_EPOCH
        (5, 0, ALL, []),  # full, closing 5; the connection drops before the answer
        (5, 0, ALL, []),  # a new connection: full again -> session 9
        (9, 1, [], []),
    ]


def test_names_moved_partitions_and_forgets_those_it_stops_following():
    def change(n, fetcher, parts):
        if n == 1:  # while the second request is answered: a.1 advances and b.0 is no longer followed
            parts[1].log.log_end_offset = 42
            fetcher.remove(("b", 0))

    seen = run([(0, 3), (0, 3), (0, 3), (0, 3)], change)
    assert seen == [
        (0, 0, ALL, []),
        (3, 1, [], []),
        (3, 2, [("a", 1, 42)], [("b", 0)]),
        (3, 3, [], []),  # once told, nothing is named again
        (3, 4, [], []),
    ]


def test_a_partition_followed_anew_starts_a_full_fetch():
    """What the leader told the old entry (a high watermark, say) may never have been applied: the session
    would not tell it again, so the fetcher opens a new one."""
    def change(n, fetcher, parts):
        if n == 1:  # a new leader epoch of b.0 while the second request is answered (its truncation done)
            fetcher.add(parts[2])
            fetcher.partitions[("b", 0)].needs_truncation = False

    seen = run([(0, 3), (0, 3), (0, 4), (0, 4)], change)
    assert seen == [
        (0, 0, ALL, []),
        (3, 1, [], []),
        (3, 0, ALL, []),  # full, closing 3 -> session 4
        (4, 1, [], []),
        (4, 2, [], []),
    ]
