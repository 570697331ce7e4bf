"""Transactions on a standalone broker, judged by outside clients: confluent-kafka's transactional producer,
read_committed / read_uncommitted consumers of confluent-kafka, kafka-python and aiokafka, aiokafka's and
kafka-python's transactional producers; fencing, timeouts, restarts (SIGTERM and kill -9) with a transaction open.
"""

import asyncio
import time
import uuid

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from support import BrokerProcess, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]
PARTITIONS = 3
SETTINGS = dict(transaction_state_log_num_partitions=5, transaction_abort_timed_out_transaction_cleanup_interval_ms=300,
                transaction_max_timeout_ms=120000)


@pytest.fixture(scope="module")
def txn_broker(tmp_path_factory):
    proc = BrokerProcess(tmp_path_factory.mktemp("txn"), **SETTINGS).start()
    yield proc
    proc.stop()


def new_topic(broker, prefix="tx"):
    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(name, PARTITIONS, 1)])[name].result(10)
    return name


def txn_producer(broker, txn_id, **extra):
    return Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": txn_id,
                     "transaction.timeout.ms": 10000, **extra})


def read_confluent(broker, topic, isolation, timeout=20):
    """Every value of ``topic`` up to the end of each partition, as the consumer sees it."""
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"r-{uuid.uuid4().hex[:6]}",
                  "isolation.level": isolation, "enable.partition.eof": True, "enable.auto.commit": False})
    c.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    got, eof, deadline = [], set(), time.time() + timeout
    try:
        while len(eof) < PARTITIONS and time.time() < deadline:
            msg = c.poll(0.5)
            if msg is None:
                continue
            if msg.error():
                if msg.error().code() == -191:  # _PARTITION_EOF
                    eof.add(msg.partition())
                continue
            eof.discard(msg.partition())
            got.append(msg.value())
    finally:
        c.close()
    assert len(eof) == PARTITIONS, f"not at the end of every partition within {timeout}s"
    return sorted(got)


def read_kafka_python(broker, topic, isolation):
    from kafka import KafkaConsumer

    c = KafkaConsumer(bootstrap_servers=broker.bootstrap, isolation_level=isolation, enable_auto_commit=False,
                      consumer_timeout_ms=3000, auto_offset_reset="earliest")
    from kafka import TopicPartition as KTP
    c.assign([KTP(topic, p) for p in range(PARTITIONS)])
    c.seek_to_beginning()
    got = sorted(m.value for m in c)
    c.close()
    return got


def read_aiokafka(broker, topic, isolation):
    from aiokafka import AIOKafkaConsumer
    from aiokafka.structs import TopicPartition as ATP

    async def run():
        c = AIOKafkaConsumer(bootstrap_servers=broker.bootstrap, isolation_level=isolation, enable_auto_commit=False,
                             auto_offset_reset="earliest")
        await c.start()
        try:
            parts = [ATP(topic, p) for p in range(PARTITIONS)]
            c.assign(parts)
            await c.seek_to_beginning(*parts)
            got = []
            while True:
                batch = await c.getmany(timeout_ms=2000)
                if not batch:
                    return sorted(got)
                got.extend(m.value for msgs in batch.values() for m in msgs)
        finally:
            await c.stop()

    return asyncio.run(run())


def values(prefix, n):
    return [f"{prefix}{i}".encode() for i in range(n)]


def produce_all(producer, topic, vals):
    for i, v in enumerate(vals):
        producer.produce(topic, value=v, partition=i % PARTITIONS)
    producer.flush(10)  # sent before the transaction ends (abort_transaction purges what is still queued)


