"""A three-node ZooKeeper ensemble under a three-broker cluster: killing the ZooKeeper leader (kill -9) stops
nothing. Brokers keep their sessions and registrations, acks=all produce and consume go on, CreateTopics works, and
the controller still fails a killed broker's partitions over. Prints each ZooKeeper JVM's RSS (the memory cost of
three nodes instead of one)."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from support import REPO, EnsembleCluster, Ledger, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]


@pytest.fixture
def ensemble_cluster(tmp_path):
    """``ensemble_cluster(**overrides)``: three brokers on a three-node ZooKeeper ensemble; all stopped at the end."""
    made = []

    def make(**overrides):
        c = EnsembleCluster(tmp_path / f"cluster{len(made)}", **overrides)
        made.append(c)
        return c.start()

    yield make
    for c in made:
        c.stop()


def create(c, name: str, partitions: int, rf: int) -> None:
    admin = AdminClient({"bootstrap.servers": c.bootstrap})
    admin.create_topics([NewTopic(name, partitions, rf)])[name].result(30)


def sessions(c) -> dict[int, int]:
    """Each registered broker's ZooKeeper session (the ephemeralOwner of ``/brokers/ids/<id>``)."""
    zk = c.zk()
    try:
        return {int(b): zk.get(f"/brokers/ids/{b}")[1].ephemeralOwner for b in zk.get_children("/brokers/ids")}
    finally:
        zk.stop()
        zk.close()


def test_killing_the_zookeeper_leader_stops_nothing(ensemble_cluster):
    started = time.monotonic()
    c = ensemble_cluster(min_insync_replicas=2)
    ensemble = c.zookeeper
    create(c, "ha", 2, 3)
    ledger = Ledger(c.bootstrap, "ha", message_timeout_ms=60000).start()  # about 200 records/s
    try:
        ledger.progress("first acknowledgements")
        before = sessions(c)
        assert set(before) == {0, 1, 2}
        rss_start = [ensemble.rss_kb(i) for i in range(3)]

        # kill -9 the ZooKeeper leader: the two others elect a new one, every broker keeps its session
        old = ensemble.leader()
        assert old is not None
        killed_at = time.monotonic()
        ensemble.kill9(old)
        (new,) = wait_until(lambda: [i for i in [ensemble.leader()] if i not in (None, old)], 60,
                            what="a new ZooKeeper leader")
        elected_in = time.monotonic() - killed_at
        assert all(b.alive() for b in c.brokers.values())
        ledger.progress("acks=all produce after the ZooKeeper leader's death")
        assert sessions(c) == before, "a broker lost its ZooKeeper session"
        create(c, "after-zk-leader-kill", 3, 3)
        zk = c.zk()
        try:
            assert zk.exists("/brokers/topics/after-zk-leader-kill/partitions/2/state")
        finally:
            zk.stop()
            zk.close()

        # the controller, on the surviving quorum, still fails a killed broker's partitions over
        victim = c.state("ha", 0)["leader"]
        c.brokers[victim].kill9()
        (leader,) = wait_until(lambda: [x for x in [c.state("ha", 0)["leader"]] if x not in (victim, -1)], 60,
                               what="a new partition leader")
        wait_until(lambda: victim not in c.state("ha", 0)["isr"], 60, what="the killed broker out of the ISR")
        ledger.progress("acks=all produce after the broker failover")

        # the killed ZooKeeper node rejoins as a follower
        ensemble.start(old)
        assert ensemble.mode(old) == "follower"
        rss_end = [ensemble.rss_kb(i) for i in range(3)]
    finally:
        ledger.stop()
    assert all(b.alive() for i, b in c.brokers.items() if i != victim)

    result = ledger.check()  # every acknowledged record, in order, exactly once
    print(f"\nZooKeeper ensemble: leader {old + 1} killed, server {new + 1} elected in {elected_in:.2f}s; "
          f"broker {victim} killed, partition leader now {leader}; {result['acknowledged']} records acked, "
          f"failures {result['delivery_failures']}; {time.monotonic() - started:.0f}s")
    print("ZooKeeper RSS per node (MB) at start: " + ", ".join(f"{kb / 1024:.0f}" for kb in rss_start)
          + "; at the end (node {} restarted): ".format(old + 1) + ", ".join(f"{kb / 1024:.0f}" for kb in rss_end))


def test_bad_ensemble_arguments_exit_2_in_one_line(tmp_path):
    """The real command line: refused before java starts, one line on stderr, exit code 2."""
    result = subprocess.run([sys.executable, "-m", "logbus.cli", "zookeeper", "--data-dir", str(tmp_path / "zk"),
                             "--server-id", "2", "--server", "1=127.0.0.1:2888:3888"], capture_output=True,
                            text=True, timeout=60, env=dict(os.environ, PYTHONPATH=str(REPO / "platform")))
    assert result.returncode == 2
    assert result.stderr == "logbus: zookeeper: --server-id 2 is not among the --server ids [1]\n"
    assert not (tmp_path / "zk").exists()
