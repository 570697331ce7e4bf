"""The coordinator's storing of "consumer"-protocol groups (KIP-848) with a fake store: a heartbeat that changed
the group is answered once the change is stored, a failed write is a retriable error and writes pause for a
second, a broker reads its own last write back, not an older one, and DeleteGroups sees stored members."""

from __future__ import annotations

import asyncio

import pytest

from broker.groups.consumer_group import HeartbeatError
from broker.groups.coordinator import GroupCoordinator
from broker.groups.stores import StaleGroupState
from broker.protocol.messages import ErrorCode

pytestmark = [pytest.mark.unit, pytest.mark.timeout(30)]
META = {"t": 4}


class SlowStore:
    """Group states in a dict; each write can be held (``gate``) or made to fail (``failing``)."""

    def __init__(self):
        self.states: dict[str, dict | None] = {}
        self.writes: list = []
        self.gate = asyncio.Event()
        self.gate.set()
        self.failing = False

    async def load(self, group):
        return {}

    async def has(self, group):
        return False

    async def groups(self):
        return []

    async def load_consumer_group(self, group):
        return self.states.get(group)

    async def save_consumer_group(self, group, state):
        await self.gate.wait()
        if self.failing:
            raise OSError("ZooKeeper away")
        self.states[group] = state
        self.writes.append(state)

    async def delete(self, group):
        self.states.pop(group, None)

    async def commit(self, group, offsets):
        pass


class FakeBroker:
    def __init__(self):
        self.config = {"group.initial.rebalance.delay.ms": 0, "group.consumer.session.timeout.ms": 45000}
        self.cluster = None
        self.node_id = 0


def coordinator(store: SlowStore) -> GroupCoordinator:
    coord = GroupCoordinator(FakeBroker())
    coord.store = store
    return coord


async def beat(coord, member_id="", epoch=0, owned=None, topics=("t",)):
    return await coord.consumer_heartbeat("g", member_id=member_id, epoch=epoch, instance_id=None, rack_id=None,
                                          rebalance_timeout_ms=-1, topics=topics, regex=None, assignor=None,
                                          owned=owned, metadata=META)


def test_a_changing_heartbeat_is_answered_once_stored_and_a_failed_write_is_retriable():
    async def main():
        store = SlowStore()
        coord = coordinator(store)
        store.gate.clear()
        answer = asyncio.ensure_future(beat(coord, "a"))
        await asyncio.sleep(0.05)
        assert not answer.done()  # the join waits for its state to be stored
        store.gate.set()
        first = await answer
        assert first.epoch == 1 and store.states["g"]["members"][0]["member_id"] == "a"
        writes = len(store.writes)
        await beat(coord, "a", 1, owned=first.assignment)  # nothing changed: nothing written, nothing waited
        assert len(store.writes) == writes
        store.failing = True
        with pytest.raises(HeartbeatError) as err:
            await beat(coord, "b")
        assert err.value.error == ErrorCode.coordinator_not_available
        store.failing = False
        with pytest.raises(HeartbeatError):  # within a second of the failure: refused without writing
            await beat(coord, "b", 2, owned=set())
        await asyncio.sleep(1.05)
        back = await beat(coord, "b", 2, owned=set())  # b's membership was kept in memory; now it is stored
        assert back.epoch == 2 and {m["member_id"] for m in store.states["g"]["members"]} == {"a", "b"}

    asyncio.run(main())


def test_a_takeover_reads_the_stored_group_and_its_own_last_write_first():
    async def main():
        store = SlowStore()
        old = coordinator(store)
        a = await beat(old, "a")
        new = coordinator(store)  # another broker's coordinator, reading what the first stored
        again = await beat(new, "a", a.epoch, owned=a.assignment)
        assert again.epoch == a.epoch and new.consumer_groups["g"].members["a"].assigned == a.assignment
        # the last member leaves while the store is slow; the group is pruned, then asked for again
        store.gate.clear()
        leaving = asyncio.ensure_future(beat(new, "a", -1))
        await asyncio.sleep(0.05)
        new._expire(0.0)  # the empty group leaves memory; its "gone" is still being written
        assert "g" not in new.consumer_groups
        looked_up = asyncio.ensure_future(new.consumer_group("g"))
        await asyncio.sleep(0.05)
        assert not looked_up.done()  # it waits for its own write, not reading the older state
        store.gate.set()
        await leaving
        assert await looked_up is None and store.states["g"] is None

    asyncio.run(main())


