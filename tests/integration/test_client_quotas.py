"""Client quotas (KIP-13/55/546), judged by outside clients: kafka-python's AlterClientQuotas and
DescribeClientQuotas messages (its admin has no call for them, so the test sends its protocol classes through
its client), confluent-kafka producers and consumers whose ``throttle_cb`` reports the brokers' throttle times,
and ``logbus configs``. Quotas set through one broker of a cluster reach the others through ZooKeeper (Kafka's
nodes and change notifications); a standalone broker keeps them across a restart."""

from __future__ import annotations

import json
import os
import socket
import struct
import subprocess
import sys
import time
import urllib.request

import pytest
from confluent_kafka import Consumer, Producer
from kafka import KafkaAdminClient
from kafka.protocol.admin.client_quotas import AlterClientQuotasRequest, DescribeClientQuotasRequest
from support import REPO, free_port, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]
ALTER = AlterClientQuotasRequest.EntryData
MESSAGES, SIZE = 1000, 1000
# a short window (2 samples of 1 s) so a test client spends its credit in a fraction of a second
WINDOW = {"quota_window_num": 2, "quota_window_size_seconds": 1}


class Quotas:
    """AlterClientQuotas / DescribeClientQuotas through kafka-python, to one broker or the least loaded."""

    def __init__(self, bootstrap: str, client_id: str = "kafka-python-admin"):
        self.admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id=client_id)

    def send(self, request, node_id=None):
        async def call():
            return await self.admin._manager.send(request, node_id=node_id)

        return self.admin._manager.run(call)

    def alter(self, entity: dict, add: dict | None = None, remove=(), validate_only=False) -> tuple[int, str]:
        entry = ALTER(entity=[ALTER.EntityData(entity_type=k, entity_name=v) for k, v in entity.items()],
                      ops=[ALTER.OpData(key=k, value=float(v), remove=False) for k, v in (add or {}).items()]
                      + [ALTER.OpData(key=k, value=0.0, remove=True) for k in remove])
        result = self.send(AlterClientQuotasRequest(entries=[entry], validate_only=validate_only)).entries[0]
        return result.error_code, result.error_message

    def describe(self, components=(), strict=False, node_id=None):
        c = DescribeClientQuotasRequest.ComponentData
        response = self.send(DescribeClientQuotasRequest(
            components=[c(entity_type=k, match_type=t, match=m) for k, t, m in components], strict=strict), node_id)
        assert response.error_code == 0, response.error_message
        return {tuple((e.entity_type, e.entity_name) for e in entry.entity): {v.key: v.value for v in entry.values}
                for entry in response.entries}

    def close(self):
        self.admin.close()


def produce(bootstrap: str, topic: str, client_id: str) -> tuple[float, list[int]]:
    """MESSAGES records of SIZE bytes in batches of 16 KiB; (seconds, throttle times reported)."""
    throttles = []
    producer = Producer({"bootstrap.servers": bootstrap, "client.id": client_id, "linger.ms": 5,
                         "batch.size": 16384, "throttle_cb": lambda e: throttles.append(e.throttle_time)})
    started = time.monotonic()
    for i in range(MESSAGES):
        producer.produce(topic, b"%06d" % i + b"x" * (SIZE - 6))
        producer.poll(0)
    assert producer.flush(120) == 0
    elapsed = time.monotonic() - started
    producer.poll(0.5)  # callbacks still queued
    return elapsed, [t for t in throttles if t > 0]


def consume(bootstrap: str, topic: str, client_id: str, count: int) -> tuple[float, list[int], list[int]]:
    """``count`` records from the start; (seconds from the first record, throttle times, the records' numbers)."""
    throttles, seen = [], []
    consumer = Consumer({"bootstrap.servers": bootstrap, "client.id": client_id, "group.id": f"q-{client_id}",
                         "auto.offset.reset": "earliest", "throttle_cb": lambda e: throttles.append(e.throttle_time)})
    consumer.subscribe([topic])
    first = None
    deadline = time.monotonic() + 120
    try:
        while len(seen) < count and time.monotonic() < deadline:
            msg = consumer.poll(1)
            if msg is not None and not msg.error():
                first = first or time.monotonic()
                seen.append(int(msg.value()[:6]))
    finally:
        consumer.close()
    return time.monotonic() - (first or time.monotonic()), [t for t in throttles if t > 0], seen


