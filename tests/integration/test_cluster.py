"""Cluster mode with a real ZooKeeper and real broker processes: registries, placement, controller failover,
replication with ISR, acks=all through leader kills, min.insync.replicas. Outside clients: confluent-kafka,
kcat, kazoo (to read what an operator would see with zkCli.sh)."""

from __future__ import annotations

import datetime
import json
import os
import signal
import subprocess
import time
from collections import Counter

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from rawclient import RawClient, batch, request_module
from support import Ledger, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]


def create(c, name: str, partitions: int, rf: int, **configs: str) -> None:
    admin = AdminClient({"bootstrap.servers": c.bootstrap})
    admin.create_topics([NewTopic(name, partitions, rf, config=configs)])[name].result(30)


def leader_of(c, topic: str, partition: int = 0) -> int:
    return c.state(topic, partition)["leader"]


def controller(zk) -> int:
    from kazoo.exceptions import NoNodeError

    try:
        return json.loads(zk.get("/controller")[0])["brokerid"]
    except NoNodeError:  # between two controllers
        return -1


def test_registries_placement_and_metadata_on_every_broker(cluster):
    c = cluster()
    create(c, "placed", 6, 3)
    zk = c.zk()
    try:
        assert sorted(zk.get_children("/brokers/ids")) == ["0", "1", "2"]
        assert json.loads(zk.get("/controller")[0])["brokerid"] in (0, 1, 2)
        assert int(zk.get("/controller_epoch")[0]) >= 1
        assignment = json.loads(zk.get("/brokers/topics/placed")[0])["partitions"]
        assert json.loads(zk.get("/cluster/id")[0])["id"]
    finally:
        zk.stop()
        zk.close()
    assert sorted(assignment) == [str(p) for p in range(6)]
    assert all(sorted(r) == [0, 1, 2] for r in assignment.values())
    assert Counter(r[0] for r in assignment.values()) == {0: 2, 1: 2, 2: 2}  # leaders round-robin
    followers = Counter((r[0], r[1]) for r in assignment.values())
    assert len(followers) > 3  # the shift spreads each broker's followers over the others
    for p, replicas in assignment.items():
        state = c.state("placed", int(p))
        assert state["leader"] == replicas[0] and sorted(state["isr"]) == [0, 1, 2]
    views = []
    for b in c.brokers.values():  # kcat -L against each broker shows the same leaders
        out = subprocess.run(["kcat", "-L", "-J", "-b", b.bootstrap, "-t", "placed"], capture_output=True,
                             text=True, timeout=30, check=True).stdout
        topic = json.loads(out)["topics"][0]
        views.append({p["partition"]: (p["leader"], [r["id"] for r in p["replicas"]]) for p in topic["partitions"]})
    assert views[0] == views[1] == views[2]
    assert {p: v[0] for p, v in views[0].items()} == {int(p): r[0] for p, r in assignment.items()}


def test_replication_factor_larger_than_live_brokers_is_refused(cluster):
    c = cluster()
    admin = AdminClient({"bootstrap.servers": c.bootstrap})
    with pytest.raises(KafkaException) as err:
        admin.create_topics([NewTopic("too-many", 1, 4)])["too-many"].result(30)
    assert err.value.args[0].name() == "INVALID_REPLICATION_FACTOR"


def test_acks_all_survives_leader_kills(cluster):
    """Every acknowledged message is readable, in order, exactly once, after several leader kills (kill -9),
    including killing the new leader soon after it was elected."""
    c = cluster(min_insync_replicas=2)
    create(c, "critical", 2, 3)
    ledger = Ledger(c.bootstrap, "critical", message_timeout_ms=120000, interval=0.002).start()
    try:
        ledger.progress("first acknowledgements", 400, timeout=30)
        for round_ in range(3):
            old = leader_of(c, "critical")
            c.brokers[old].kill9()
            (new,) = wait_until(lambda: [leader for leader in [leader_of(c, "critical")] if leader not in (old, -1)],
                                30, what="a new leader")
            victims = [old]
            if round_ == 1:  # kill the new leader soon after its election
                time.sleep(0.5)
                c.brokers[new].kill9()
                victims.append(new)
            for v in victims:
                c.brokers[v].start()
            c.wait_registered({0, 1, 2})
            wait_until(lambda: all(len(c.state("critical", p)["isr"]) == 3 for p in (0, 1)), 60,
                       what="full ISR again")
            ledger.progress("progress after the failover", 200)
    finally:
        ledger.stop()
    result = ledger.check()  # every acknowledged record, in order, exactly once
    assert all(len(values) > 500 for values in ledger.acked.values()), result
    print(f"acknowledged {result['acknowledged']}, delivery failures {result['delivery_failures']}")


