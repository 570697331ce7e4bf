"""Static membership (KIP-345) with real clients: confluent-kafka consumers with ``group.instance.id`` in their own
processes (tests/static_member_worker.py), kafka-python's admin removing members by instance id. A static member
killed with ``kill -9`` and restarted within ``session.timeout.ms`` gets its partitions back without a rebalance;
one closed (no LeaveGroup) and gone longer than that loses them to the survivor; a second process with the same
instance id fences the first (FENCED_INSTANCE_ID, fatal in librdkafka). Standalone and on a 3-broker cluster."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from support import REPO, BrokerProcess, Cluster, terminate, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]
WORKER = str(REPO / "tests" / "static_member_worker.py")
SESSION_MS = 6000
SETTINGS = {"group_initial_rebalance_delay_ms": 0, "group_min_session_timeout_ms": 1000}


class Kafka:
    """A standalone broker or a 3-broker cluster, as the tests see it."""

    def __init__(self, mode: str, workdir: Path):
        self.mode = mode
        if mode == "standalone":
            self.brokers = [BrokerProcess(workdir / "broker", num_partitions=1, **SETTINGS).start()]
            self.cluster = None
        else:
            self.cluster = Cluster(workdir / "cluster", 3, **SETTINGS).start()
            self.brokers = list(self.cluster.brokers.values())
        self.bootstrap = ",".join(b.bootstrap for b in self.brokers)
        self.admin = AdminClient({"bootstrap.servers": self.bootstrap})

    def stop(self) -> None:
        if self.cluster is not None:
            self.cluster.stop()
        else:
            self.brokers[0].stop()

    def create_topic(self, name: str, partitions: int = 4) -> None:
        rf = 1 if self.cluster is None else 2
        self.admin.create_topics([NewTopic(name, partitions, rf)])[name].result(30)

    def describe(self, group: str):
        return self.admin.describe_consumer_groups([group])[group].result(20)

    def generations(self, group: str) -> list[int]:
        """Generations the group's coordinator started, from the brokers' logs."""
        pattern = re.compile(rf"group {re.escape(group)}: generation (\d+)")
        return sorted(int(g) for b in self.brokers for g in pattern.findall(b.log_text()))

    def group_log(self, group: str) -> str:
        """The brokers' log lines about ``group`` (printed when a test fails: joins, assignments, expiries)."""
        return "\n".join(line for b in self.brokers for line in b.log_text().splitlines() if f"group {group}:" in line)

    def zk_children(self, path: str) -> list[str]:
        zk = self.cluster.zk()
        try:
            return sorted(zk.get_children(path)) if zk.exists(path) else []
        finally:
            zk.stop()
            zk.close()

    def zk_get(self, path: str) -> str:
        zk = self.cluster.zk()
        try:
            return zk.get(path)[0].decode()
        finally:
            zk.stop()
            zk.close()


@pytest.fixture(scope="module", params=["standalone", "cluster"])
def kafka(request, tmp_path_factory):
    k = Kafka(request.param, tmp_path_factory.mktemp(request.param))
    yield k
    k.stop()


@pytest.fixture(scope="module")
def standalone(tmp_path_factory):
    k = Kafka("standalone", tmp_path_factory.mktemp("standalone-only"))
    yield k
    k.stop()