def test_quotas_are_set_described_and_shared_by_the_brokers(cluster):
    c = cluster(3)
    q = Quotas(c.bootstrap)
    try:
        assert q.alter({"client-id": "app"}, {"producer_byte_rate": 1048576, "consumer_byte_rate": 2097152}) == (0, None)
        assert q.alter({"user": None}, {"consumer_byte_rate": 4096}) == (0, None)
        assert q.alter({"user": "alice", "client-id": None}, {"request_percentage": 12.5}) == (0, None)
        assert q.alter({"ip": "127.0.0.9"}, {"connection_creation_rate": 10}) == (0, None)
        everything = {(("client-id", "app"),): {"producer_byte_rate": 1048576.0, "consumer_byte_rate": 2097152.0},
                      (("user", None),): {"consumer_byte_rate": 4096.0},
                      (("user", "alice"), ("client-id", None)): {"request_percentage": 12.5},
                      (("ip", "127.0.0.9"),): {"connection_creation_rate": 10.0}}
        for node in range(3):  # every broker answers the same
            assert q.describe(node_id=node) == everything
        assert q.describe([("client-id", 0, "app")], strict=True) == {
            (("client-id", "app"),): everything[(("client-id", "app"),)]}
        assert set(q.describe([("user", 2, None)], strict=False)) == {(("user", None),),
                                                                       (("user", "alice"), ("client-id", None))}
        # Kafka's node and notification in ZooKeeper
        from kazoo.client import KazooClient
        zk = KazooClient(hosts=c.zookeeper.connect + c.chroot)
        zk.start(timeout=15)
        try:
            node = json.loads(zk.get("/config/users/alice/clients/<default>")[0])
            assert node == {"version": 1, "config": {"request_percentage": "12.5"}}
            changes = [json.loads(zk.get(f"/config/changes/{n}")[0]) for n in zk.get_children("/config/changes")]
            assert {"version": 2, "entity_path": "clients/app"} in changes
        finally:
            zk.stop()
        # Kafka's refusals, nothing written
        for entity, add, message in (({"client-id": "app"}, {"bogus": 1}, "Invalid configuration key bogus"),
                                     ({"client-id": "app"}, {"producer_byte_rate": 0}, "must be greater than 0"),
                                     ({"client-id": "app"}, {"producer_byte_rate": 1.5}, "cannot be a fractional"),
                                     ({"user": "a", "ip": "127.0.0.1"}, {"producer_byte_rate": 1}, "IP entity")):
            error, text = q.alter(entity, add)
            assert error == 42 and message in text  # INVALID_REQUEST
        assert q.alter({"client-id": "app"}, {"producer_byte_rate": 5}, validate_only=True) == (0, None)
        assert q.describe() == everything
        # removed: gone from every broker's answer
        assert q.alter({"user": None}, remove=["consumer_byte_rate"]) == (0, None)
        assert (("user", None),) not in q.describe(node_id=2)
    finally:
        q.close()