def test_commit_and_abort_seen_by_every_reader(txn_broker):
    topic, other = new_topic(txn_broker), new_topic(txn_broker)
    p = txn_producer(txn_broker, f"app-{uuid.uuid4().hex[:6]}")
    p.init_transactions(30)
    p.begin_transaction()
    produce_all(p, topic, values("c", 30))
    produce_all(p, other, values("o", 6))
    p.commit_transaction(30)
    p.begin_transaction()
    produce_all(p, topic, values("a", 30))
    p.abort_transaction(30)
    p.begin_transaction()
    produce_all(p, topic, values("d", 9))
    p.commit_transaction(30)
    committed = sorted(values("c", 30) + values("d", 9))
    everything = sorted(committed + values("a", 30))
    assert read_confluent(txn_broker, topic, "read_committed") == committed
    assert read_confluent(txn_broker, topic, "read_uncommitted") == everything
    assert read_confluent(txn_broker, other, "read_committed") == sorted(values("o", 6))
    assert read_kafka_python(txn_broker, topic, "read_committed") == committed
    assert read_kafka_python(txn_broker, topic, "read_uncommitted") == everything
    assert read_aiokafka(txn_broker, topic, "read_committed") == committed
    assert read_aiokafka(txn_broker, topic, "read_uncommitted") == everything


def test_open_transaction_holds_read_committed_readers_at_the_last_stable_offset(txn_broker):
    topic = new_topic(txn_broker)
    plain = Producer({"bootstrap.servers": txn_broker.bootstrap})
    plain.produce(topic, value=b"before", partition=0)
    plain.flush(10)
    p = txn_producer(txn_broker, f"lso-{uuid.uuid4().hex[:6]}")
    p.init_transactions(30)
    p.begin_transaction()
    p.produce(topic, value=b"open", partition=0)
    p.flush(10)
    plain.produce(topic, value=b"after", partition=0)  # not transactional: behind the open transaction
    plain.flush(10)
    committed = Consumer({"bootstrap.servers": txn_broker.bootstrap, "group.id": "w", "isolation.level": "read_committed"})
    uncommitted = Consumer({"bootstrap.servers": txn_broker.bootstrap, "group.id": "w",
                            "isolation.level": "read_uncommitted"})
    tp = TopicPartition(topic, 0)
    assert committed.get_watermark_offsets(tp, timeout=10)[1] == 1  # ListOffsets latest = LSO
    assert uncommitted.get_watermark_offsets(tp, timeout=10)[1] == 3
    p.commit_transaction(30)
    wait_until(lambda: committed.get_watermark_offsets(tp, timeout=10)[1] == 4, 10, what="LSO past the marker")
    committed.close()
    uncommitted.close()
    assert read_confluent(txn_broker, topic, "read_committed") == [b"after", b"before", b"open"]


def test_a_new_instance_fences_the_old_one(txn_broker):
    topic = new_topic(txn_broker)
    txn_id = f"fence-{uuid.uuid4().hex[:6]}"
    old = txn_producer(txn_broker, txn_id)
    old.init_transactions(30)
    old.begin_transaction()
    produce_all(old, topic, values("zombie", 6))
    new = txn_producer(txn_broker, txn_id)
    new.init_transactions(30)  # aborts the old instance's open transaction, bumps the epoch
    new.begin_transaction()
    produce_all(new, topic, values("new", 6))
    new.commit_transaction(30)
    with pytest.raises(KafkaException) as raised:
        old.produce(topic, value=b"late", partition=0)
        old.commit_transaction(10)
    error = raised.value.args[0]
    assert error.fatal() or error.txn_requires_abort(), error
    assert read_confluent(txn_broker, topic, "read_committed") == sorted(values("new", 6))
    assert set(values("zombie", 6)) <= set(read_confluent(txn_broker, topic, "read_uncommitted"))