class Worker:
    """One static_member_worker.py process and its event file."""

    def __init__(self, out: Path, bootstrap: str, group: str, topic: str, instance: str):
        self.out, self.instance = out, instance
        self.proc = subprocess.Popen([sys.executable, WORKER, bootstrap, group, topic, instance, str(out),
                                      str(SESSION_MS)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def events(self, kind: str | None = None) -> list[dict]:
        if not self.out.exists():
            return []
        out = [json.loads(line) for line in self.out.read_text().splitlines() if line.endswith("}")]
        return [e for e in out if kind is None or e["event"] == kind]

    def rebalance_events(self) -> list[dict]:
        return [e for e in self.events() if e["event"] in ("assign", "revoke", "lost")]

    def assignment(self) -> set[int]:
        current: set[int] = set()
        for e in self.rebalance_events():
            current = set(e["partitions"]) if e["event"] == "assign" else set()
        return current

    def member_id(self) -> str:
        return self.events("assign")[-1]["member_id"]

    def consumed(self) -> set[int]:
        return {e["partition"] for e in self.events("msg")}

    def kill9(self) -> None:
        self.proc.kill()
        self.proc.wait()


@pytest.fixture
def workers(tmp_path):
    """``start(kafka, group, topic, instance)``: a worker process; every one is stopped at the end, by pid."""
    started: list[Worker] = []

    def start(k: Kafka, group: str, topic: str, instance: str) -> Worker:
        w = Worker(tmp_path / f"{instance}-{len(started)}.jsonl", k.bootstrap, group, topic, instance)
        started.append(w)
        return w

    yield start
    for w in started:
        terminate(w.proc, timeout=10)


def stable_pair(k: Kafka, start, group: str, topic: str, instances=("a", "b")) -> tuple[Worker, Worker]:
    """Two static members sharing a 4-partition topic, two partitions each, the group stable."""
    k.create_topic(topic)
    a = start(k, group, topic, instances[0])
    b = start(k, group, topic, instances[1])
    wait_until(lambda: len(a.assignment()) == len(b.assignment()) == 2, 45, what="two members, 2 partitions each")
    assert a.assignment() | b.assignment() == {0, 1, 2, 3}
    described = wait_until(lambda: (lambda d: d if len(d.members) == 2 and str(d.state).endswith("STABLE")
                                    else None)(k.describe(group)), 20, what="a stable group of two")
    assert sorted(m.group_instance_id for m in described.members) == sorted(instances)
    return a, b


def produce(k: Kafka, topic: str, count: int = 40) -> None:
    producer = Producer({"bootstrap.servers": k.bootstrap})
    for i in range(count):
        producer.produce(topic, str(i).encode(), partition=i % 4)
    assert producer.flush(30) == 0


def test_a_static_member_restarted_within_the_session_timeout_gets_its_partitions_back_without_a_rebalance(
        kafka, workers):
    group, topic = f"static-restart-{kafka.mode}", f"restart-{kafka.mode}"
    a, b = stable_pair(kafka, workers, group, topic)
    a_events, b_parts, b_old_id = a.rebalance_events(), b.assignment(), b.member_id()
    members = {m.group_instance_id: m.member_id for m in kafka.describe(group).members}
    assert members["b"] == b_old_id
    generations = kafka.generations(group)
    assert generations, "the coordinator logs each generation it starts"

    b.kill9()
    b2 = workers(kafka, group, topic, "b")  # the same group.instance.id, a new process
    wait_until(lambda: b2.assignment(), 20, what="the restarted member's assignment")
    assert b2.assignment() == b_parts
    assert b2.member_id() != b_old_id
    time.sleep(1.5)  # time enough for a rebalance to reach the other member, if there were one
    assert a.rebalance_events() == a_events, "the other member saw a revoke/assign"
    assert kafka.generations(group) == generations, "a new generation started"
    described = kafka.describe(group)
    assert str(described.state).endswith("STABLE")
    now = {m.group_instance_id: m.member_id for m in described.members}
    assert now == {"a": members["a"], "b": b2.member_id()}
    assert {tp.partition for m in described.members if m.group_instance_id == "b"
            for tp in m.assignment.topic_partitions} == b_parts

    produce(kafka, topic)  # both consume again: the restarted member reads its partitions
    wait_until(lambda: a.consumed() == a.assignment() and b2.consumed() == b_parts, 20, what="both consuming")
    if kafka.cluster is not None:  # the paper's registries follow the new member id
        ids = kafka.zk_children(f"/consumers/{group}/ids")
        assert b2.member_id() in ids and b_old_id not in ids and members["a"] in ids
        for p in b_parts:
            assert kafka.zk_get(f"/consumers/{group}/owners/{topic}/{p}") == b2.member_id()
        registered = json.loads(kafka.zk_get(f"/consumers/{group}/ids/{b2.member_id()}"))
        assert registered["group_instance_id"] == "b"


def test_a_second_process_with_the_same_instance_id_fences_the_first(kafka, workers):
    group, topic = f"static-fence-{kafka.mode}", f"fence-{kafka.mode}"
    a, b = stable_pair(kafka, workers, group, topic)
    a_events, b_parts = a.rebalance_events(), b.assignment()
    generations = kafka.generations(group)
    intruder = workers(kafka, group, topic, "b")  # while the first "b" is alive
    wait_until(lambda: intruder.assignment(), 20, what="the second process's assignment")
    assert intruder.assignment() == b_parts
    assert b.proc.wait(20) == 3, "the fenced consumer did not stop on a fatal error"
    fatal = [e for e in b.events("error") if e["fatal"] or e["name"] == "_FATAL"]
    assert fatal and all("fenced" in e["str"] for e in fatal), fatal  # "Static consumer fenced by other consumer"
    assert a.rebalance_events() == a_events
    assert kafka.generations(group) == generations


def test_a_static_member_gone_longer_than_the_session_timeout_loses_its_partitions(standalone, workers):
    group, topic = "static-gone", "gone"
    a, b = stable_pair(standalone, workers, group, topic)
    a_events = a.rebalance_events()
    b.proc.terminate()  # close() of a static member: no LeaveGroup
    assert b.proc.wait(20) == 0
    closed = time.monotonic()
    time.sleep(2)
    assert a.rebalance_events() == a_events  # its partitions wait for it, unassigned
    assert len(standalone.describe(group).members) == 2
    wait_until(lambda: a.assignment() == {0, 1, 2, 3}, 20, what="the survivor owning every partition")
    assert time.monotonic() - closed >= SESSION_MS / 1000 - 1.5  # not before the session timed out
    assert [m.group_instance_id for m in standalone.describe(group).members] == ["a"]


def test_kafka_python_admin_removes_a_static_member_by_instance_id(standalone, workers):
    from kafka import KafkaAdminClient
    from kafka.admin import MemberToRemove
    from kafka.errors import FencedInstanceIdError, NoError, UnknownMemberIdError

    group, topic = "static-remove", "remove"
    a, b = stable_pair(standalone, workers, group, topic)
    b.kill9()  # e.g. scaled down: its session would keep its partitions for another 6 s
    admin = KafkaAdminClient(bootstrap_servers=standalone.bootstrap)
    try:
        removed = time.monotonic()
        results = admin.remove_group_members(group, [
            MemberToRemove(group_instance_id="b"), MemberToRemove(group_instance_id="nobody"),
            MemberToRemove(member_id="not-a-current-id", group_instance_id="a")])
    finally:
        admin.close()
    assert results == {"b": NoError, "nobody": UnknownMemberIdError, "not-a-current-id": FencedInstanceIdError}
    wait_until(lambda: a.assignment() == {0, 1, 2, 3}, 15, what="the remaining member owning every partition")
    assert time.monotonic() - removed < SESSION_MS / 1000 - 1  # the rebalance did not wait for the session
    assert a.proc.poll() is None  # "a" was not removed by the fenced entry
    assert [m.group_instance_id for m in standalone.describe(group).members] == ["a"]


class PolledConsumer:
    """A kafka-python consumer polled by a thread of its own, as an application polls it.

    kafka-python 3.0.12 is polled with long polls, each consumer on its own thread: when ``poll(timeout_ms)`` returns
    while a JoinGroup/SyncGroup is still in flight, the next poll throws the finished join away and sends a new
    JoinGroup; a leader's JoinGroup in a stable group starts a rebalance, so two consumers polled in turn with 100 ms
    polls rebalanced every 400 ms for ever (seen, with debug logs, in 2 of 25 runs on a loaded machine). When the join
    was one the client started itself because its metadata changed, its heartbeats stay off and the member expires
    after the session timeout. Both are client bugs; the broker answered every request as Kafka does."""

    def __init__(self, consumer):
        self.consumer, self.error = consumer, None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                self.consumer.poll(timeout_ms=2000)
        except Exception as e:  # noqa: BLE001 -- reported by partitions()
            self.error = e

    def partitions(self) -> set[int]:
        if self.error is not None:
            raise self.error
        return {tp.partition for tp in self.consumer.assignment()}

    def close(self) -> None:
        self._stop.set()
        self._thread.join(15)
        assert not self._thread.is_alive(), "a kafka-python poll did not return"
        self.consumer.close()


def test_kafka_python_static_leader_restarted_keeps_its_partitions_and_the_generation(standalone):
    """kafka-python (JoinGroup up to v7) restarting the group's leader: the answer names the old leader id, so the
    new consumer does not reassign; it gets its old partitions and the follower sees nothing."""
    from kafka import ConsumerRebalanceListener, KafkaConsumer

    class Recorder(ConsumerRebalanceListener):
        def __init__(self):
            self.events = []

        def on_partitions_revoked(self, revoked):
            self.events.append(("revoke", sorted(tp.partition for tp in revoked)))

        def on_partitions_assigned(self, assigned):
            self.events.append(("assign", sorted(tp.partition for tp in assigned)))

    group, topic = "static-kafka-python", "kp-static"
    standalone.create_topic(topic)

    def consumer(instance: str, listener: Recorder) -> PolledConsumer:
        c = KafkaConsumer(bootstrap_servers=standalone.bootstrap, group_id=group, group_instance_id=instance,
                          session_timeout_ms=SESSION_MS, heartbeat_interval_ms=300, enable_auto_commit=False,
                          auto_offset_reset="earliest", metadata_max_age_ms=1000)
        c.subscribe([topic], listener=listener)
        # A metadata answer after subscribe() (topics() always asks the broker) gives the group's metadata snapshot
        # the topic's partitions before the first join. A leader that assigned with an empty snapshot rejoins at the
        # next refresh, and that rejoin is the one that can leave its heartbeats off (see PolledConsumer).
        assert topic in c.topics()
        assert c.partitions_for_topic(topic) == {0, 1, 2, 3}
        return PolledConsumer(c)

    def wait_for(predicate, what):
        try:
            wait_until(predicate, 30, what=what)
        except TimeoutError:
            print(f"the broker's log of group {group}:\n{standalone.group_log(group)}")  # shown with the failure
            raise

    leader_events, follower_events = Recorder(), Recorder()
    leader = consumer("kp-leader", leader_events)
    consumers = [leader]
    try:
        wait_for(lambda: len(leader.partitions()) == 4, "the first member owning everything")
        follower = consumer("kp-follower", follower_events)
        consumers.append(follower)
        wait_for(lambda: len(leader.partitions()) == len(follower.partitions()) == 2, "2 and 2")
        leader_parts = leader.partitions()
        described = standalone.describe(group)
        leader_id = {m.group_instance_id: m.member_id for m in described.members}["kp-leader"]
        assert leader_id.startswith("kp-leader-")
        follower_before, generations = list(follower_events.events), standalone.generations(group)

        consumers.remove(leader)
        leader.close()  # a static member: no LeaveGroup
        restarted = consumer("kp-leader", Recorder())
        consumers.append(restarted)
        wait_for(lambda: restarted.partitions(), "the restarted leader's assignment")
        assert restarted.partitions() == leader_parts
        time.sleep(2)  # heartbeats (every 300 ms) and polls go on: a rebalance would reach the follower now
        assert follower_events.events == follower_before
        assert standalone.generations(group) == generations
        assert follower.partitions() == {0, 1, 2, 3} - leader_parts
        now = {m.group_instance_id: m.member_id for m in standalone.describe(group).members}
        assert now["kp-leader"] != leader_id and now["kp-leader"].startswith("kp-leader-")
    finally:
        for c in consumers:
            c.close()