def test_a_producer_and_a_consumer_over_their_quotas_are_throttled(cluster):
    c = cluster(3, **WINDOW)
    q = Quotas(c.bootstrap)
    rate = 200_000
    try:
        assert q.alter({"client-id": "slow"}, {"producer_byte_rate": rate, "consumer_byte_rate": rate}) == (0, None)
    finally:
        q.close()
    # the topic made first, its leader known: a producer's first batches into a topic being auto-created may be
    # retried after later ones went in (no idempotence), which reorders the log (a clean-clone run met it)
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": c.bootstrap})
    admin.create_topics([NewTopic("quota-topic", 1, 3)])["quota-topic"].result(30)

    def in_sync() -> bool:
        try:
            return len(c.state("quota-topic", 0)["isr"]) == 3
        except Exception:  # noqa: BLE001 - the state znode not written yet
            return False

    wait_until(in_sync, 30, what="the topic's replicas in sync")
    # a client without a quota on the same brokers is not throttled (and fills the topic for the consumers)
    elapsed, throttles = produce(c.bootstrap, "quota-topic", "fast")
    assert throttles == []
    # the quota reaches every broker through ZooKeeper: the partition's leader may not be the one altered
    elapsed, throttles = produce(c.bootstrap, "quota-topic", "slow")
    assert throttles, "the producer over its quota was never throttled"
    # 1 MB at 200 KB/s with 200 KB of credit takes 4 s; the brokers mute the connection for the throttle time
    assert elapsed >= 0.5 * (MESSAGES * SIZE - rate) / rate, elapsed
    elapsed, throttles, seen = consume(c.bootstrap, "quota-topic", "slow", 2 * MESSAGES)
    assert seen == list(range(MESSAGES)) * 2  # every record, in order, none twice: throttled fetches lose nothing
    assert throttles, "the consumer over its quota was never throttled"
    assert elapsed >= 0.5 * (2 * MESSAGES * SIZE - rate) / rate, elapsed
    _, throttles, seen = consume(c.bootstrap, "quota-topic", "free-reader", 2 * MESSAGES)
    assert throttles == [] and len(seen) == 2 * MESSAGES


def logbus(*argv: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(REPO / "platform"))
    return subprocess.run([sys.executable, "-m", "logbus.cli", "configs", *argv], env=env, capture_output=True,
                          text=True, timeout=60)


def test_logbus_configs_and_a_standalone_broker_keep_quotas(fresh_broker):
    b = fresh_broker(**WINDOW).start()
    boot = ["--bootstrap-server", b.bootstrap]
    out = logbus(*boot, "--alter", "--add-config", "producer_byte_rate=100000,consumer_byte_rate=300000",
                 "--entity-type", "users", "--entity-name", "ANONYMOUS", "--entity-type", "clients", "--entity-default")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "Completed updating config for user ANONYMOUS."
    out = logbus(*boot, "--alter", "--add-config", "consumer_byte_rate=5000", "--entity-type", "clients",
                 "--entity-default")
    assert out.stdout.strip() == "Completed updating default config for clients in the cluster.", out.stderr
    out = logbus(*boot, "--describe", "--entity-type", "users", "--entity-name", "ANONYMOUS", "--entity-type",
                 "clients")
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["Quota configs for user-principal 'ANONYMOUS', the default client-id are "
                                       "consumer_byte_rate=300000.0, producer_byte_rate=100000.0"]
    out = logbus(*boot, "--describe", "--entity-type", "clients", "--entity-default")
    assert out.stdout.splitlines() == ["Quota configs for the default client-id are consumer_byte_rate=5000.0"]
    # a named user: its quotas, then its SCRAM credentials (none here: kafka-configs' error line, exit 0)
    out = logbus(*boot, "--alter", "--add-config", "request_percentage=50", "--entity-type", "users",
                 "--entity-name", "alice")
    assert out.returncode == 0, out.stderr
    out = logbus(*boot, "--describe", "--entity-type", "users", "--entity-name", "alice")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == "Quota configs for user-principal 'alice' are request_percentage=50.0", lines
    assert lines[1].startswith("Error retrieving SCRAM credential configs for user-principal 'alice': "), lines
    assert len(lines) == 2
    assert logbus(*boot, "--alter", "--delete-config", "request_percentage", "--entity-type", "users",
                  "--entity-name", "alice").returncode == 0
    # refusals: one line, non-zero
    out = logbus(*boot, "--alter", "--add-config", "producer_byte_rate=0", "--entity-type", "clients",
                 "--entity-name", "x")
    assert out.returncode == 1 and out.stderr.strip() == "logbus: configs: Quota producer_byte_rate must be greater than 0"
    out = logbus(*boot, "--alter", "--add-config", "producer_byte_rate=x", "--entity-type", "clients",
                 "--entity-name", "x")
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1
    # the quota (user ANONYMOUS, any client id) holds after a restart, from the log dir's file
    b.stop()
    b.start()
    _, throttles = produce(b.bootstrap, "standalone-quota", "any-client")
    assert throttles
    out = logbus(*boot, "--alter", "--delete-config", "producer_byte_rate,consumer_byte_rate", "--entity-type",
                 "users", "--entity-name", "ANONYMOUS", "--entity-type", "clients", "--entity-default")
    assert out.returncode == 0, out.stderr
    out = logbus(*boot, "--describe", "--entity-type", "users")
    assert out.returncode == 0 and out.stdout == "", out.stdout
    wait_until(lambda: produce(b.bootstrap, "standalone-quota", "any-client")[1] == [], 60,
               what="the producer no longer throttled")