def test_timeout_aborts_and_fences(txn_broker):
    topic = new_topic(txn_broker)
    p = txn_producer(txn_broker, f"slow-{uuid.uuid4().hex[:6]}", **{"transaction.timeout.ms": 2000})
    p.init_transactions(30)
    p.begin_transaction()
    produce_all(p, topic, values("late", 6))
    plain = Producer({"bootstrap.servers": txn_broker.bootstrap})
    for i in range(PARTITIONS):
        plain.produce(topic, value=b"next%d" % i, partition=i)
    plain.flush(10)
    watcher = Consumer({"bootstrap.servers": txn_broker.bootstrap, "group.id": "w", "isolation.level": "read_committed"})
    started = time.time()
    wait_until(lambda: all(watcher.get_watermark_offsets(TopicPartition(topic, i), timeout=10)[1] == 4
                           for i in range(PARTITIONS)), 15, what="the timed-out transaction aborted")
    assert time.time() - started < 10  # aborted by the coordinator about 2 s after it began
    watcher.close()
    assert read_confluent(txn_broker, topic, "read_committed") == [b"next0", b"next1", b"next2"]
    with pytest.raises(KafkaException):
        p.commit_transaction(10)


def test_transaction_timeout_over_the_maximum_is_refused(txn_broker):
    p = txn_producer(txn_broker, f"long-{uuid.uuid4().hex[:6]}", **{"transaction.timeout.ms": 200000})
    with pytest.raises(KafkaException) as raised:
        p.init_transactions(20)
    assert "timeout" in str(raised.value).lower()


def test_aiokafka_and_kafka_python_transactions(txn_broker):
    from aiokafka import AIOKafkaProducer
    from kafka import KafkaProducer

    topic = new_topic(txn_broker)

    async def aio():
        producer = AIOKafkaProducer(bootstrap_servers=txn_broker.bootstrap, transactional_id="aio-" + topic,
                                    transaction_timeout_ms=10000)
        await producer.start()
        try:
            async with producer.transaction():
                for i, v in enumerate(values("aio", 6)):
                    await producer.send_and_wait(topic, v, partition=i % PARTITIONS)
            await producer.begin_transaction()
            for i, v in enumerate(values("aioabort", 6)):
                await producer.send_and_wait(topic, v, partition=i % PARTITIONS)
            await producer.abort_transaction()
        finally:
            await producer.stop()

    asyncio.run(aio())
    kp = KafkaProducer(bootstrap_servers=txn_broker.bootstrap, transactional_id="kp-" + topic)
    kp.init_transactions()
    kp.begin_transaction()
    for i, v in enumerate(values("kp", 6)):
        kp.send(topic, v, partition=i % PARTITIONS)
    kp.commit_transaction()
    kp.begin_transaction()
    for i, v in enumerate(values("kpabort", 6)):
        kp.send(topic, v, partition=i % PARTITIONS)
    kp.flush()
    kp.abort_transaction()
    kp.close()
    committed = sorted(values("aio", 6) + values("kp", 6))
    assert read_confluent(txn_broker, topic, "read_committed") == committed
    assert read_aiokafka(txn_broker, topic, "read_committed") == committed
    assert len(read_confluent(txn_broker, topic, "read_uncommitted")) == 24


@pytest.mark.parametrize("how", ["sigterm", "kill9"])
def test_open_transaction_survives_a_broker_restart(tmp_path, how):
    broker = BrokerProcess(tmp_path / "b", **SETTINGS).start()
    try:
        topic = new_topic(broker)
        txn_id = f"restart-{how}"
        p = txn_producer(broker, txn_id)
        p.init_transactions(30)
        p.begin_transaction()
        produce_all(p, topic, values("lost", 6))
        if how == "kill9":
            broker.kill9()
        else:
            broker.stop()
        broker.start()
        # the reloaded coordinator knows the open transaction: a new instance aborts it and goes on
        again = txn_producer(broker, txn_id)
        again.init_transactions(60)
        again.begin_transaction()
        produce_all(again, topic, values("kept", 6))
        again.commit_transaction(30)
        assert read_confluent(broker, topic, "read_committed") == sorted(values("kept", 6))
        assert len(read_confluent(broker, topic, "read_uncommitted")) == 12
    finally:
        broker.stop()


