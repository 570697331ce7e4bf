"""Two coordinators' stores on one real ZooKeeper write a "consumer"-protocol group's state (KIP-848) only over the
znode version each last read or wrote: the one behind is refused (StaleGroupState) until it reads again, so the
coordinator losing a group cannot overwrite what its successor stored, whatever the order of their writes. A large
state is stored compressed; one too large for a znode even so is refused before ZooKeeper sees it."""

from __future__ import annotations

import asyncio
import json

import pytest
from support import ZooKeeperProcess

from broker.cluster.zk import Zk
from broker.groups.stores import PROTOCOL_STATE, StaleGroupState, ZkOffsetStore

pytestmark = [pytest.mark.integration, pytest.mark.timeout(90)]


def test_a_coordinator_behind_the_store_cannot_overwrite_it(tmp_path):
    zk_proc = ZooKeeperProcess(tmp_path / "zk").start()

    async def main():
        old_zk, new_zk = Zk(zk_proc.connect, 10_000), Zk(zk_proc.connect, 10_000)
        await old_zk.start()
        await new_zk.start()
        old, new = ZkOffsetStore(old_zk), ZkOffsetStore(new_zk)
        try:
            assert await old.load_consumer_group("g") is None and await new.load_consumer_group("g") is None
            await old.save_consumer_group("g", {"epoch": 1})
            with pytest.raises(StaleGroupState):  # both saw no group: the second creation is refused
                await new.save_consumer_group("g", {"epoch": 1, "by": "new"})
            with pytest.raises(StaleGroupState):  # and stays refused until it reads the group
                await new.save_consumer_group("g", {"epoch": 1, "by": "new"})
            assert await new.load_consumer_group("g") == {"epoch": 1}
            await new.save_consumer_group("g", {"epoch": 2})
            await new.save_consumer_group("g", {"epoch": 3})  # its own writes move its version along

            # the old coordinator's write, late: refused, the successor's state stays
            with pytest.raises(StaleGroupState):
                await old.save_consumer_group("g", {"epoch": 2, "by": "old"})
            with pytest.raises(StaleGroupState):
                await old.save_consumer_group("g", None)
            data, _ = await new_zk.get(f"/consumers/g/{PROTOCOL_STATE}")
            assert json.loads(data) == {"epoch": 3}

            # a deletion over the version read, and a write behind it refused
            assert await old.load_consumer_group("g") == {"epoch": 3}
            await old.save_consumer_group("g", None)
            with pytest.raises(StaleGroupState):
                await new.save_consumer_group("g", {"epoch": 4})
            assert await new.load_consumer_group("g") is None
            await new.save_consumer_group("g", {"epoch": 4})
            assert await old.load_consumer_group("g") == {"epoch": 4}
        finally:
            for zk in (old_zk, new_zk):
                await zk.stop()

    try:
        asyncio.run(main())
    finally:
        zk_proc.stop()


def big_group(members: int, partitions: int) -> dict:
    """A "consumer"-protocol group's snapshot (ConsumerGroup.snapshot's shape) with ``members`` sharing
    ``partitions`` of one topic."""
    ids = [f"member-{i:06d}-xxxxxxxxxx" for i in range(members)]
    owned = {m: [["page-views", p] for p in range(i, partitions, members)] for i, m in enumerate(ids)}
    return {"epoch": 7, "assignment_epoch": 7, "static": {}, "target": owned, "topics": {"page-views": partitions},
            "members": [{"member_id": m, "instance_id": None, "rack_id": None, "client_id": "rdkafka",
                         "client_host": "/127.0.0.1", "topics": ["page-views"], "regex": None, "assignor": "uniform",
                         "rebalance_timeout_ms": 300000, "epoch": 7, "previous_epoch": 6, "state": "stable",
                         "assigned": owned[m], "revoking": []} for m in ids]}


def test_a_large_group_state_is_stored_compressed_and_a_too_large_one_refused(tmp_path):
    """1,000 members sharing 30,000 partitions: ~1.5 MB of JSON, more than ZooKeeper's 1 MiB znode limit, stored
    zlib-compressed and read back whole; a small state stays readable JSON; a state too large even compressed is
    refused with a clear error before ZooKeeper sees it (ZooKeeper answers an oversized request by closing the
    session's connection), and the broker's session still works."""
    zk_proc = ZooKeeperProcess(tmp_path / "zk").start()
    large, huge = big_group(1000, 30_000), big_group(5000, 300_000)
    assert len(json.dumps(large, separators=(",", ":"))) > 1_048_576

    async def main():
        zk = Zk(zk_proc.connect, 10_000)
        await zk.start()
        store = ZkOffsetStore(zk)
        try:
            assert await store.load_consumer_group("big") is None
            await store.save_consumer_group("big", large)
            data, _ = await zk.get(f"/consumers/big/{PROTOCOL_STATE}")
            assert len(data) < 300_000, len(data)
            assert await ZkOffsetStore(zk).load_consumer_group("big") == large
            await store.save_consumer_group("small", {"epoch": 1})
            data, _ = await zk.get(f"/consumers/small/{PROTOCOL_STATE}")
            assert json.loads(data) == {"epoch": 1}
            with pytest.raises(ValueError, match="more than a znode holds"):
                await store.save_consumer_group("big", huge)
            assert await store.load_consumer_group("big") == large
        finally:
            await zk.stop()

    try:
        asyncio.run(main())
    finally:
        zk_proc.stop()
