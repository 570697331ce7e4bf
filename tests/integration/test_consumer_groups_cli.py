"""``logbus consumer-groups`` (issue 21 item 3, kafka-consumer-groups.sh's shape) and DeleteGroups (API 42), against
one standalone broker and three brokers with ZooKeeper: --list, --describe's numbers as confluent-kafka and
kafka-python see them, --reset-offsets (--dry-run changes nothing; --execute, then a real consumer of the group
starts exactly there), Kafka's refusals (an active group's reset, a non-empty group's deletion), --delete leaving no
offsets behind, kafka-python's delete_groups, NOT_COORDINATOR from the other brokers, one-line errors."""

from __future__ import annotations

import datetime
import os
import subprocess
import sys
import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from support import REPO, BrokerProcess, Cluster, free_port, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]
ENV = dict(os.environ, PYTHONPATH=str(REPO / "platform"))
PER_PARTITION = 20
BASE_MS = (int(time.time()) - 3600) * 1000  # record i of each partition is stamped BASE_MS + i seconds


@pytest.fixture(scope="module", params=["standalone", "cluster"])
def target(request, tmp_path_factory):
    """(bootstrap, the Cluster or None) with a 3-partition topic ``events`` of PER_PARTITION records a partition."""
    work = tmp_path_factory.mktemp(request.param)
    if request.param == "standalone":
        server, cluster = BrokerProcess(work, group_initial_rebalance_delay_ms=0), None
    else:
        server = cluster = Cluster(work, 3, group_initial_rebalance_delay_ms=0)
    try:
        server.start()
        bootstrap = server.bootstrap
        admin = AdminClient({"bootstrap.servers": bootstrap})  # alive until the result is in
        admin.create_topics([NewTopic("events", 3, 1 if cluster is None else 2)])["events"].result(30)
        producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
        for p in range(3):
            for i in range(PER_PARTITION):
                producer.produce("events", f"{p}-{i}".encode(), partition=p, timestamp=BASE_MS + i * 1000)
        assert producer.flush(30) == 0
        yield bootstrap, cluster
    finally:
        server.stop()


def cli(bootstrap: str, *args: str, timeout_ms: int = 20000) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "logbus.cli", "consumer-groups", "--bootstrap-server", bootstrap,
                           "--timeout", str(timeout_ms), *args], env=ENV, capture_output=True, text=True, timeout=60)


def ok(bootstrap: str, *args: str) -> str:
    done = cli(bootstrap, *args)
    assert done.returncode == 0, done.stderr
    return done.stdout


def refused(bootstrap: str, *args: str, **kw) -> str:
    """The one line on stderr of a failing command (exit code != 0)."""
    done = cli(bootstrap, *args, **kw)
    assert done.returncode != 0, done.stdout
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("logbus: "), done.stderr
    return lines[0]


def rows(stdout: str, header: str) -> list[dict]:
    """A table printed by the command, as dicts keyed by its header's columns (cells never contain spaces)."""
    lines = [line.split() for line in stdout.splitlines() if line.strip()]
    start = next(i for i, cells in enumerate(lines) if cells == header.split())
    return [dict(zip(header.split(), cells)) for cells in lines[start + 1:] if cells[0] != header.split()[0]]


def commit(bootstrap: str, group: str, offsets: dict[int, int]) -> None:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    c.commit(offsets=[TopicPartition("events", p, o) for p, o in offsets.items()], asynchronous=False)
    c.close()


def committed(bootstrap: str, group: str) -> dict[int, int]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        got = c.committed([TopicPartition("events", p) for p in range(3)], timeout=20)
        return {tp.partition: tp.offset for tp in got if tp.offset >= 0}
    finally:
        c.close()


def member(bootstrap: str, group: str, client_id: str = "cli-test") -> Consumer:
    """A confluent-kafka consumer that joined ``group`` and holds all of ``events`` (not committing)."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "client.id": client_id,
                  "enable.auto.commit": False, "auto.offset.reset": "latest", "session.timeout.ms": 6000})
    c.subscribe(["events"])
    wait_until(lambda: c.poll(0.2) is None and len(c.assignment()) == 3, 40, interval=0, what="a member joined")
    return c


def first_offsets(bootstrap: str, group: str) -> dict[int, int]:
    """The first offset a real consumer of ``group`` reads on each partition (auto.offset.reset=latest: only a
    committed offset makes it read anything), then it leaves without committing."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
                  "auto.offset.reset": "latest"})
    c.subscribe(["events"])
    first: dict[int, int] = {}
    try:
        def read():
            m = c.poll(0.2)
            if m is not None and not m.error():
                first.setdefault(m.partition(), m.offset())
            return len(first) == 3
        wait_until(read, 40, interval=0, what=f"group {group} reading every partition")
    finally:
        c.close()
    return first


