"""Transactions on a three-broker cluster (ZooKeeper, __transaction_state replicated 3 ways): markers written
by other brokers (WriteTxnMarkers), the coordinator killed with kill -9 in the middle of a transaction, a data
partition's leader killed, fencing; judged by confluent-kafka's transactional producer and read_committed /
read_uncommitted consumers."""

import time
import uuid

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from rawclient import RawClient, request_module
from support import Cluster

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]
PARTITIONS = 3


@pytest.fixture(scope="module")
def txn_cluster(tmp_path_factory):
    cluster = Cluster(tmp_path_factory.mktemp("txc"), 3, transaction_state_log_num_partitions=5,
                      transaction_abort_timed_out_transaction_cleanup_interval_ms=500).start()
    yield cluster
    cluster.stop()


def new_topic(cluster, prefix="txc"):
    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(name, PARTITIONS, 3)])[name].result(30)
    return name


def producer(cluster, txn_id):
    return Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": txn_id,
                     "transaction.timeout.ms": 60000, "acks": "all"})


def read(cluster, topic, isolation, timeout=60):
    """{partition: [values in offset order]} up to the end of every partition."""
    c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": f"r-{uuid.uuid4().hex[:6]}",
                  "isolation.level": isolation, "enable.partition.eof": True, "enable.auto.commit": False})
    c.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    got = {p: [] for p in range(PARTITIONS)}
    eof, deadline = set(), time.time() + timeout
    try:
        while len(eof) < PARTITIONS and time.time() < deadline:
            msg = c.poll(0.5)
            if msg is None:
                continue
            if msg.error():
                if msg.error().code() == -191:
                    eof.add(msg.partition())
                continue
            eof.discard(msg.partition())
            got[msg.partition()].append(msg.value().decode())
    finally:
        c.close()
    assert len(eof) == PARTITIONS, "not at the end of every partition in time"
    return got


def coordinator_of(cluster, txn_id):
    b = next(b for b in cluster.brokers.values() if b.alive())
    client = RawClient(b.host, b.port)
    try:
        m = request_module(10, 1)
        resp = client.request(10, 1, m.FindCoordinatorRequest(key=txn_id, key_type=1))
        return resp.node_id if resp.error_code.value == 0 else None
    finally:
        client.close()


def leader_of(cluster, topic, partition):
    return cluster.state(topic, partition)["leader"]


def restart(cluster, node):
    cluster.brokers[node].start()
    cluster.wait_registered(set(cluster.brokers))


def test_commit_and_abort_across_brokers_and_fencing(txn_cluster):
    topic = new_topic(txn_cluster)
    txn_id = f"c-{uuid.uuid4().hex[:6]}"
    p = producer(txn_cluster, txn_id)
    p.init_transactions(60)
    for k in range(4):
        p.begin_transaction()
        for i in range(12):
            p.produce(topic, value=f"{k}-{i}", partition=i % PARTITIONS)
        p.flush(30)
        p.commit_transaction(60) if k % 2 == 0 else p.abort_transaction(60)
    p.begin_transaction()
    p.produce(topic, value="zombie", partition=0)
    p.flush(30)
    fresh = producer(txn_cluster, txn_id)
    fresh.init_transactions(60)  # fences p: its open transaction is aborted
    with pytest.raises(KafkaException):
        p.commit_transaction(30)
    committed = read(txn_cluster, topic, "read_committed")
    assert sorted(v for vs in committed.values() for v in vs) == sorted(f"{k}-{i}" for k in (0, 2) for i in range(12))
    everything = read(txn_cluster, topic, "read_uncommitted")
    assert sum(len(vs) for vs in everything.values()) == 4 * 12 + 1


def test_sequences_exactly_once_across_coordinator_and_leader_kills(txn_cluster):
    """20 transactions of 30 sequenced records; kill -9 of the coordinator in the middle of transaction 6 and of
    a data partition's leader in transaction 13 (both restarted later). The application aborts and redoes a
    transaction whose commit failed with an abortable error. read_committed must see every sequence number of
    every partition once, in order, and nothing of an aborted attempt."""
    topic = new_topic(txn_cluster, "seq")
    txn_id = f"seq-{uuid.uuid4().hex[:6]}"
    p = producer(txn_cluster, txn_id)
    p.init_transactions(60)
    next_seq = {i: 0 for i in range(PARTITIONS)}
    aborted_attempts = 0
    killed = []
    for k in range(20):
        while True:
            seq = dict(next_seq)
            p.begin_transaction()
            for i in range(30):
                part = i % PARTITIONS
                p.produce(topic, value=f"{part}:{seq[part]}:{k}", partition=part)
                seq[part] += 1
            p.flush(60)
            if k == 6 and not killed:
                node = coordinator_of(txn_cluster, txn_id)
                txn_cluster.brokers[node].kill9()
                killed.append(node)
            if k == 13 and len(killed) == 1:
                restart(txn_cluster, killed[0])
                node = leader_of(txn_cluster, topic, 1)
                txn_cluster.brokers[node].kill9()
                killed.append(node)
            try:
                p.commit_transaction(90)
                next_seq = seq
                break
            except KafkaException as exc:
                if not exc.args[0].txn_requires_abort():
                    raise
                p.abort_transaction(90)
                aborted_attempts += 1
    restart(txn_cluster, killed[-1])
    committed = read(txn_cluster, topic, "read_committed")
    for part, vals in committed.items():
        assert [int(v.split(":")[1]) for v in vals] == list(range(next_seq[part])), f"partition {part}"
    assert sum(next_seq.values()) == 20 * 30
    uncommitted = read(txn_cluster, topic, "read_uncommitted")
    assert sum(len(v) for v in uncommitted.values()) == 20 * 30 + aborted_attempts * 30


