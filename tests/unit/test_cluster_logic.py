"""Pure parts of cluster mode: placement, znode JSON, the controller's decisions, the leader epoch cache, the
leader's ISR / high-watermark bookkeeping and the producer-state snapshot."""

import os
import random
import uuid

import pytest
from broker.cluster import znodes
from broker.cluster.controller import Controller
from broker.cluster.placement import PlacementError, assign_replicas
from broker.log.epoch_cache import EpochCache
from broker.log.producer_state import DuplicateSequence, ProducerStateManager

pytestmark = pytest.mark.unit


def test_placement_round_robin_leaders_and_shifted_followers():
    out = assign_replicas([0, 1, 2, 3, 4], 10, 3, start_index=0, start_shift=0)
    assert [out[p][0] for p in range(10)] == [0, 1, 2, 3, 4, 0, 1, 2, 3, 4]
    assert out[0] == [0, 1, 2] and out[4] == [4, 0, 1]
    assert out[5] == [0, 2, 3]  # after a full round the followers shift by one
    assert all(len(set(r)) == 3 for r in out.values())


def test_placement_spreads_leaders_evenly_from_a_random_start():
    out = assign_replicas([3, 1, 2], 6, 2, rng=random.Random(7))
    leaders = [r[0] for r in out.values()]
    assert sorted(leaders) == [1, 1, 2, 2, 3, 3]


def test_placement_refuses_too_large_replication_factor():
    with pytest.raises(PlacementError, match="replication factor 4"):
        assign_replicas([0, 1, 2], 1, 4)


def test_znode_json_round_trips_in_kafkas_layout():
    tid = uuid.uuid4()
    a = znodes.TopicAssignment(tid, {0: [1, 2], 1: [2, 0]})
    back = znodes.decode_assignment(znodes.encode_assignment(a))
    assert back.topic_id == tid and back.partitions == a.partitions
    assert b'"partitions":{"0":[1,2],"1":[2,0]}' in znodes.encode_assignment(a)
    state = znodes.PartitionState(2, 5, (2, 0), 3)
    assert znodes.decode_state(znodes.encode_state(state), 7) == state.with_(version=7)
    assert znodes.decode_broker(4, znodes.encode_broker(znodes.BrokerInfo(4, "h", 9, "r1"))).rack == "r1"
    import json
    two = znodes.BrokerInfo(4, "h", 9, None, (("INTERNAL", "h", 9), ("EXTERNAL", "e", 19)))
    registered = json.loads(znodes.encode_broker(two, {"INTERNAL": "SASL_SSL", "EXTERNAL": "SSL"}))
    assert registered["listener_security_protocol_map"] == {"INTERNAL": "SASL_SSL", "EXTERNAL": "SSL"}
    assert len(znodes.topic_id_text(tid)) == 22  # Kafka's Uuid.toString()


class _Cfg(dict):
    pass


def controller(unclean: bool = False) -> Controller:
    c = Controller(0, zk=None, config=_Cfg({"unclean.leader.election.enable": unclean}))
    c.epoch = 9
    return c


def test_controller_elects_from_the_isr_in_assignment_order():
    st = znodes.PartitionState(1, 4, (1, 2, 0), 3, version=11)
    new = controller().decide(st, [1, 2, 0], live={0, 2}, rebalance=False)
    assert (new.leader, new.leader_epoch, new.isr, new.controller_epoch, new.version) == (2, 5, (2, 0), 9, 11)


def test_controller_takes_dead_brokers_out_of_the_isr_without_a_new_epoch():
    st = znodes.PartitionState(1, 4, (1, 2, 0), 3)
    new = controller().decide(st, [1, 2, 0], live={1, 2}, rebalance=False)
    assert (new.leader, new.leader_epoch, new.isr) == (1, 4, (1, 2))


