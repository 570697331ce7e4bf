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