def test_group_offsets_in_transactions_across_brokers(txn_cluster):
    """The group's coordinator is found by hashing the group, the transaction's by hashing its id: offsets are
    kept pending in ZooKeeper and applied by the group coordinator when the commit marker reaches it."""
    source = new_topic(txn_cluster, "src")
    group = f"g-{uuid.uuid4().hex[:6]}"
    p = producer(txn_cluster, "g-" + group)
    p.init_transactions(60)
    c = Consumer({"bootstrap.servers": txn_cluster.bootstrap, "group.id": group})
    tps = [TopicPartition(source, i) for i in range(PARTITIONS)]
    zk = txn_cluster.zk()
    try:
        p.begin_transaction()
        p.send_offsets_to_transaction([TopicPartition(source, i, 10 + i) for i in range(PARTITIONS)],
                                      c.consumer_group_metadata(), 60)
        assert zk.get_children(f"/consumers/{group}/pending-offsets")  # durable while the transaction is open
        p.abort_transaction(60)
        assert all(tp.offset < 0 for tp in c.committed(tps, 30))
        p.begin_transaction()
        p.send_offsets_to_transaction([TopicPartition(source, i, 20 + i) for i in range(PARTITIONS)],
                                      c.consumer_group_metadata(), 60)
        p.commit_transaction(60)
        deadline = time.time() + 20
        while time.time() < deadline and [tp.offset for tp in c.committed(tps, 30)] != [20, 21, 22]:
            time.sleep(0.2)  # the commit marker reaches the group's coordinator just after EndTxn is answered
        assert [tp.offset for tp in c.committed(tps, 30)] == [20, 21, 22]
        assert zk.get_children(f"/consumers/{group}/pending-offsets") == []
        data, _ = zk.get(f"/consumers/{group}/offsets/{source}/1")
        assert data == b"21"
    finally:
        zk.stop()
        zk.close()
        c.close()


def test_kip664_tooling_on_the_coordinator_and_on_a_follower(txn_cluster):
    """kafka-python's list_transactions asks every broker and only the coordinator lists the id;
    describe_transactions goes to the coordinator; describe_producers answers from a follower's own copy too."""
    from kafka.admin import KafkaAdminClient
    from kafka.structs import TopicPartition as KTopicPartition

    topic, txn_id = new_topic(txn_cluster), f"k-{uuid.uuid4().hex[:6]}"
    p = producer(txn_cluster, txn_id)
    p.init_transactions(60)
    p.begin_transaction()
    p.produce(topic, value="open", partition=0)
    p.flush(30)
    admin = KafkaAdminClient(bootstrap_servers=txn_cluster.bootstrap)
    try:
        listed = {node: [t.transactional_id for t in rows] for node, rows in admin.list_transactions().items()}
        assert [node for node, ids in listed.items() if txn_id in ids] == [coordinator_of(txn_cluster, txn_id)]
        described = admin.describe_transactions([txn_id])[txn_id]
        assert described.topic_partitions == {KTopicPartition(topic, 0)}
        tp = KTopicPartition(topic, 0)
        follower = next(n for n in txn_cluster.brokers if n != leader_of(txn_cluster, topic, 0))

        def on(node):
            rows = admin.describe_producers([tp], broker_id=node)[tp].active_producers
            return [(s.producer_id, s.producer_epoch, s.current_transaction_start_offset) for s in rows]

        expected = [(described.producer_id, described.producer_epoch, 0)]
        assert on(leader_of(txn_cluster, topic, 0)) == expected
        deadline = time.time() + 30
        while on(follower) != expected and time.time() < deadline:  # the follower fetches it a moment later
            time.sleep(0.2)
        assert on(follower) == expected
        p.abort_transaction(60)
    finally:
        admin.close()