def test_controller_goes_offline_rather_than_unclean():
    st = znodes.PartitionState(1, 4, (1,), 3)
    new = controller().decide(st, [1, 2, 0], live={0, 2}, rebalance=False)
    assert (new.leader, new.isr) == (-1, (1,))  # waits for broker 1, the last in-sync replica
    assert controller().decide(new, [1, 2, 0], live={0, 2}, rebalance=False) is None
    unclean = controller(unclean=True).decide(st, [1, 2, 0], live={0, 2}, rebalance=False)
    assert (unclean.leader, unclean.isr) == (2, (2,))
    back = controller().decide(new, [1, 2, 0], live={0, 1, 2}, rebalance=False)
    assert (back.leader, back.isr) == (1, (1,))


def test_controller_restores_the_preferred_leader_when_in_sync():
    st = znodes.PartitionState(2, 4, (2, 1, 0), 3)
    assert controller().decide(st, [1, 2, 0], live={0, 1, 2}, rebalance=False) is None
    new = controller().decide(st, [1, 2, 0], live={0, 1, 2}, rebalance=True)
    assert (new.leader, new.leader_epoch) == (1, 5)


def test_a_reassignment_step_keeps_what_is_added_and_removed_across_passes():
    """Kafka's first step (target, then the original replicas leaving) computed against the replicas before the
    reassignment, also on a later pass that sees the union already written (it once found nothing to add)."""
    c = controller(False)
    assignment = znodes.TopicAssignment(uuid.uuid4(), {0: [0, 2]})
    state = znodes.PartitionState(leader=0, leader_epoch=1, isr=(0, 2), controller_epoch=1)
    for _ in range(2):  # the first pass and a later one
        replicas, done = c._reassign_step(assignment, 0, [1, 2], state, {0, 1, 2})
        assert (replicas, done) == ([1, 2, 0], False)
        assert (assignment.adding[0], assignment.removing[0]) == ([1], [0])
    replicas, done = c._reassign_step(assignment, 0, [1, 2], state.with_(isr=(0, 1, 2)), {0, 1, 2})
    assert (replicas, done, assignment.adding, assignment.removing) == ([1, 2], True, {}, {})


def test_new_partition_gets_first_live_replica_as_leader():
    new = controller().decide(None, [1, 2, 0], live={0, 2}, rebalance=False)
    assert (new.leader, new.leader_epoch, new.isr) == (2, 0, (2, 0))


def test_epoch_cache_end_offsets_and_truncation(tmp_path):
    cache = EpochCache(str(tmp_path))
    cache.assign(0, 0)
    cache.assign(2, 100)
    cache.assign(2, 150)  # same epoch: ignored
    cache.assign(5, 300)
    assert cache.end_offset_for(5, 420) == (5, 420)
    assert cache.end_offset_for(2, 420) == (2, 300)
    assert cache.end_offset_for(3, 420) == (2, 300)  # no epoch 3: the largest below, and where it ended
    assert cache.end_offset_for(9, 420) == (-1, -1)
    cache.truncate_from_end(300)
    assert cache.entries == [(0, 0), (2, 100)]
    assert EpochCache(str(tmp_path)).entries == [(0, 0), (2, 100)]  # persisted in Kafka's file format
    assert open(os.path.join(tmp_path, "leader-epoch-checkpoint")).read() == "0\n2\n0 0\n2 100\n"


def test_producer_state_snapshot_round_trip(tmp_path):
    state = ProducerStateManager()
    state.update(7, 0, 0, 4, 100)
    state.update(7, 0, 5, 9, 105)
    path = str(tmp_path / "producer.snapshot")
    state.snapshot(path, 110)
    loaded, offset = ProducerStateManager.load_snapshot(path)
    assert offset == 110
    with pytest.raises(DuplicateSequence) as dup:
        loaded.check(7, 0, 5, 9)
    assert dup.value.base_offset == 105
    loaded.check(7, 0, 10, 12)  # the next sequence is accepted