def test_controller_mutations_over_their_quota(fresh_broker):
    """KIP-599 with a burst of 4 partitions refilled at 0.5 a second: kafka-python (CreateTopics v7, DeleteTopics v6,
    CreatePartitions v3: strict) is refused with THROTTLING_QUOTA_EXCEEDED while the bucket is below zero and gets
    through once it refilled; confluent-kafka (older versions: permissive) has its topics created and its answers
    throttled. (kafka-python holds back after a throttled answer, hence the sleeps.)"""
    from confluent_kafka.admin import AdminClient, NewTopic as CNewTopic
    from kafka.admin import NewPartitions, NewTopic
    from kafka.errors import ThrottlingQuotaExceededError

    b = fresh_broker(controller_quota_window_num=8).start()
    q = Quotas(b.bootstrap)
    try:
        assert q.alter({"client-id": "creator"}, {"controller_mutation_rate": 0.5}) == (0, None)
    finally:
        q.close()
    admin = KafkaAdminClient(bootstrap_servers=b.bootstrap, client_id="creator")
    try:
        admin.create_topics([NewTopic("m-a", 4, 1)])  # the whole burst, taken at once
        admin.create_topics([NewTopic("m-b", 1, 1)])  # the bucket was not below zero yet: taken, now at -1
        with pytest.raises(ThrottlingQuotaExceededError, match="The throttling quota has been exceeded"):
            admin.create_topics([NewTopic("m-c", 1, 1)])
        time.sleep(2.5)  # past the throttle (2 s), the bucket above zero
        admin.create_topics([NewTopic("m-c", 1, 1)])  # now at -0.75
        with pytest.raises(ThrottlingQuotaExceededError):
            admin.delete_topics(["m-a"])
        time.sleep(4)
        admin.delete_topics(["m-a"])  # 4 partitions deleted: the bucket far below zero
        with pytest.raises(ThrottlingQuotaExceededError):
            admin.create_partitions({"m-b": NewPartitions(2)})
    finally:
        admin.close()
    throttles = []
    c = AdminClient({"bootstrap.servers": b.bootstrap, "client.id": "creator",
                     "throttle_cb": lambda e: throttles.append(e.throttle_time)})
    for name in ("m-d", "m-e"):
        assert c.create_topics([CNewTopic(name, 2, 1)])[name].result(30) is None  # never refused
    c.poll(1)
    assert any(t > 0 for t in throttles), throttles
    topics = AdminClient({"bootstrap.servers": b.bootstrap}).list_topics(timeout=10).topics
    assert {"m-b", "m-c", "m-d", "m-e"} <= set(topics) and "m-a" not in topics
    assert len(topics["m-b"].partitions) == 1


