"""A follower's truncation by leader epochs (KIP-101, KIP-279) against a leader's real log: after leaderships that
changed in quick succession, one OffsetForLeaderEpoch answer can name an epoch the follower never had; the follower
cuts back to its own epoch below it and asks again until both logs agree, and an epoch it stamped at its log end
while leading (no records) does not stop that from ending."""

import asyncio
import types

import pytest
from broker.cluster.fetcher import Followed, LeaderFetcher
from broker.log.log import LogConfig, PartitionLog
from broker.protocol import records
from rawclient import batch

pytestmark = [pytest.mark.unit, pytest.mark.timeout(30)]


def make(tmp_path, name: str, history: list[tuple[int, int]]) -> PartitionLog:
    """A log holding ``count`` one-record batches per (epoch, count), each epoch begun as its leader would."""
    plog = PartitionLog(str(tmp_path / name / "t-0"), "t", 0, LogConfig())
    for epoch, count in history:
        plog.begin_leader_epoch(epoch)
        for _ in range(count):
            data = batch([f"{name}-e{epoch}".encode()])
            plog.append(data, records.validate(data, 1 << 20))
    return plog


def epoch_of_each_offset(plog: PartitionLog) -> list[int]:
    out, offset = [], 0
    while (region := plog.read(offset, 1 << 20)) is not None:
        data, pos = region.read(), 0
        while pos + records.HEADER_SIZE <= len(data):
            header = records.read_header(data, pos)
            out.extend([header.leader_epoch] * (header.next_offset - header.base_offset))
            offset, pos = header.next_offset, pos + header.size
    return out


def truncate(follower: PartitionLog, leader: PartitionLog, leader_epoch: int) -> list[tuple[int, int, int]]:
    """Run the fetcher's truncation rounds against ``leader`` until it is done (at most 10); returns each round's
    (epoch asked about, epoch answered, follower's log end after it)."""
    config = {"replica.fetch.backoff.ms": 0}
    manager = types.SimpleNamespace(broker=types.SimpleNamespace(node_id=2, config=config),
                                    metadata=types.SimpleNamespace(brokers={}))
    fetcher = LeaderFetcher(manager, 1)
    partition = types.SimpleNamespace(topic="t", index=0, leader_epoch=leader_epoch, log=follower)
    followed = Followed(partition)
    fetcher.partitions[("t", 0)] = followed
    rounds = []

    async def answer(key, version, request):
        [topic] = request.topics
        [asked] = topic.partitions
        assert (key, asked.current_leader_epoch) == (23, leader_epoch)
        epoch, end = leader.epochs.end_offset_for(asked.leader_epoch, leader.log_end_offset)
        rounds.append([asked.leader_epoch, epoch])
        part = types.SimpleNamespace(error_code=0, partition=0, leader_epoch=epoch, end_offset=end)
        return types.SimpleNamespace(topics=[types.SimpleNamespace(topic="t", partitions=[part])])

    fetcher._call = answer

    async def scenario():
        while followed.needs_truncation and len(rounds) < 10:
            await fetcher._truncate({("t", 0): followed})
            rounds[-1].append(follower.log_end_offset)

    asyncio.run(scenario())
    assert not followed.needs_truncation, rounds
    return [tuple(r) for r in rounds]


def test_an_epoch_the_leader_never_had_is_cut_and_the_follower_asks_again_until_the_logs_agree(tmp_path):
    # offsets 0-9 in epoch 0 on both; then the follower led epochs 2 and 4 (writes never replicated), while the
    # leader's history went 1 (10-14), 3 (15-24), 5 (25-29)
    leader = make(tmp_path, "leader", [(0, 10), (1, 5), (3, 10), (5, 5)])
    follower = make(tmp_path, "follower", [(0, 10), (2, 10), (4, 10)])
    rounds = truncate(follower, leader, leader_epoch=5)
    # asked about 4: the leader's 3 ends at 25, unknown here: cut to where 2 ended (20) and ask about 2; the
    # leader's 1 ends at 15, unknown here: cut to where 0 ended (10); 0 agrees there
    assert rounds == [(4, 3, 20), (2, 1, 10), (0, 0, 10)]
    assert epoch_of_each_offset(follower) == [0] * 10
    assert follower.epochs.entries == [(0, 0)]


def test_an_epoch_stamped_at_the_log_end_without_records_does_not_hold_truncation_in_a_loop(tmp_path):
    leader = make(tmp_path, "leader", [(0, 10), (1, 5), (4, 5)])
    follower = make(tmp_path, "follower", [(0, 12), (3, 0)])  # led epoch 3 and wrote nothing in it
    assert follower.epochs.entries == [(0, 0), (3, 12)]
    rounds = truncate(follower, leader, leader_epoch=4)
    assert rounds == [(3, 1, 12), (0, 0, 10)]  # the empty epoch 3 forgotten, then 10-11 cut (the leader's 1)
    assert epoch_of_each_offset(follower) == [0] * 10 and follower.epochs.entries == [(0, 0)]


def test_a_follower_behind_in_the_same_epoch_keeps_everything_in_one_round(tmp_path):
    leader = make(tmp_path, "leader", [(0, 10), (2, 10)])
    follower = make(tmp_path, "follower", [(0, 10), (2, 4)])
    assert truncate(follower, leader, leader_epoch=2) == [(2, 2, 14)]
    assert follower.epochs.entries == [(0, 0), (2, 10)]