def test_delete_groups_sees_members_another_coordinator_stored():
    async def main():
        store = SlowStore()
        await beat(coordinator(store), "a")
        other = coordinator(store)
        assert await other.delete("g") == ErrorCode.non_empty_group  # read from the store, not only memory
        assert store.states["g"]["members"]
        corrupt = SlowStore()
        corrupt.states["g"] = {"members": [{"no": "epoch"}]}
        fresh = coordinator(corrupt)
        assert await fresh.consumer_group("g") is None  # an unreadable state: the group starts empty
        assert (await beat(fresh, "z")).epoch == 1

    asyncio.run(main())


def test_a_write_refused_as_stale_drops_the_group_and_reads_it_again():
    """The store refuses a write made over an older state than it holds (another coordinator wrote since): the
    heartbeat is NOT_COORDINATOR, this coordinator forgets the group and the next heartbeat reads the store's."""
    async def main():
        store = SlowStore()
        coord = coordinator(store)
        a = await beat(coord, "a")
        other = coordinator(store)  # a successor: member b joins there, so the stored group has a and b
        await beat(other, "b")
        assert set(other.consumer_groups["g"].members) == {"a", "b"}

        original = store.save_consumer_group

        async def stale(group, state):
            raise StaleGroupState("written by another coordinator")

        store.save_consumer_group = stale
        with pytest.raises(HeartbeatError) as refused:
            await beat(coord, "c")  # a new member on the old coordinator: its write is behind the store's
        assert refused.value.error == ErrorCode.not_coordinator and "g" not in coord.consumer_groups
        store.save_consumer_group = original
        await beat(coord, "a", a.epoch, owned=a.assignment)  # read again: b is there, c is not
        assert set(coord.consumer_groups["g"].members) == {"a", "b"}
        assert coord.consumer_groups["g"].epoch == other.consumer_groups["g"].epoch

    asyncio.run(main())


def test_a_consumer_protocol_member_commits_with_offset_commit_v9():
    """Kafka's ConsumerGroup.validateOffsetCommit: UNSUPPORTED_VERSION below v9 for a member of the "consumer"
    protocol (after the member is known, before its epoch is checked); a simple commit to an empty group, any."""
    async def main():
        coord = coordinator(SlowStore())
        a = await beat(coord, "a")
        offsets = {("t", 0): (5, "")}
        assert await coord.commit("g", "a", a.epoch, offsets, api_version=8) == ErrorCode.unsupported_version
        assert await coord.commit("g", "a", a.epoch + 7, offsets, api_version=8) == ErrorCode.unsupported_version
        assert await coord.commit("g", "nobody", a.epoch, offsets, api_version=8) == ErrorCode.unknown_member_id
        assert await coord.commit("g", "a", a.epoch, offsets, api_version=9) == ErrorCode.none
        assert await coord.commit("g", "a", a.epoch + 7, offsets, api_version=9) == ErrorCode.stale_member_epoch
        assert await coord.commit("h", "", -1, offsets, api_version=2) == ErrorCode.none

    asyncio.run(main())


def test_a_stored_group_state_is_bounded_before_it_is_inflated():
    """A compressed state read back whole; one that would inflate past STATE_MAX (or is cut short) is no state, read
    without inflating more than STATE_MAX; a state whose JSON is larger than that is refused when written."""
    import zlib

    from broker.groups.stores import STATE_MAX, decode_group_state, encode_group_state

    state = {"epoch": 3, "members": [{"member_id": f"m{i}", "assigned": [["t", i]]} for i in range(5000)]}
    data = encode_group_state(state)
    assert data[:1] == b"\x78" and decode_group_state(data) == state
    assert decode_group_state(data[:-10]) is None
    bomb = zlib.compress(b"{" + b" " * (STATE_MAX + 1) + b"}", 9)
    assert len(bomb) < 200_000 and decode_group_state(bomb) is None
    with pytest.raises(ValueError, match="bytes of JSON"):
        encode_group_state({"x": "y" * STATE_MAX})