def test_paused_follower_leaves_the_isr_and_rejoins(cluster):
    c = cluster(replica_lag_time_max_ms=1500, zookeeper_session_timeout_ms=20000)
    create(c, "lagging", 1, 3)
    state = c.state("lagging", 0)
    follower = next(r for r in state["isr"] if r != state["leader"])
    pid = c.brokers[follower].proc.pid
    os.kill(pid, signal.SIGSTOP)
    try:
        wait_until(lambda: follower not in c.state("lagging", 0)["isr"], 15, what="ISR shrink")
        producer = Producer({"bootstrap.servers": c.bootstrap, "acks": "all"})
        producer.produce("lagging", b"while paused")
        assert producer.flush(20) == 0  # the remaining ISR acknowledges
    finally:
        os.kill(pid, signal.SIGCONT)
    wait_until(lambda: follower in c.state("lagging", 0)["isr"], 20, what="ISR expand")


def test_controller_moves_when_its_zookeeper_session_dies(cluster):
    c = cluster(zookeeper_session_timeout_ms=6000)  # a loaded machine must not expire the others' sessions
    create(c, "ctl", 3, 3)
    zk = c.zk()
    try:
        old = json.loads(zk.get("/controller")[0])["brokerid"]
        epoch = int(zk.get("/controller_epoch")[0])
        pid = c.brokers[old].proc.pid
        os.kill(pid, signal.SIGSTOP)  # its session expires after zookeeper.session.timeout.ms
        try:
            (new,) = wait_until(lambda: [b for b in [controller(zk)] if b not in (old, -1)], 30,
                                what="a new controller")
            # the new controller creates /controller first and bumps /controller_epoch just after (as Kafka's
            # does), so the epoch may still be the old one at the moment the new controller is seen
            wait_until(lambda: int(zk.get("/controller_epoch")[0]) > epoch, 30, what="a new controller epoch")
            wait_until(lambda: all(c.state("ctl", p)["leader"] != old for p in range(3)), 30,
                       what="leadership moved off the paused broker")
        finally:
            os.kill(pid, signal.SIGCONT)
        moved_epoch = int(zk.get("/controller_epoch")[0])
        c.wait_registered({0, 1, 2})  # the old controller registers again with a new session
        # whoever is controller now holds an epoch at least as new as the one that replaced the paused broker
        # (the old controller never writes with its stale epoch: its writes are fenced)
        assert controller(zk) in (0, 1, 2) and int(zk.get("/controller_epoch")[0]) >= moved_epoch
    finally:
        zk.stop()
        zk.close()


def test_acks_all_below_min_insync_replicas_appends_nothing(cluster):
    c = cluster()
    create(c, "strict", 1, 3, **{"min.insync.replicas": "3"})
    state = c.state("strict", 0)
    follower = next(r for r in state["isr"] if r != state["leader"])
    c.brokers[follower].kill9()
    wait_until(lambda: len(c.state("strict", 0)["isr"]) == 2, 30, what="ISR without the killed follower")
    leader = c.brokers[c.state("strict", 0)["leader"]]
    client = RawClient(leader.host, leader.port)
    m = request_module(0, 9)
    request = m.ProduceRequest(transactional_id=None, acks=-1, timeout=datetime.timedelta(seconds=5), topic_data=(
        m.TopicProduceData(name="strict", partition_data=(m.PartitionProduceData(index=0, records=batch([b"x"])),)),))
    response = client.request(0, 9, request)
    client.close()
    assert response.responses[0].partition_responses[0].error_code == 19  # NOT_ENOUGH_REPLICAS
    consumer = Consumer({"bootstrap.servers": c.bootstrap, "group.id": "x"})
    assert consumer.get_watermark_offsets(TopicPartition("strict", 0), timeout=10) == (0, 0)
    consumer.close()


def test_unreachable_zookeeper_is_a_one_line_error(tmp_path):
    import sys

    from support import REPO, free_port

    config = tmp_path / "server.properties"
    config.write_text(f"broker.id=0\nlisteners=PLAINTEXT://127.0.0.1:{free_port()}\nlog.dirs={tmp_path / 'logs'}\n"
                      f"zookeeper.connect=127.0.0.1:{free_port()}/live\nzookeeper.connection.timeout.ms=1000\n")
    proc = subprocess.run([sys.executable, "-m", "logbus.cli", "--log-level", "ERROR", "broker", str(config)],
                          capture_output=True, text=True, timeout=60,
                          env=dict(os.environ, PYTHONPATH=str(REPO / "platform")))
    assert proc.returncode != 0
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("logbus:")]
    assert lines and "cannot reach ZooKeeper" in lines[0], proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr


def logbus(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    import sys

    from support import REPO

    return subprocess.run([sys.executable, "-m", "logbus.cli", "--log-level", "ERROR", *args], capture_output=True,
                          text=True, timeout=timeout, env=dict(os.environ, PYTHONPATH=str(REPO / "platform")))


def test_topics_cli_and_reassignment_without_a_consumer_visible_gap(cluster, tmp_path):
    c = cluster(4, auto_leader_rebalance_enable="false")
    any_broker = c.brokers[3].bootstrap
    out = logbus("topics", "create", "--bootstrap-server", any_broker, "--topic", "moving", "--partitions", "1",
                 "--replication-factor", "2", "--config", "retention.ms=3600000")
    assert out.returncode == 0, out.stderr
    assert "moving" in logbus("topics", "list", "--bootstrap-server", any_broker).stdout.split()
    old = json.loads(c.zk().get("/brokers/topics/moving")[0])["partitions"]["0"]
    target = [b for b in (0, 1, 2, 3) if b not in old]
    producer = Producer({"bootstrap.servers": c.bootstrap, "acks": "all", "enable.idempotence": True})
    for i in range(3000):
        producer.produce("moving", str(i).encode())
    assert producer.flush(30) == 0
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [{"topic": "moving", "partition": 0,
                                                              "replicas": target}]}))
    zk_connect = c.zookeeper.connect + c.chroot
    out = logbus("reassign-partitions", "--zookeeper", zk_connect, "--plan", str(plan))
    assert out.returncode == 0, out.stderr
    verify = logbus("reassign-partitions", "--zookeeper", zk_connect, "--plan", str(plan), "--verify")
    assert verify.returncode in (0, 3) and "Reassignment of partition moving-0 is" in verify.stdout
    for i in range(3000, 6000):  # keep writing while the replicas move
        producer.produce("moving", str(i).encode())
        producer.poll(0)
    assert producer.flush(30) == 0
    wait_until(lambda: logbus("reassign-partitions", "--zookeeper", zk_connect, "--plan", str(plan),
                              "--verify").returncode == 0, 60, interval=0.5, what="reassignment completed")
    state = c.state("moving", 0)
    assert state["leader"] in target and sorted(state["isr"]) == sorted(target)
    described = logbus("topics", "describe", "--bootstrap-server", any_broker, "--topic", "moving").stdout
    assert f"Replicas: {','.join(map(str, target))}" in described
    wait_until(lambda: not any((c.brokers[b].log_dir / "moving-0").exists() for b in old), 20,
               what="old replicas deleted")
    consumer = Consumer({"bootstrap.servers": c.bootstrap, "group.id": "x", "enable.auto.commit": False})
    consumer.assign([TopicPartition("moving", 0, 0)])
    seen = []
    while len(seen) < 6000:
        msgs = consumer.consume(1000, timeout=10)
        assert msgs, f"stuck after {len(seen)} messages"
        seen.extend(int(m.value()) for m in msgs if not m.error())
    consumer.close()
    assert seen == list(range(6000))  # no gap, no duplicate, in order
    bad = logbus("topics", "create", "--bootstrap-server", any_broker, "--topic", "moving", "--partitions", "1",
                 "--replication-factor", "1")
    assert bad.returncode == 1 and bad.stderr.strip().count("\n") == 0 and "TOPIC_ALREADY_EXISTS" in bad.stderr


def test_preferred_leader_is_restored_when_back_in_sync(cluster):
    """Also: a consumer reading across the failover validates its position with OffsetForLeaderEpoch."""
    import logging

    c = cluster(leader_imbalance_check_interval_seconds=1)
    create(c, "pref", 1, 3)
    preferred = json.loads(c.zk().get("/brokers/topics/pref")[0])["partitions"]["0"][0]
    assert leader_of(c, "pref") == preferred
    producer = Producer({"bootstrap.servers": c.bootstrap, "acks": "all"})
    for i in range(100):
        producer.produce("pref", str(i).encode())
    assert producer.flush(10) == 0
    lines: list[str] = []

    class Capture(logging.Handler):
        def emit(self, record):
            lines.append(record.getMessage())

    rdlog = logging.getLogger("rdkafka-capture")
    rdlog.addHandler(Capture())
    rdlog.setLevel(logging.DEBUG)
    consumer = Consumer({"bootstrap.servers": c.bootstrap, "group.id": "epoch", "enable.auto.commit": False,
                         "debug": "fetch,topic", "logger": rdlog})
    consumer.assign([TopicPartition("pref", 0, 0)])
    got = 0
    while got < 100:
        got += len([m for m in consumer.consume(100, timeout=1) if not m.error()])
    c.brokers[preferred].kill9()
    wait_until(lambda: leader_of(c, "pref") not in (preferred, -1), 30, what="failover")
    for i in range(100, 110):
        producer.produce("pref", str(i).encode())
    assert producer.flush(30) == 0
    while got < 110:
        got += len([m for m in consumer.consume(100, timeout=1) if not m.error()])
        consumer.poll(0)
    consumer.close()
    # librdkafka sent OffsetForLeaderEpoch for its position and accepted the answer (no truncation detected)
    assert any("querying broker for epoch validation" in line for line in lines), lines[-20:]
    assert any("validate-epoch-wait -> active" in line for line in lines), lines[-20:]
    assert not any("truncat" in line.lower() for line in lines)
    c.brokers[preferred].start()
    wait_until(lambda: leader_of(c, "pref") == preferred, 40, what="preferred leader back")