def api_versions(port: int, source: str = "127.0.0.1") -> tuple[bool, float]:
    """A new connection from ``source`` sending ApiVersions v0: (answered, seconds until the answer or the close)."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=10, source_address=(source, 0))
    started = time.monotonic()
    try:
        header = struct.pack(">hhih", 18, 0, 7, 1) + b"t"
        sock.sendall(struct.pack(">i", len(header)) + header)
        try:
            data = sock.recv(8)
        except ConnectionResetError:
            data = b""
        return len(data) == 8 and data[4:8] == struct.pack(">i", 7), time.monotonic() - started
    finally:
        sock.close()


def test_request_time_and_connection_creation_quotas(fresh_broker):
    """request_percentage: kafka-python's requests from a client id with 1% of a thread get answers with
    throttle_time_ms (at most one quota window), another client id's never do; so do confluent-kafka's produce
    requests from that client id (throttle_cb). connection_creation_rate (KIP-612)
    for 127.0.0.1: new connections past 2 a second are closed unanswered after a delay, another IP's are not, and
    the refused ones are not counted."""
    metrics_port = free_port()
    b = fresh_broker(metrics_listener=f"http://127.0.0.1:{metrics_port}", **WINDOW).start()
    q = Quotas(b.bootstrap)  # its connections are made before the IP's quota, and kept
    try:
        assert q.alter({"client-id": "greedy"}, {"request_percentage": 1}) == (0, None)
        assert q.alter({"ip": "127.0.0.1"}, {"connection_creation_rate": 2}) == (0, None)
        assert q.describe([("ip", 0, "127.0.0.1")]) == {(("ip", "127.0.0.1"),): {"connection_creation_rate": 2.0}}
        first = [api_versions(b.port) for _ in range(6)]
        assert first[0][0] and first[1][0], first
        refused = [seconds for answered, seconds in first[2:] if not answered]
        assert refused and all(s >= 0.2 for s in refused), first  # closed after the throttle time, not at once
        assert all(api_versions(b.port, "127.0.0.2")[0] for _ in range(4))  # no quota for that IP
        time.sleep(1.5)
        assert api_versions(b.port)[0]  # a second later: within the rate again
        assert q.alter({"ip": "127.0.0.1"}, remove=["connection_creation_rate"]) == (0, None)
    finally:
        q.close()
    assert all(api_versions(b.port)[0] for _ in range(6))

    from kafka.errors import NodeNotReadyError

    throttles = {}
    for client_id in ("greedy", "polite"):
        q = Quotas(b.bootstrap, client_id=client_id)
        seen = throttles[client_id] = []
        try:
            describe = DescribeClientQuotasRequest(components=[], strict=False)
            for _ in range(400):
                try:
                    seen.append(q.send(describe).throttle_time_ms)
                except NodeNotReadyError:  # kafka-python sends nothing while a throttle lasts (KIP-219)
                    time.sleep(0.1)
                if client_id == "greedy" and len([t for t in seen if t]) >= 3:
                    break
        finally:
            q.close()
    assert [t for t in throttles["greedy"] if t] and max(throttles["greedy"]) <= 1000, throttles["greedy"]
    assert not any(throttles["polite"]), throttles["polite"]
    # confluent-kafka's producer: the throttle is in its Produce answers too (framed by hand, raised in place)
    reported = []
    producer = Producer({"bootstrap.servers": b.bootstrap, "client.id": "greedy", "linger.ms": 0,
                         "throttle_cb": lambda e: reported.append(e.throttle_time)})
    deadline = time.monotonic() + 60
    while not reported and time.monotonic() < deadline:
        for _ in range(50):
            producer.produce("request-quota", b"x" * 100)
        producer.poll(0.05)
    assert producer.flush(60) == 0
    assert reported and 0 < max(reported) <= 1000, reported
    text = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10).read().decode()
    assert 'logbus_broker_client_quota_throttled_responses_total{quota_type="Request"}' in text
    counts = {line.split("{")[1].split("}")[0]: float(line.split()[-1]) for line in text.splitlines()
              if line.startswith("logbus_broker_client_quota_throttled_responses_total{")}
    assert counts['quota_type="Request"'] >= 3 and counts['quota_type="ConnectionCreation"'] == len(refused), counts
