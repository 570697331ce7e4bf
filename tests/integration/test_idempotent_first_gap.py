"""An idempotent producer's first batch in a partition must start at sequence 0 when the partition has lost
nothing (:mod:`broker.log.producer_state`): the start-up loss it closes, with librdkafka, is a first request to a
new topic's partition refused (NOT_LEADER_OR_FOLLOWER while its leadership settled) while the next one, a later
sequence, was taken; librdkafka then counts the first records as delivered (a later sequence acknowledged implies
the earlier ones were: ``rd_kafka_dr_implicit_ack``) and they are never sent again. Here, on a real broker through
the wire: the gap is refused with UNKNOWN_PRODUCER_ID (59) and nothing is written; the batches in order
are taken; a real client reads them all, in order. And with librdkafka itself, behind a proxy that answers its
first Produce request to the topic with NOT_LEADER_OR_FOLLOWER once the next one is in flight, and forwards that
next one: every acknowledged record is in the log, in order (before the fix, the first record was reported
delivered, with no offset, and was not in the log). And a topic deleted and created again under a running
librdkafka producer: its next records start past sequence 0 in a partition that never saw it; they are refused
(UNKNOWN_PRODUCER_ID), librdkafka bumps its epoch and sends them again from 0, and all are delivered (refused
with OUT_OF_ORDER_SEQUENCE_NUMBER, as first tried, the producer failed with a fatal error)."""

import datetime
import socket
import struct
import threading
import time

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka.record.default_records import DefaultRecordBatchBuilder
from rawclient import RawClient, request_module
from support import BrokerProcess, free_port, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


def idempotent_batch(producer_id: int, epoch: int, first_seq: int, values: list[bytes]) -> bytes:
    b = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False, producer_id=producer_id,
                                  producer_epoch=epoch, base_sequence=first_seq, batch_size=1 << 20)
    for i, value in enumerate(values):
        b.append(i, timestamp=1_700_000_000_000 + first_seq + i, key=None, value=value, headers=[])
    return bytes(b.build())


def produce(client: RawClient, topic: str, data: bytes) -> tuple[int, int]:
    m = request_module(0, 7)
    body = m.ProduceRequest(transactional_id=None, acks=-1, timeout=datetime.timedelta(seconds=10), topic_data=(
        m.TopicProduceData(name=topic, partition_data=(m.PartitionProduceData(index=0, records=data),)),))
    answer = client.request(0, 7, body).responses[0].partition_responses[0]
    return answer.error_code.value, answer.base_offset


def test_a_gap_at_a_producers_start_is_refused_and_the_batches_in_order_are_taken(broker):
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})  # kept: a collected client fails its futures
    admin.create_topics([NewTopic("first-gap", 1, 1)])["first-gap"].result(30)
    client = RawClient(broker.host, broker.port)
    try:
        m = request_module(22, 4)
        pid = client.request(22, 4, m.InitProducerIdRequest(
            transactional_id=None, transaction_timeout=datetime.timedelta(seconds=60), producer_id=-1,
            producer_epoch=-1))
        assert pid.error_code.value == 0
        ident = (pid.producer_id, pid.producer_epoch)
        assert produce(client, "first-gap", idempotent_batch(*ident, 2, [b"c"]))[0] == 59  # the gap: refused
        assert produce(client, "first-gap", idempotent_batch(*ident, 0, [b"a", b"b"])) == (0, 0)
        assert produce(client, "first-gap", idempotent_batch(*ident, 2, [b"c"])) == (0, 2)
        assert produce(client, "first-gap", idempotent_batch(*ident, 2, [b"c"])) == (0, 2)  # a retry: not again
    finally:
        client.close()
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "first-gap", "enable.auto.commit": False,
                         "enable.partition.eof": True})
    try:
        consumer.assign([TopicPartition("first-gap", 0, 0)])
        got = []
        while True:
            msg = consumer.poll(10)
            assert msg is not None, got
            if msg.error():
                break  # end of the partition
            got.append((msg.offset(), msg.value()))
    finally:
        consumer.close()
    assert got == [(0, b"a"), (1, b"b"), (2, b"c")]


