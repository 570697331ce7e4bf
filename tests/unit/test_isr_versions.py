"""A partition leader's ISR and the version of its state znode: what reaches the leader last is not always the newest
(its own conditional write's answer and the watch's read of a later write by the controller travel different
threads). The leader keeps the newest version it has seen, so its next proposal names the znode's real version;
an older state applied over a newer one would be refused at every later proposal, with no change left to watch."""

import asyncio
import types

import pytest
from broker.cluster import znodes
from broker.cluster.partition import Partition
from broker.cluster.replica_manager import ReplicaManager
from broker.log.log import LogConfig, PartitionLog

pytestmark = [pytest.mark.unit, pytest.mark.timeout(30)]


def leader_of_t0(tmp_path, states: dict) -> tuple[ReplicaManager, Partition]:
    """Broker 1 leading t-0 (epoch 3, ISR 1, 2, 3, state znode version 5), with fakes for ZooKeeper's side."""
    manager = ReplicaManager.__new__(ReplicaManager)
    manager.broker_id, manager.registered, manager.stopping = 1, True, False
    manager.partitions, manager.fetchers = {}, {}
    manager.broker = types.SimpleNamespace(metrics=types.SimpleNamespace(isr_changed=lambda old, new: None),
                                           notify_append=lambda topic, index: None)
    manager.metadata = types.SimpleNamespace(state=lambda t, i: states[(t, i)], replicas=lambda t, i: [1, 2, 3])
    part = Partition("t", 0, PartitionLog(str(tmp_path / "t-0"), "t", 0, LogConfig()), 1)
    part.become_leader(3, (1, 2, 3), [1, 2, 3], 5, 1)
    part.zk_created = 100
    manager.partitions[("t", 0)] = part
    states[("t", 0)] = znodes.PartitionState(1, 3, (1, 2, 3), 1, 5, 100)
    return manager, part


def test_the_controllers_later_state_seen_before_the_answer_to_the_leaders_own_write_stays(tmp_path):
    states: dict = {}
    manager, part = leader_of_t0(tmp_path, states)

    async def set_state(fn, path, data, version):
        assert version == 5
        # written (version 6); before its answer reaches the loop, the controller shrinks the ISR (version 7) and
        # the watch's read of that arrives first
        states[("t", 0)] = znodes.PartitionState(1, 3, (1, 3), 1, 7, 100)
        manager._on_partition("t", 0)
        return types.SimpleNamespace(version=6, czxid=100)

    manager.zk = types.SimpleNamespace(call=set_state, client=types.SimpleNamespace(set=None))
    assert asyncio.run(manager.propose_isr(part, (1, 2))) is True
    assert (part.isr, part.zk_version) == ((1, 3), 7)


def test_a_state_older_than_the_leaders_own_write_is_ignored(tmp_path):
    states: dict = {}
    manager, part = leader_of_t0(tmp_path, states)

    async def set_state(fn, path, data, version):
        return types.SimpleNamespace(version=6, czxid=100)

    manager.zk = types.SimpleNamespace(call=set_state, client=types.SimpleNamespace(set=None))
    assert asyncio.run(manager.propose_isr(part, (1, 2))) is True
    assert (part.isr, part.zk_version) == ((1, 2), 6)
    manager._on_partition("t", 0)  # the watch's read of version 5, late
    assert (part.isr, part.zk_version) == ((1, 2), 6)
    states[("t", 0)] = znodes.PartitionState(1, 3, (1,), 1, 8, 100)  # a newer one is taken
    manager._on_partition("t", 0)
    assert (part.isr, part.zk_version) == ((1,), 8)
    # the znode made again (a later creation zxid): newer at any version
    states[("t", 0)] = znodes.PartitionState(1, 3, (1, 2), 1, 0, 250)
    manager._on_partition("t", 0)
    assert (part.isr, part.zk_version, part.zk_created) == ((1, 2), 0, 250)


def test_replicas_follow_the_assignment_even_when_the_state_read_is_older(tmp_path):
    states: dict = {}
    manager, part = leader_of_t0(tmp_path, states)
    part.zk_version = 6  # its own write, already applied
    manager.metadata.replicas = lambda t, i: [1, 2, 3, 4]  # a reassignment adds broker 4
    manager._on_partition("t", 0)  # with the cached state still at version 5
    assert part.replicas == [1, 2, 3, 4] and 4 in part.followers and part.isr == (1, 2, 3)
