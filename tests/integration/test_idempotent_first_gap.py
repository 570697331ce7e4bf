"""A producer's first batch in a partition cannot start past a sequence this broker refused there a moment ago
(:mod:`broker.log.refused_sequences`). The start-up loss this closes, with librdkafka: a first request to a new
topic's partition refused (NOT_LEADER_OR_FOLLOWER while its leadership settled) while the next one, a later
sequence, was taken; librdkafka then counts the first records as delivered (a later sequence acknowledged implies
the earlier ones were: ``rd_kafka_dr_implicit_ack``) and they are never sent again.

- On a real broker through the wire: a batch refused (its topic did not exist yet), then the gap behind it is
  OUT_OF_ORDER_SEQUENCE_NUMBER (45) and nothing is written; the batches in order are taken; a producer with no
  refusal starts at any sequence, as in Kafka; a real client reads them all, in order.
- With librdkafka itself, behind a proxy that holds its first Produce request to the topic until the next one is in
  flight, then lets the broker refuse it (KAFKA_STORAGE_ERROR: a full disk), then forwards the next one: every
  acknowledged record is in the log, in order (without the refusal's memory the first record is reported
  delivered and is not in the log).
- A topic deleted and created again under a running librdkafka producer: its next records start past sequence 0 in
  a partition that never saw it, and are taken, as Kafka takes them (a first version of the check, which refused
  any first batch past sequence 0 in a log that lost nothing, made that a fatal error for librdkafka)."""

import contextlib
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


def test_a_gap_behind_a_refused_first_batch_is_refused_and_the_batches_in_order_are_taken(broker):
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})  # kept: a collected client fails its futures
    client = RawClient(broker.host, broker.port)
    try:
        m = request_module(22, 4)

        def producer_id():
            pid = client.request(22, 4, m.InitProducerIdRequest(
                transactional_id=None, transaction_timeout=datetime.timedelta(seconds=60), producer_id=-1,
                producer_epoch=-1))
            assert pid.error_code.value == 0
            return pid.producer_id, pid.producer_epoch

        ident = producer_id()
        assert produce(client, "first-gap", idempotent_batch(*ident, 0, [b"a", b"b"]))[0] == 3  # no topic yet
        admin.create_topics([NewTopic("first-gap", 1, 1)])["first-gap"].result(30)
        assert produce(client, "first-gap", idempotent_batch(*ident, 2, [b"c"]))[0] == 45  # the gap: refused
        assert produce(client, "first-gap", idempotent_batch(*ident, 0, [b"a", b"b"])) == (0, 0)
        assert produce(client, "first-gap", idempotent_batch(*ident, 2, [b"c"])) == (0, 2)
        assert produce(client, "first-gap", idempotent_batch(*ident, 2, [b"c"])) == (0, 2)  # a retry: not again
        other = producer_id()  # nothing of it refused here: any first sequence, as in Kafka
        assert produce(client, "first-gap", idempotent_batch(*other, 7, [b"d"])) == (0, 3)
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
    assert got == [(0, b"a"), (1, b"b"), (2, b"c"), (3, b"d")]


class RefusingProxy:
    """A TCP proxy in front of one broker (advertised as the broker's address, so the client's every connection
    goes through it). Of the Produce requests to ``topic`` it holds the first until the next one arrives; then,
    with ``refusing()`` in force (a full disk under the broker), it forwards the held one and waits for the
    broker's answer to it (a retriable error), ends ``refusing()`` and forwards the next one: a first request refused
    by the broker while a later one reaches it."""

    def __init__(self, upstream: tuple[str, int], topic: str, refusing):
        from broker.protocol import produce_request

        self.decode = produce_request.decode
        self.upstream, self.topic, self.refusing = upstream, topic, refusing
        self.port = free_port()
        self.listener = socket.create_server(("127.0.0.1", self.port))
        self.sockets: list[socket.socket] = [self.listener]
        self.held = threading.Event()
        self.refused = threading.Event()
        self.first: dict = {}  # the held request's correlation id, version and the broker's answer to it
        self.first_answered = threading.Event()
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
                threading.Thread(target=self._down, args=(broker, client), daemon=True).start()
                threading.Thread(target=self._up, args=(client, broker), daemon=True).start()
        except OSError:
            pass

    def _down(self, broker: socket.socket, client: socket.socket) -> None:
        try:
            while True:
                size = _exactly(broker, 4)
                frame = _exactly(broker, struct.unpack(">i", size)[0])
                client.sendall(size + frame)
                if self.first and struct.unpack(">i", frame[:4])[0] == self.first["correlation"] \
                        and not self.first_answered.is_set():
                    self.first["answer"] = frame
                    self.first_answered.set()
        except (OSError, ConnectionError):
            pass

    def _produce_topics(self, frame: bytes) -> tuple[int, int, list] | None:
        key, version, correlation = struct.unpack(">hhi", frame[:8])
        if key != 0:
            return None
        pos = 10 + max(struct.unpack(">h", frame[8:10])[0], 0) + (1 if version >= 9 else 0)  # client id, tags
        return version, correlation, self.decode(version, frame, pos).topic_data

    def _up(self, client: socket.socket, broker: socket.socket) -> None:
        held = None
        try:
            while True:
                size = _exactly(client, 4)
                frame = _exactly(client, struct.unpack(">i", size)[0])
                produce = None if self.refused.is_set() else self._produce_topics(frame)
                if produce is None or [t.name for t in produce[2]] != [self.topic]:
                    broker.sendall(size + frame)
                elif held is None:
                    held = (size, frame, produce)
                    self.held.set()
                else:
                    with self.refusing():
                        self.first.update(correlation=held[2][1], version=held[2][0])
                        broker.sendall(held[0] + held[1])
                        self.first_answered.wait(30)
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
    from test_full_disk import SmallDisks, fill

    disks = SmallDisks()
    logs = disks.mount(tmp_path / "logs")

    @contextlib.contextmanager
    def disk_full():
        filler = fill(logs)
        try:
            yield
        finally:
            filler.unlink()

    broker = BrokerProcess(tmp_path / "broker", num_partitions=1, log_dirs=str(logs / "logs"))
    disks.owners.append(broker)
    proxy = RefusingProxy((broker.host, broker.port), "refused-first", disk_full)
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
        disks.close()
        proxy.close()
    from broker.protocol.codec import decode_response

    _, answer = decode_response(0, proxy.first["version"], proxy.first["answer"])
    assert [p.error_code.value for t in answer.responses for p in t.partition_responses] == [56]  # KAFKA_STORAGE_ERROR
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
    assert producer.flush(30) == 0 and [e is None for e, _ in reports] == [True] * 5
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