def test_a_changed_partition_count_setting_keeps_transactional_ids_where_they_are(tmp_path):
    """As Kafka: once ``__transaction_state`` exists, its own partition count places a transactional id, not
    ``transaction.state.log.num.partitions`` (an operator who changes the setting later must not lose open
    transactions or the fencing of zombies)."""
    from broker.protocol.txn_log import partition_for

    txn_id = next(t for t in (f"moved-{i}" for i in range(1000)) if partition_for(t, 50) >= 5)  # a partition 5 lack
    broker = BrokerProcess(tmp_path / "b", **SETTINGS).start()  # 5 partitions
    try:
        topic = new_topic(broker)
        p = txn_producer(broker, txn_id)
        p.init_transactions(30)
        p.begin_transaction()
        produce_all(p, topic, values("lost", 6))
        broker.stop()
        broker.settings["transaction.state.log.num.partitions"] = 50
        broker.start()
        again = txn_producer(broker, txn_id)
        again.init_transactions(60)  # finds the id's state where it was, and aborts the open transaction
        again.begin_transaction()
        produce_all(again, topic, values("kept", 6))
        again.commit_transaction(30)
        assert read_confluent(broker, topic, "read_committed") == sorted(values("kept", 6))
    finally:
        broker.stop()


def consume_transform_produce(bootstrap, source, sink, group, txn_id, rounds, abort_rounds=(), timeout=60,
                              expect=30):
    """A confluent-kafka read-process-write loop: each round consumes ``expect`` messages (one consume call may
    return one partition's messages before the others' are fetched: the CI of 4fbe610 committed one partition's
    offset of three), writes them upper-cased to ``sink`` and commits the consumed offsets in the same
    transaction (aborted in ``abort_rounds``)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "isolation.level": "read_committed",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    consumer.subscribe([source])
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id, "transaction.timeout.ms": 30000})
    producer.init_transactions(30)
    try:
        for r in range(rounds):
            msgs, deadline = [], time.time() + timeout
            while len(msgs) < expect and time.time() < deadline:
                msgs += [m for m in consumer.consume(100, 1.0) if not m.error()]
            assert len(msgs) == expect, f"consumed {len(msgs)} of {expect} messages"
            producer.begin_transaction()
            for m in msgs:
                producer.produce(sink, value=m.value().upper(), partition=m.partition())
            producer.send_offsets_to_transaction(consumer.position(consumer.assignment()),
                                                 consumer.consumer_group_metadata(), 30)
            if r in abort_rounds:
                producer.flush(10)
                producer.abort_transaction(30)
                # rewind to the committed offsets, as an application must after an abort
                for tp in consumer.committed(consumer.assignment(), 30):
                    consumer.seek(TopicPartition(tp.topic, tp.partition, max(tp.offset, 0)))
            else:
                producer.commit_transaction(30)
        return consumer.committed([TopicPartition(source, p) for p in range(PARTITIONS)], 30)
    finally:
        consumer.close()


def test_offsets_commit_with_the_transaction(txn_broker):
    source, sink = new_topic(txn_broker, "src"), new_topic(txn_broker, "sink")
    plain = Producer({"bootstrap.servers": txn_broker.bootstrap})
    for i in range(30):
        plain.produce(source, value=b"m%d" % i, partition=i % PARTITIONS)
    plain.flush(10)
    group = f"ctp-{uuid.uuid4().hex[:6]}"
    committed = consume_transform_produce(txn_broker.bootstrap, source, sink, group, "ctp-" + group, rounds=1,
                                          abort_rounds=(0,))
    assert all(tp.offset < 0 for tp in committed)  # the aborted transaction committed no offsets
    assert read_confluent(txn_broker, sink, "read_committed") == []
    committed = consume_transform_produce(txn_broker.bootstrap, source, sink, group, "ctp-" + group, rounds=1)
    assert sorted(tp.offset for tp in committed) == [10, 10, 10]
    assert read_confluent(txn_broker, sink, "read_committed") == sorted(b"M%d" % i for i in range(30))


def offset_fetch_errors(broker, group, topic, require_stable):
    from rawclient import RawClient, request_module

    client = RawClient(broker.host, broker.port)
    try:
        m = request_module(9, 7)
        resp = client.request(9, 7, m.OffsetFetchRequest(group_id=group, require_stable=require_stable, topics=(
            m.OffsetFetchRequestTopic(name=topic, partition_indexes=tuple(range(PARTITIONS))),)))
        return {p.error_code.value for t in resp.topics for p in t.partitions}
    finally:
        client.close()


def test_pending_offsets_hold_a_new_member_and_a_zombie_is_refused(txn_broker):
    source = new_topic(txn_broker, "src")
    plain = Producer({"bootstrap.servers": txn_broker.bootstrap})
    for i in range(30):
        plain.produce(source, value=b"m%d" % i, partition=i % PARTITIONS)
    plain.flush(10)
    group = f"stable-{uuid.uuid4().hex[:6]}"
    conf = {"bootstrap.servers": txn_broker.bootstrap, "group.id": group, "enable.auto.commit": False,
            "auto.offset.reset": "earliest", "isolation.level": "read_committed"}
    first = Consumer(conf)
    first.subscribe([source])
    got = []
    while len(got) < 30:
        got += [m for m in first.consume(100, 1.0) if not m.error()]
    zombie_metadata = first.consumer_group_metadata()
    p = txn_producer(txn_broker, "stable-" + group)
    p.init_transactions(30)
    p.begin_transaction()
    p.send_offsets_to_transaction([TopicPartition(source, i, 4) for i in range(PARTITIONS)], zombie_metadata, 30)
    first.close()  # the group rebalances; the transaction with its offsets is still open
    second = Consumer(conf)
    second.subscribe([source])
    held = [m for m in second.consume(100, 4.0) if not m.error()]
    assert held == []  # OffsetFetch(require_stable) answers UNSTABLE_OFFSET_COMMIT while the offsets are pending
    assert offset_fetch_errors(txn_broker, group, source, require_stable=True) == {88}
    assert offset_fetch_errors(txn_broker, group, source, require_stable=False) == {0}
    p.commit_transaction(30)
    after = []
    deadline = time.time() + 30
    while len(after) < 18 and time.time() < deadline:
        after += [m for m in second.consume(100, 1.0) if not m.error()]
    assert sorted({(m.partition(), m.offset()) for m in after})[:1] == [(0, 4)]
    assert min(m.offset() for m in after) == 4 and len(after) == 18  # from the transaction's offsets
    # KIP-447: the first member's group metadata is from an older generation and a member that left
    p.begin_transaction()
    with pytest.raises(KafkaException) as raised:
        p.send_offsets_to_transaction([TopicPartition(source, 0, 9)], zombie_metadata, 30)
    assert raised.value.args[0].code() in (25, 22), raised.value  # UNKNOWN_MEMBER_ID / ILLEGAL_GENERATION
    p.abort_transaction(30)
    assert second.committed([TopicPartition(source, 0)], 30)[0].offset == 4
    second.close()


def test_aiokafka_sends_offsets_in_a_transaction(txn_broker):
    from aiokafka import AIOKafkaProducer
    from aiokafka.structs import TopicPartition as ATP

    source = new_topic(txn_broker, "src")
    group = f"aio-{uuid.uuid4().hex[:6]}"

    async def run():
        producer = AIOKafkaProducer(bootstrap_servers=txn_broker.bootstrap, transactional_id="aio-" + group)
        await producer.start()
        try:
            async with producer.transaction():
                await producer.send_offsets_to_transaction({ATP(source, 1): 7}, group)
            await producer.begin_transaction()
            await producer.send_offsets_to_transaction({ATP(source, 2): 5}, group)
            await producer.abort_transaction()
        finally:
            await producer.stop()

    asyncio.run(run())
    c = Consumer({"bootstrap.servers": txn_broker.bootstrap, "group.id": group})
    committed = {tp.partition: tp.offset for tp in c.committed([TopicPartition(source, p) for p in range(3)], 30)}
    c.close()
    assert committed == {0: -1001, 1: 7, 2: -1001}
