"""KIP-664's transaction tooling against a standalone broker, judged by kafka-python's admin client (what
``kafka-transactions.sh`` does): ListTransactions, DescribeTransactions and DescribeProducers find a transaction
that a confluent-kafka producer left open, and WriteTxnMarkers aborts it by hand so that read_committed readers move
on. Raw requests check the corners the client does not show (unknown state filters, Kafka's error codes)."""

import time
import uuid

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka.admin import KafkaAdminClient
from kafka.admin._transactions import AbortTransactionSpec, TransactionState
from kafka.errors import TransactionalIdNotFoundError
from kafka.structs import TopicPartition as KTopicPartition
from rawclient import RawClient, request_module
from support import BrokerProcess, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

INVALID_REQUEST, UNKNOWN_TOPIC_OR_PARTITION, TRANSACTIONAL_ID_NOT_FOUND = 42, 3, 105
INVALID_TOPIC_EXCEPTION = 17


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    proc = BrokerProcess(tmp_path_factory.mktemp("txn-admin"), transaction_state_log_num_partitions=5,
                         transaction_abort_timed_out_transaction_cleanup_interval_ms=300).start()
    yield proc
    proc.stop()


@pytest.fixture
def admin(broker):
    client = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    yield client
    client.close()


def new_topic(broker):
    name = f"txa-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(name, 1, 1)])[name].result(10)
    return name


def committed_end(broker, topic) -> int:
    """How far a read_committed consumer gets: its high watermark is the last stable offset."""
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "lso", "isolation.level": "read_committed"})
    try:
        return consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10, cached=False)[1]
    finally:
        consumer.close()


def test_kafka_python_finds_a_hanging_transaction_and_aborts_it_by_hand(broker, admin):
    topic, txn_id = new_topic(broker), f"hang-{uuid.uuid4().hex[:6]}"
    before = int(time.time() * 1000)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": txn_id,
                         "transaction.timeout.ms": 60000})
    producer.init_transactions(10)
    producer.begin_transaction()
    for i in range(3):
        producer.produce(topic, f"open-{i}".encode())
    assert producer.flush(10) == 0
    after = int(time.time() * 1000)

    listed = [t for rows in admin.list_transactions().values() for t in rows if t.transactional_id == txn_id]
    assert [t.state for t in listed] == [TransactionState.ONGOING]
    pid = listed[0].producer_id
    assert [t.transactional_id for rows in admin.list_transactions(producer_id_filters=[pid]).values()
            for t in rows] == [txn_id]
    assert not any(t.transactional_id == txn_id for rows in
                   admin.list_transactions(state_filters=["CompleteCommit"]).values() for t in rows)

    described = admin.describe_transactions([txn_id])[txn_id]
    assert (described.state, described.producer_id, described.transaction_timeout_ms) == (
        TransactionState.ONGOING, pid, 60000)
    assert before <= described.transaction_start_time_ms <= after
    assert described.topic_partitions == {KTopicPartition(topic, 0)}

    tp = KTopicPartition(topic, 0)
    (state,) = admin.describe_producers([tp])[tp].active_producers
    assert (state.producer_id, state.producer_epoch, state.last_sequence) == (pid, described.producer_epoch, 2)
    assert state.current_transaction_start_offset == 0 and before - 1000 <= state.last_timestamp <= after + 1000
    assert committed_end(broker, topic) == 0  # the open transaction holds read_committed readers back

    admin.abort_transaction(AbortTransactionSpec(tp, state.producer_id, state.producer_epoch, state.coordinator_epoch))
    (state,) = admin.describe_producers([tp])[tp].active_producers
    assert state.current_transaction_start_offset == -1
    assert committed_end(broker, topic) == 4  # three records and the abort marker, all stable now
    reader = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "r", "isolation.level": "read_committed",
                       "enable.partition.eof": True})
    reader.assign([TopicPartition(topic, 0, 0)])
    seen, eof = [], False
    deadline = time.time() + 20
    while not eof and time.time() < deadline:
        msg = reader.poll(0.5)
        if msg is not None:
            eof = bool(msg.error()) and msg.error().code() == -191
            if not msg.error():
                seen.append(msg.value())
    reader.close()
    assert eof and seen == []  # the aborted records are never delivered to read_committed readers


def test_a_committed_transaction_is_described_as_complete(broker, admin):
    topic, txn_id = new_topic(broker), f"done-{uuid.uuid4().hex[:6]}"
    producer = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": txn_id})
    producer.init_transactions(10)
    producer.begin_transaction()
    producer.produce(topic, b"x")
    producer.commit_transaction(10)
    wait_until(lambda: admin.describe_transactions([txn_id])[txn_id].state == TransactionState.COMPLETE_COMMIT,
               20, what="CompleteCommit")
    with pytest.raises(TransactionalIdNotFoundError):
        admin.describe_transactions([f"never-{uuid.uuid4().hex[:6]}"])


def test_raw_requests_get_kafkas_answers_for_what_the_client_does_not_show(broker):
    topic = new_topic(broker)
    client = RawClient(broker.host, broker.port)
    try:
        lt = request_module(66, 1)
        answer = client.request(66, 1, lt.ListTransactionsRequest(state_filters=("Ongoing", "Bogus"),
                                                                  producer_id_filters=(), duration_filter=-1))
        assert answer.error_code.value == 0 and answer.unknown_state_filters == ("Bogus",)
        assert all(t.transaction_state == "Ongoing" for t in answer.transaction_states)
        none_old = client.request(66, 1, lt.ListTransactionsRequest(state_filters=(), producer_id_filters=(),
                                                                    duration_filter=10**12))
        assert none_old.transaction_states == ()  # nothing has been open for 30 years
        dt = request_module(65, 0)
        states = client.request(65, 0, dt.DescribeTransactionsRequest(transactional_ids=("", "nobody"))
                                ).transaction_states
        assert [(s.transactional_id, s.error_code.value, s.producer_id) for s in states] == [
            ("", INVALID_REQUEST, 0), ("nobody", TRANSACTIONAL_ID_NOT_FOUND, 0)]  # the schema's defaults
        dp = request_module(61, 0)
        topics = client.request(61, 0, dp.DescribeProducersRequest(topics=(
            dp.TopicRequest(name=topic, partition_indexes=(0, 7)),
            dp.TopicRequest(name="no-such-topic", partition_indexes=(0,)),
            dp.TopicRequest(name="bad/name", partition_indexes=(0, 1))))).topics
        assert [[(p.partition_index, p.error_code.value, p.active_producers) for p in t.partitions]
                for t in topics] == [[(0, 0, ()), (7, UNKNOWN_TOPIC_OR_PARTITION, ())],
                                     [(0, UNKNOWN_TOPIC_OR_PARTITION, ())],
                                     [(0, INVALID_TOPIC_EXCEPTION, ()), (1, INVALID_TOPIC_EXCEPTION, ())]]
        assert "bad/name" in topics[2].partitions[0].error_message  # the reason, as Kafka's ApiError carries it
    finally:
        client.close()
