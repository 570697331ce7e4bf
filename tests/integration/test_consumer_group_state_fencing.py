"""Two coordinators' stores on one real ZooKeeper write a "consumer"-protocol group's state (KIP-848) only over the
znode version each last read or wrote: the one behind is refused (StaleGroupState) until it reads again, so the
coordinator losing a group cannot overwrite what its successor stored, whatever the order of their writes."""

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
