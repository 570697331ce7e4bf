"""Static membership (KIP-345) in the group coordinator, driven in-process: a static member that comes back with no
member id takes over its old place without a rebalance, the old id is fenced, LeaveGroup removes by instance id,
a rebalance keeps static members that did not rejoin. The broker and the registry store are fakes."""

from __future__ import annotations

import asyncio
import struct

import pytest
from broker.groups.coordinator import GroupCoordinator
from broker.groups.group import COMPLETING, STABLE
from broker.protocol.messages import ErrorCode

pytestmark = [pytest.mark.unit, pytest.mark.timeout(30)]


def _str(s: str) -> bytes:
    return struct.pack(">h", len(s)) + s.encode()


def subscription(*topics: str) -> bytes:
    return struct.pack(">hi", 0, len(topics)) + b"".join(_str(t) for t in topics) + struct.pack(">i", -1)


def assignment(topic: str, *partitions: int) -> bytes:
    return (struct.pack(">hi", 0, 1) + _str(topic) + struct.pack(f">i{len(partitions)}i", len(partitions), *partitions)
            + struct.pack(">i", -1))


class RecordingStore:
    """Stands in for the ZooKeeper registries: what the coordinator wrote, in order."""

    def __init__(self):
        self.ids: dict[str, dict] = {}
        self.owned: dict[tuple[str, int], str] = {}
        self.offsets: dict = {}

    async def load(self, group):
        return {}

    async def commit(self, group, offsets):
        self.offsets.update(offsets)

    async def member_joined(self, group, member_id, data):
        self.ids[member_id] = data

    async def member_left(self, group, member_id):
        self.ids.pop(member_id, None)

    async def owners(self, group, owners):
        self.owned = dict(owners)

    async def load_consumer_group(self, group):
        return None

    async def save_consumer_group(self, group, state):
        pass


class FakeBroker:
    def __init__(self, initial_delay_ms: int = 100):
        self.config = {"group.initial.rebalance.delay.ms": initial_delay_ms, "group.min.session.timeout.ms": 100,
                       "group.max.session.timeout.ms": 300000,
                       "group.consumer.session.timeout.ms": 45000}
        self.cluster = None
        self.node_id = 0


PROTO = [("range", subscription("t"))]


def coordinator() -> GroupCoordinator:
    coord = GroupCoordinator(FakeBroker())
    coord.store = RecordingStore()
    coord._task = asyncio.get_running_loop().create_task(coord._tick())
    return coord


async def join(coord, member_id="", instance=None, session_ms=6000, protocols=PROTO, version=5):
    return await coord.join("g", member_id, instance, "client", "host", session_ms, 6000, "consumer", protocols,
                            require_known_member_id=version >= 4, supports_skip_assignment=version >= 9)


async def stable_pair(coord, instances=("a", "b")):
    """Two static members, generation 1, the leader assigns partition 0 to the first and 1 to the second."""
    r1, r2 = await asyncio.gather(join(coord, instance=instances[0]), join(coord, instance=instances[1]))
    assert r1.error == r2.error == ErrorCode.none and r1.generation == r2.generation == 1
    leader = r1 if r1.member_id == r1.leader else r2
    follower = r2 if leader is r1 else r1
    assert [i for _, i, _ in leader.members] == list(instances)
    plan = {r1.member_id: assignment("t", 0), r2.member_id: assignment("t", 1)}
    (e1, a1), (e2, a2) = await asyncio.gather(coord.sync("g", leader.member_id, 1, plan),
                                              coord.sync("g", follower.member_id, 1, {}))
    assert e1 == e2 == ErrorCode.none
    assert coord.groups["g"].state == STABLE
    await asyncio.sleep(0)  # the registry writes
    return r1, r2


def run(coro):
    async def main():
        coord = coordinator()
        try:
            await coro(coord)
        finally:
            coord._task.cancel()
    asyncio.run(main())


def test_a_static_member_gets_its_member_id_at_once_without_member_id_required():
    async def body(coord):
        r = await join(coord, instance="a", version=5)
        assert r.error == ErrorCode.none and r.member_id.startswith("a-") and r.generation == 1
        dynamic = await join(coord, version=5)
        assert dynamic.error == ErrorCode.member_id_required
    run(body)