def test_list_and_describe_show_the_lag_clients_see(target):
    bootstrap, _ = target
    commit(bootstrap, "lagging", {0: 5, 1: 12})
    live = member(bootstrap, "live")
    try:
        listed = ok(bootstrap, "--list").split()
        assert {"lagging", "live"} <= set(listed) and len(listed) == len(set(listed))  # each from its coordinator
        states = {r["GROUP"]: r["STATE"] for r in rows(ok(bootstrap, "--list", "--state"), "GROUP STATE")}
        assert states["lagging"] == "Empty" and states["live"] == "Stable"
        header = "GROUP TOPIC PARTITION CURRENT-OFFSET LOG-END-OFFSET LAG CONSUMER-ID HOST CLIENT-ID"
        table = {int(r["PARTITION"]): r for r in rows(ok(bootstrap, "--describe", "--group", "lagging"), header)}
        # confluent-kafka's view: committed offsets and high watermarks
        view = Consumer({"bootstrap.servers": bootstrap, "group.id": "lagging"})
        ends = {p: view.get_watermark_offsets(TopicPartition("events", p), timeout=20)[1] for p in range(3)}
        view.close()
        seen = committed(bootstrap, "lagging")
        assert sorted(table) == [0, 1]
        for p in (0, 1):
            assert (int(table[p]["CURRENT-OFFSET"]), int(table[p]["LOG-END-OFFSET"]), int(table[p]["LAG"])) == \
                (seen[p], ends[p], ends[p] - seen[p])
            assert (table[p]["CONSUMER-ID"], table[p]["HOST"], table[p]["CLIENT-ID"]) == ("-", "-", "-")
        # kafka-python's view
        from kafka import KafkaAdminClient, KafkaConsumer
        from kafka.structs import TopicPartition as KpTopicPartition

        kp_admin = KafkaAdminClient(bootstrap_servers=bootstrap)
        kp_committed = {tp.partition: m.offset for tp, m in kp_admin.list_group_offsets("lagging")["lagging"].items()}
        kp_admin.close()
        kp = KafkaConsumer(bootstrap_servers=bootstrap)
        kp_ends = {tp.partition: o for tp, o in kp.end_offsets([KpTopicPartition("events", p) for p in (0, 1)]).items()}
        kp.close()
        assert {p: int(table[p]["LAG"]) for p in (0, 1)} == {p: kp_ends[p] - kp_committed[p] for p in (0, 1)} == \
            {0: PER_PARTITION - 5, 1: PER_PARTITION - 12}
        # an active member: every partition it holds, with its id, host and client id; no commit yet
        held = rows(ok(bootstrap, "--describe", "--group", "live"), header)
        assert sorted(int(r["PARTITION"]) for r in held) == [0, 1, 2]
        assert {(r["CONSUMER-ID"], r["HOST"], r["CLIENT-ID"], r["CURRENT-OFFSET"], r["LAG"]) for r in held} == \
            {(live.memberid(), "/127.0.0.1", "cli-test", "-", "-")}
        members = rows(ok(bootstrap, "--describe", "--group", "live", "--members"),
                       "GROUP CONSUMER-ID HOST CLIENT-ID #PARTITIONS")
        assert [(r["CONSUMER-ID"], r["#PARTITIONS"]) for r in members] == [(live.memberid(), "3")]
        state = ok(bootstrap, "--describe", "--group", "live", "--state")
        assert "Stable" in state and "range" in state
        # a group that does not exist
        assert refused(bootstrap, "--describe", "--group", "never-seen") == \
            "logbus: Consumer group 'never-seen' does not exist."
    finally:
        live.close()