class RefusingProxy:
    """A TCP proxy in front of one broker (advertised as the broker's address, so the client's every connection
    goes through it). Of the Produce requests to ``topic`` it holds the first until the next one arrives, answers
    the held one itself with NOT_LEADER_OR_FOLLOWER (what a broker answers while a new topic's leadership settles),
    then forwards the next one: a first request refused while a later one is taken."""

    def __init__(self, upstream: tuple[str, int], topic: str):
        from broker.protocol import produce_request, produce_response

        self.decode, self.encode = produce_request.decode, produce_response.encode
        self.upstream, self.topic = upstream, topic
        self.port = free_port()
        self.listener = socket.create_server(("127.0.0.1", self.port))
        self.sockets: list[socket.socket] = [self.listener]
        self.held = threading.Event()
        self.refused = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def close(self) -> None:
        for s in self.sockets:
            s.close()

    def _accept(self) -> None:
        try:
            while True:
                client, _ = self.listener.accept()
                broker = socket.create_connection(self.upstream)
                self.sockets += [client, broker]
                lock = threading.Lock()
                threading.Thread(target=self._down, args=(broker, client, lock), daemon=True).start()
                threading.Thread(target=self._up, args=(client, broker, lock), daemon=True).start()
        except OSError:
            pass

    @staticmethod
    def _down(broker: socket.socket, client: socket.socket, lock: threading.Lock) -> None:
        try:
            while data := broker.recv(65536):
                with lock:
                    client.sendall(data)
        except OSError:
            pass

    def _produce_topics(self, frame: bytes) -> tuple[int, int, list] | None:
        key, version, correlation = struct.unpack(">hhi", frame[:8])
        if key != 0:
            return None
        pos = 10 + max(struct.unpack(">h", frame[8:10])[0], 0) + (1 if version >= 9 else 0)  # client id, tags
        return version, correlation, self.decode(version, frame, pos).topic_data

    def _up(self, client: socket.socket, broker: socket.socket, lock: threading.Lock) -> None:
        held = None
        try:
            while True:
                size = _exactly(client, 4)
                frame = _exactly(client, struct.unpack(">i", size)[0])
                produce = None if self.refused.is_set() else self._produce_topics(frame)
                if produce is None or [t.name for t in produce[2]] != [self.topic]:
                    broker.sendall(size + frame)
                elif held is None:
                    held = produce
                    self.held.set()
                else:
                    version, correlation, topics = held
                    answer = self.encode(version, correlation, [(t.name, [(p.index, 6, -1, -1, "refused by the test")
                                                                           for p in t.partition_data])
                                                                for t in topics])
                    with lock:
                        client.sendall(answer)
                    self.refused.set()
                    broker.sendall(size + frame)
        except (OSError, ConnectionError):
            pass


def _exactly(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ConnectionError("closed")
        data += chunk
    return data


def test_librdkafka_whose_first_request_is_refused_while_the_next_is_taken_loses_nothing(tmp_path):
    from confluent_kafka import Producer

    broker = BrokerProcess(tmp_path / "broker", num_partitions=1)
    proxy = RefusingProxy((broker.host, broker.port), "refused-first")
    broker.settings["advertised.listeners"] = f"PLAINTEXT://127.0.0.1:{proxy.port}"
    broker.start()
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})  # kept: a collected client fails its futures
        for topic in ("warm-up", "refused-first"):
            admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
        producer = Producer({"bootstrap.servers": f"127.0.0.1:{proxy.port}", "enable.idempotence": True,
                             "acks": "all", "linger.ms": 0})
        producer.produce("warm-up", b"w")
        assert producer.flush(30) == 0  # the producer id first: afterwards one request per message
        acked, failed = {}, []

        def report(err, msg):
            if err is None:
                acked[msg.value()] = msg.offset()
            else:
                failed.append((msg.value(), err))

        producer.produce("refused-first", b"m0", on_delivery=report)
        wait_until(lambda: (producer.poll(0.05), proxy.held.is_set())[1], 30,
                   what="the first request to the topic held by the proxy")
        producer.produce("refused-first", b"m1", on_delivery=report)  # a second request, while the first waits
        wait_until(lambda: (producer.poll(0.05), proxy.refused.is_set())[1], 30,
                   what="the first request refused, the second forwarded")
        for i in range(2, 6):
            producer.produce("refused-first", b"m%d" % i, on_delivery=report)
        assert producer.flush(60) == 0 and not failed, failed
        consumer = Consumer({"bootstrap.servers": f"127.0.0.1:{proxy.port}", "group.id": "refused-first",
                             "enable.auto.commit": False, "enable.partition.eof": True})
        try:
            consumer.assign([TopicPartition("refused-first", 0, 0)])
            log = []
            while (msg := consumer.poll(10)) is not None and not msg.error():
                log.append((msg.offset(), msg.value()))
        finally:
            consumer.close()
    finally:
        broker.stop()
        proxy.close()
    assert [value for _, value in log] == [b"m%d" % i for i in range(6)], (log, acked)
    assert acked == {value: offset for offset, value in log}


def test_a_topic_created_again_under_a_running_idempotent_producer_takes_its_next_records(broker):
    from confluent_kafka import Producer

    admin = AdminClient({"bootstrap.servers": broker.bootstrap})  # kept: a collected client fails its futures
    admin.create_topics([NewTopic("again", 1, 1)])["again"].result(30)
    errors, reports = [], []
    producer = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True, "linger.ms": 5,
                         "topic.metadata.refresh.interval.ms": 1000, "error_cb": errors.append})

    def report(err, msg):
        reports.append((err, msg.value()))

    for i in range(5):
        producer.produce("again", b"a%d" % i, on_delivery=report)
    assert producer.flush(30) == 0 and [e for e, _ in reports] == [None] * 5
    admin.delete_topics(["again"])["again"].result(30)
    wait_until(lambda: "again" not in admin.list_topics(timeout=10).topics, 30, what="the topic deleted")
    admin.create_topics([NewTopic("again", 1, 1)])["again"].result(30)
    for i in range(5):
        producer.produce("again", b"b%d" % i, on_delivery=report)
    assert producer.flush(60) == 0
    assert [(e, v) for e, v in reports[5:]] == [(None, b"b%d" % i) for i in range(5)], reports
    assert not [e for e in errors if e.fatal()], [e.str() for e in errors]
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "again", "enable.auto.commit": False,
                         "enable.partition.eof": True})
    try:
        consumer.assign([TopicPartition("again", 0, 0)])
        log = []
        while (msg := consumer.poll(10)) is not None and not msg.error():
            log.append(msg.value())
    finally:
        consumer.close()
    assert log == [b"b%d" % i for i in range(5)]