def test_a_restarted_static_member_takes_over_its_assignment_without_a_rebalance():
    async def body(coord):
        r1, r2 = await stable_pair(coord)
        group = coord.groups["g"]
        back = await join(coord, instance="b")  # b restarted: no member id
        assert back.error == ErrorCode.none
        assert back.member_id != r2.member_id and back.member_id.startswith("b-")
        assert back.generation == 1 and group.generation == 1 and group.state == STABLE
        assert back.members == []  # not the leader: nothing to assign
        assert coord.heartbeat("g", r1.member_id, 1, "a") == ErrorCode.none  # the other member: no rebalance
        error, got = await coord.sync("g", back.member_id, 1, {}, "b")
        assert (error, got) == (ErrorCode.none, assignment("t", 1))
        # the old id is fenced everywhere it shows up with the instance id
        assert coord.heartbeat("g", r2.member_id, 1, "b") == ErrorCode.fenced_instance_id
        assert (await coord.sync("g", r2.member_id, 1, {}, "b"))[0] == ErrorCode.fenced_instance_id
        assert await coord.commit("g", r2.member_id, 1, {("t", 1): (5, "")}, "b") == ErrorCode.fenced_instance_id
        assert (await join(coord, r2.member_id, "b")).error == ErrorCode.fenced_instance_id
        assert await coord.commit("g", back.member_id, 1, {("t", 1): (5, "")}, "b") == ErrorCode.none
        # without the instance id the old id is simply unknown
        assert coord.heartbeat("g", r2.member_id, 1) == ErrorCode.unknown_member_id
        # the registries name the new member id
        await asyncio.sleep(0)
        assert r2.member_id not in coord.store.ids and coord.store.ids[back.member_id]["group_instance_id"] == "b"
        assert coord.store.owned == {("t", 0): r1.member_id, ("t", 1): back.member_id}
    run(body)


def test_a_rejoining_static_leader_is_not_told_it_leads_before_v9_and_told_to_skip_assignment_from_v9():
    async def body(coord):
        r1, r2 = await stable_pair(coord)
        group = coord.groups["g"]
        assert group.leader == r1.member_id
        old = await join(coord, instance="a", version=5)
        assert old.leader == r1.member_id != old.member_id and old.members == [] and not old.skip_assignment
        assert group.leader == old.member_id  # but the group's leader is the new id
        new = await join(coord, instance="a", version=9)
        assert new.leader == new.member_id and new.skip_assignment
        assert sorted(i for _, i, _ in new.members) == ["a", "b"]
        assert group.generation == 1 and group.state == STABLE
        assert (await coord.sync("g", new.member_id, 1, {}, "a")) == (ErrorCode.none, assignment("t", 0))
    run(body)


def test_a_static_rejoin_that_changes_the_selected_protocol_rebalances():
    async def body(coord):
        both = [("range", b"x"), ("roundrobin", b"y")]
        r1, r2 = await asyncio.gather(join(coord, instance="a", protocols=both), join(coord, instance="b",
                                                                                       protocols=both))
        assert r1.leader == r1.member_id
        await asyncio.gather(coord.sync("g", r1.member_id, 1, {}), coord.sync("g", r2.member_id, 1, {}))
        group = coord.groups["g"]
        same = await join(coord, instance="b", protocols=[("roundrobin", b"z"), ("range", b"x")])
        assert same.generation == 1 and group.state == STABLE  # a tie: the leader's choice, range, stands
        task = asyncio.ensure_future(join(coord, instance="b", protocols=[("roundrobin", b"y")]))
        await asyncio.sleep(0.05)
        assert group.state != STABLE  # only roundrobin is common now: the next generation's protocol changes
        assert coord.heartbeat("g", r1.member_id, 1, "a") == ErrorCode.rebalance_in_progress
        again = await join(coord, r1.member_id, "a", protocols=both)
        back = await task
        assert again.generation == back.generation == 2 and group.protocol == "roundrobin"
    run(body)


