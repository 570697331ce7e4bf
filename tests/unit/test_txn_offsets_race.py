"""OffsetFetch with ``require_stable`` while a transaction's offsets are being applied: the coordinator answers
UNSTABLE_OFFSET_COMMIT until its cache holds the new offsets, never the offsets from before the transaction (a
found bug: an exactly-once mirror reassigned right after a commit read the old offsets and copied one batch twice)."""

import asyncio
from types import SimpleNamespace

import pytest
from broker.handlers import offset_fetch
from broker.protocol.messages import ErrorCode
from broker.txn.offsets import TxnOffsets

pytestmark = [pytest.mark.unit, pytest.mark.timeout(30)]


class Groups:
    def __init__(self):
        self.offsets = {"g": {("t", 0): (5, "")}}  # the coordinator's cache: the offset before the transaction
        self.store = None

    def coordinator_id(self, group):
        return 1

    async def fetch_offsets(self, group, wanted):
        return ErrorCode.none, {k: self.offsets[group].get(k, (-1, "")) for k in wanted}


class SlowPending:
    """A store whose marker application is paused after the stored offsets changed (ZooKeeper's multi-op done),
    before the coordinator's cache is updated."""

    def __init__(self):
        self.entries = {"g": {7: (0, {("t", 0): (9, "")})}}
        self.stored, self.release = asyncio.Event(), asyncio.Event()

    async def get(self, group):
        return dict(self.entries.get(group, {}))

    async def finish(self, group, pid, commit, store):
        _epoch, offsets = self.entries[group].pop(pid)
        self.stored.set()
        await self.release.wait()
        return offsets if commit else None


def fetch(broker):
    request = SimpleNamespace(group_id="g", require_stable=True,
                              topics=[SimpleNamespace(name="t", partition_indexes=[0])])
    response = asyncio.get_running_loop().create_task(
        offset_fetch.handle(broker, SimpleNamespace(api_version=7), request))
    return response


def test_offsets_being_applied_are_unstable_never_stale():
    async def scenario():
        broker = SimpleNamespace(node_id=1, groups=Groups(), authorizer=None, cluster=None)
        offsets = TxnOffsets(broker)
        pending = SlowPending()
        offsets._pending = pending
        broker.txn = SimpleNamespace(offsets=offsets)

        async def answer():
            resp = await fetch(broker)
            part = resp.topics[0].partitions[0]
            return ErrorCode(part.error_code), part.committed_offset

        assert await answer() == (ErrorCode.unstable_offset_commit, -1)  # pending: the client retries
        completing = asyncio.create_task(offsets.complete("g", 7, True))
        await pending.stored.wait()
        assert await answer() == (ErrorCode.unstable_offset_commit, -1)  # applied in the store, not in the cache
        pending.release.set()
        assert await completing == ErrorCode.none
        assert await answer() == (ErrorCode.none, 9)

    asyncio.run(scenario())