def test_reset_offsets_dry_run_execute_and_a_consumer_reads_from_there(target):
    bootstrap, _ = target
    group = "rewind"
    commit(bootstrap, group, {0: 10, 1: 10, 2: 10})
    header = "GROUP TOPIC PARTITION NEW-OFFSET"
    planned = rows(ok(bootstrap, "--reset-offsets", "--group", group, "--all-topics", "--to-earliest"), header)
    assert [(r["PARTITION"], r["NEW-OFFSET"]) for r in planned] == [("0", "0"), ("1", "0"), ("2", "0")]
    assert committed(bootstrap, group) == {0: 10, 1: 10, 2: 10}  # the default is --dry-run: nothing changed
    ok(bootstrap, "--reset-offsets", "--group", group, "--all-topics", "--to-earliest", "--dry-run")
    assert committed(bootstrap, group) == {0: 10, 1: 10, 2: 10}

    ok(bootstrap, "--reset-offsets", "--group", group, "--topic", "events", "--to-earliest", "--execute")
    assert first_offsets(bootstrap, group) == {0: 0, 1: 0, 2: 0}

    commit(bootstrap, group, {0: 10, 1: 10, 2: 10})
    done = rows(ok(bootstrap, "--reset-offsets", "--group", group, "--topic", "events:0,1", "--shift-by", "-4",
                   "--execute"), header)
    assert [(r["PARTITION"], r["NEW-OFFSET"]) for r in done] == [("0", "6"), ("1", "6")]
    assert first_offsets(bootstrap, group) == {0: 6, 1: 6, 2: 10}

    at = datetime.datetime.fromtimestamp((BASE_MS + 13_000) / 1000, datetime.timezone.utc)
    stamp = at.strftime("%Y-%m-%dT%H:%M:%S.000")  # no zone: UTC, as Kafka's Utils.getDateTime
    ok(bootstrap, "--reset-offsets", "--group", group, "--all-topics", "--to-datetime", stamp, "--execute")
    assert committed(bootstrap, group) == {0: 13, 1: 13, 2: 13}
    assert first_offsets(bootstrap, group) == {0: 13, 1: 13, 2: 13}

    # --to-offset past the log end is clamped to it, as Kafka
    done = rows(ok(bootstrap, "--reset-offsets", "--group", group, "--topic", "events:2", "--to-offset", "999",
                   "--execute"), header)
    assert [(r["PARTITION"], r["NEW-OFFSET"]) for r in done] == [("2", str(PER_PARTITION))]


def test_reset_of_an_active_group_is_refused(target):
    bootstrap, _ = target
    commit(bootstrap, "busy", {0: 3, 1: 3, 2: 3})
    live = member(bootstrap, "busy")
    try:
        line = refused(bootstrap, "--reset-offsets", "--group", "busy", "--all-topics", "--to-earliest", "--execute")
        assert line == "logbus: Assignments can only be reset if the group 'busy' is inactive, but the current " \
                       "state is Stable."
        assert committed(bootstrap, "busy") == {0: 3, 1: 3, 2: 3}
    finally:
        live.close()


def test_delete_groups(target):
    bootstrap, cluster = target
    commit(bootstrap, "finished", {0: 7, 1: 7})
    if cluster is not None:
        zk = cluster.zk()
        try:
            assert zk.exists("/consumers/finished/offsets/events/0")
        finally:
            zk.stop()
            zk.close()
    out = ok(bootstrap, "--delete", "--group", "finished")
    assert out.strip() == "Deletion of requested consumer groups ('finished') was successful."
    assert "finished" not in ok(bootstrap, "--list").split()
    assert committed(bootstrap, "finished") == {}  # OffsetFetch finds nothing (confluent-kafka)
    from kafka import KafkaAdminClient

    kp_admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        assert kp_admin.list_group_offsets("finished")["finished"] == {}  # nor kafka-python
        if cluster is not None:
            zk = cluster.zk()
            try:
                assert not zk.exists("/consumers/finished")
            finally:
                zk.stop()
                zk.close()
        assert refused(bootstrap, "--delete", "--group", "finished") == (
            "logbus: Deletion of some consumer groups failed: Group 'finished' could not be deleted due to: "
            "org.apache.kafka.common.errors.GroupIdNotFoundException: The group id does not exist.")
        live = member(bootstrap, "occupied")
        try:
            assert refused(bootstrap, "--delete", "--group", "occupied") == (
                "logbus: Deletion of some consumer groups failed: Group 'occupied' could not be deleted due to: "
                "org.apache.kafka.common.errors.GroupNotEmptyException: The group is not empty.")
            # kafka-python's admin against DeleteGroups: refused while the member is there
            assert kp_admin.delete_groups(["occupied"]) == {"occupied": "NonEmptyGroupError"}
        finally:
            live.close()
        wait_until(lambda: kp_admin.delete_groups(["occupied"]) == {"occupied": "OK"}, 20, interval=0.5,
                   what="the group deleted once its member left")
        assert kp_admin.delete_groups(["occupied"]) == {"occupied": "GroupIdNotFoundError"}
        assert committed(bootstrap, "occupied") == {}
    finally:
        kp_admin.close()