def test_a_rebalance_keeps_a_static_member_that_did_not_rejoin_until_its_session_expires():
    async def body(coord):
        r1, r2 = await asyncio.gather(join(coord, instance="a", session_ms=600),
                                      join(coord, instance="b", session_ms=600))
        await asyncio.gather(coord.sync("g", r1.member_id, 1, {}), coord.sync("g", r2.member_id, 1, {}))
        group = coord.groups["g"]
        # a dynamic member joins; "b" never rejoins (it was killed): the rebalance waits out the rebalance
        # timeout of 6 s... unless "b"'s session (0.6 s) runs out first, which removes it
        newcomer = asyncio.ensure_future(join(coord, version=3))
        await asyncio.sleep(0.05)
        rejoin_a = asyncio.ensure_future(join(coord, r1.member_id, "a", session_ms=600))
        while r2.member_id in group.members:  # b heartbeats no more
            coord.heartbeat("g", r1.member_id, 1, "a")
            await asyncio.sleep(0.1)
        a, n = await asyncio.gather(rejoin_a, newcomer)
        assert a.generation == n.generation == 2 and "b" not in group.static_members
        assert {a.member_id, n.member_id} == set(group.members)
    run(body)


def test_complete_join_keeps_absent_static_members_and_elects_a_joined_leader():
    async def body(coord):
        r1, r2 = await stable_pair(coord)
        group = coord.groups["g"]
        group.prepare_rebalance()
        task = asyncio.ensure_future(join(coord, r2.member_id, "b"))
        await asyncio.sleep(0)
        group.rebalance_deadline = 0  # the rebalance timeout is over; "a" (the leader) never rejoined
        result = await task
        assert result.generation == 2 and result.leader == r2.member_id
        assert [m for m, _, _ in result.members] == [r1.member_id, r2.member_id]  # "a" is still assigned to
        assert group.state == COMPLETING and group.static_members == {"a": r1.member_id, "b": r2.member_id}
    run(body)


def test_leave_group_removes_static_members_by_instance_id():
    async def body(coord):
        r1, r2 = await stable_pair(coord)
        group = coord.groups["g"]
        error, results = coord.leave("g", [("", "nobody"), ("not-b", "b"), ("", "b")])
        assert error == ErrorCode.none
        assert results == [ErrorCode.unknown_member_id, ErrorCode.fenced_instance_id, ErrorCode.none]
        assert list(group.members) == [r1.member_id] and "b" not in group.static_members
        assert coord.heartbeat("g", r1.member_id, 1, "a") == ErrorCode.rebalance_in_progress
        assert coord.leave("g", [(r1.member_id, "a")]) == (ErrorCode.none, [ErrorCode.none])
        assert coord.leave("g", [(r1.member_id, None)]) == (ErrorCode.none, [ErrorCode.unknown_member_id])
    run(body)


def test_a_second_process_with_the_same_instance_id_fences_the_first_one_waiting_in_a_join():
    async def body(coord):
        r1, r2 = await stable_pair(coord)
        group = coord.groups["g"]
        group.prepare_rebalance()
        waiting = asyncio.ensure_future(join(coord, r2.member_id, "b"))
        await asyncio.sleep(0)
        other = asyncio.ensure_future(join(coord, instance="b"))  # the newcomer takes b's place in the join
        fenced = await waiting
        assert fenced.error == ErrorCode.fenced_instance_id
        await join(coord, r1.member_id, "a")
        assert (await other).generation == 2
    run(body)


def test_the_leaders_sync_answers_every_waiting_member_and_says_how_many(caplog):
    """A follower's SyncGroup that came first waits for the leader's; the leader's answers both, and the broker's log
    says so (the line a failed client test prints, to tell a SyncGroup never sent from one never answered)."""
    async def body(coord):
        r1, r2 = await asyncio.gather(join(coord, instance="a"), join(coord, instance="b"))
        leader = r1 if r1.member_id == r1.leader else r2
        follower = r2 if leader is r1 else r1
        waiting = asyncio.ensure_future(coord.sync("g", follower.member_id, 1, {}))
        await asyncio.sleep(0.05)
        assert not waiting.done() and coord.groups["g"].state == COMPLETING
        plan = {leader.member_id: assignment("t", 0), follower.member_id: assignment("t", 1)}
        with caplog.at_level("INFO", logger="broker.groups.coordinator"):
            assert await coord.sync("g", leader.member_id, 1, plan) == (ErrorCode.none, assignment("t", 0))
        assert await waiting == (ErrorCode.none, assignment("t", 1))
        assert "generation 1 assigned by its leader (2 of 2 member(s) given an assignment); 2 waiting" in caplog.text
        # a member's SyncGroup after the assignment is answered at once
        assert await coord.sync("g", follower.member_id, 1, {}) == (ErrorCode.none, assignment("t", 1))
    run(body)