def test_delete_groups_answers_not_coordinator_from_other_brokers(target):
    """The wire answer of each broker (kio's codec, not a client library that follows the coordinator)."""
    bootstrap, cluster = target
    from rawclient import RawClient, request_module

    brokers = [(b.host, b.port) for b in cluster.brokers.values()] if cluster else [bootstrap.split(":")]
    codes = []
    for host, port in brokers:
        raw = RawClient(host, int(port))
        try:
            body = request_module(42, 2).DeleteGroupsRequest(groups_names=("no-such-group",))
            codes.append(int(raw.request(42, 2, body).results[0].error_code))
        finally:
            raw.close()
    assert sorted(codes) == [16] * (len(brokers) - 1) + [69]  # NOT_COORDINATOR, GROUP_ID_NOT_FOUND


@pytest.mark.parametrize("target", ["standalone"], indirect=True)  # the checks do not depend on the broker
def test_bad_arguments_and_an_unreachable_broker_are_one_line(target):
    bootstrap, _ = target
    for args in (["--group", "g"],  # no action
                 ["--describe"],  # no group
                 ["--reset-offsets", "--group", "g", "--to-earliest"],  # no scope
                 ["--reset-offsets", "--group", "g", "--all-topics"],  # no target
                 ["--reset-offsets", "--group", "g", "--all-topics", "--to-datetime", "yesterday"],
                 ["--reset-offsets", "--group", "g", "--topic", "events:x", "--to-latest"],
                 ["--reset-offsets", "--group", "g", "--topic", "no-such-topic", "--to-latest"],
                 ["--reset-offsets", "--group", "g", "--all-topics", "--to-latest", "--execute", "--dry-run"]):
        refused(bootstrap, *args)
    started = time.monotonic()
    line = refused(f"127.0.0.1:{free_port()}", "--list", timeout_ms=2000)
    assert "_TRANSPORT" in line or "_TIMED_OUT" in line
    assert time.monotonic() - started < 15


def test_describe_a_group_with_offsets_of_a_topic_the_cluster_lacks(target):
    """An exactly-once mirror keeps its source offsets on the target cluster, where some source topics (``_schemas``)
    do not exist: describe shows such a partition with "-" as its log end and lag instead of failing the group."""
    bootstrap, _ = target
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic("vanishing", 1, 1)])["vanishing"].result(30)
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "remembers", "enable.auto.commit": False})
    c.commit(offsets=[TopicPartition("events", 0, 3), TopicPartition("vanishing", 0, 0)], asynchronous=False)
    c.close()
    admin.delete_topics(["vanishing"])["vanishing"].result(30)
    wait_until(lambda: "vanishing" not in admin.list_topics(timeout=10).topics, 30, what="the topic deleted")
    header = "GROUP TOPIC PARTITION CURRENT-OFFSET LOG-END-OFFSET LAG CONSUMER-ID HOST CLIENT-ID"
    table = {(r["TOPIC"], r["PARTITION"]): r for r in rows(ok(bootstrap, "--describe", "--group", "remembers"), header)}
    assert table[("events", "0")]["LAG"] == str(PER_PARTITION - 3)
    if ("vanishing", "0") in table:  # the broker may have dropped a deleted topic's offsets, as Kafka does
        assert (table[("vanishing", "0")]["LOG-END-OFFSET"], table[("vanishing", "0")]["LAG"]) == ("-", "-")


def test_delete_offsets(target):
    """``--delete-offsets`` (OffsetDelete through kafka-python): the named partitions' offsets go, the others stay;
    a topic the live members subscribe to is refused in its rows; an unknown group is one line."""
    bootstrap, _cluster = target
    commit(bootstrap, "partly", {0: 3, 1: 4, 2: 5})
    out = ok(bootstrap, "--delete-offsets", "--group", "partly", "--topic", "events:0,2")
    assert out.splitlines()[0] == "Request succeed for deleting offsets from group partly."
    assert rows(out, "TOPIC PARTITION STATUS") == [
        {"TOPIC": "events", "PARTITION": "0", "STATUS": "Successful"},
        {"TOPIC": "events", "PARTITION": "2", "STATUS": "Successful"}]
    assert committed(bootstrap, "partly") == {1: 4}
    live = member(bootstrap, "partly")
    try:
        out = ok(bootstrap, "--delete-offsets", "--group", "partly", "--topic", "events")
        assert {r["STATUS"] for r in rows(out, "TOPIC PARTITION STATUS")} == {"Error:GroupSubscribedToTopicError"}
    finally:
        live.close()
    assert committed(bootstrap, "partly") == {1: 4}
    assert refused(bootstrap, "--delete-offsets", "--group", "nobody-here", "--topic", "events") == (
        "logbus: Deletion of offsets of group 'nobody-here' failed: GroupIdNotFoundError")
    assert refused(bootstrap, "--delete-offsets", "--group", "partly") == \
        "logbus: --delete-offsets needs --topic T[:P,P]"
