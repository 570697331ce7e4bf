"""Incremental fetch sessions (KIP-227) on a real 3-broker cluster: kafka-python's consumer (which opens
sessions, unlike librdkafka and aiokafka) reads everything through incremental fetches, and the brokers' own
replica fetchers replicate through theirs, also after a leader restarts (its sessions are gone: the followers
start over). /metrics shows the sessions held."""

import time
import uuid

import pytest
import requests
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from prometheus_client.parser import text_string_to_metric_families
from support import metrics_cluster, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with metrics_cluster(tmp_path_factory.mktemp("sessions"), size=3, default_replication_factor=3) as c:
        yield c


def gauge(broker, name: str) -> float:
    body = requests.get(f"http://127.0.0.1:{broker.metrics_port}/metrics", timeout=10).text
    return sum(s.value for family in text_string_to_metric_families(body) for s in family.samples
               if s.name == name)


def log_sizes(broker, topic: str) -> dict[str, float]:
    body = requests.get(f"http://127.0.0.1:{broker.metrics_port}/metrics", timeout=10).text
    return {s.labels["partition"]: s.value for family in text_string_to_metric_families(body)
            for s in family.samples if s.name == "kafka_log_log_size" and s.labels.get("topic") == topic}


def create(cluster, topic: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 3, config={"min.insync.replicas": "2"})])[topic].result(30)


def produce(cluster, topic: str, partitions: list[int], count: int, start: int = 0) -> None:
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "linger.ms": 2})
    for i in range(start, start + count):
        producer.produce(topic, f"m{i}".encode(), partition=partitions[i % len(partitions)])
    assert producer.flush(60) == 0


def test_kafka_python_reads_everything_through_an_incremental_session(cluster, monkeypatch):
    from kafka import KafkaConsumer, TopicPartition
    from kafka.consumer import fetcher

    handled = []  # the client's own verdict on every Fetch answer: (full?, session id, accepted?)
    original = fetcher.FetchSessionHandler.handle_response

    def spy(self, response):
        full, accepted = self.next_metadata.is_full, original(self, response)
        handled.append((full, response.session_id, response.error_code, accepted))
        return accepted

    monkeypatch.setattr(fetcher.FetchSessionHandler, "handle_response", spy)

    topic = f"sess-{uuid.uuid4().hex[:6]}"
    create(cluster, topic, 6)
    produce(cluster, topic, [0, 3], 400)  # four partitions stay idle
    consumer = KafkaConsumer(bootstrap_servers=cluster.bootstrap, enable_auto_commit=False,
                             auto_offset_reset="earliest", fetch_max_wait_ms=100)
    consumer.assign([TopicPartition(topic, p) for p in range(6)])
    got: dict[int, list[bytes]] = {}

    def read_until(total: int) -> None:
        deadline = time.monotonic() + 60
        while sum(map(len, got.values())) < total and time.monotonic() < deadline:
            for tp, records in consumer.poll(timeout_ms=200).items():
                got.setdefault(tp.partition, []).extend(r.value for r in records)

    read_until(400)
    produce(cluster, topic, [5, 0], 300, start=400)  # a partition idle so far, then a busy one again
    read_until(700)
    expected: dict[int, list[bytes]] = {}
    for i in range(400):
        expected.setdefault([0, 3][i % 2], []).append(f"m{i}".encode())
    for i in range(400, 700):
        expected.setdefault([5, 0][i % 2], []).append(f"m{i}".encode())
    assert got == expected
    consumer.close()
    # every answer was one the client accepted (no session error, no partition missing from a full answer or
    # foreign to an incremental one); one full fetch per leader opened its session, every later one was
    # incremental (how many fetches there were depends on the machine's speed: a fast one reads all in a few)
    assert handled and all(accepted and error == 0 for _, _, error, accepted in handled), handled
    full = [session for is_full, session, _, _ in handled if is_full]
    incremental = [session for is_full, session, _, _ in handled if not is_full]
    assert len(full) <= len(cluster.brokers) and all(session > 0 for session in full), handled
    assert incremental and set(incremental) <= set(full), handled
    consumer.close()


def test_followers_replicate_through_sessions_and_start_over_when_a_leader_restarts(cluster):
    topic = f"repl-{uuid.uuid4().hex[:6]}"
    create(cluster, topic, 3)
    create(cluster, f"idle-{uuid.uuid4().hex[:6]}", 12)
    produce(cluster, topic, [0, 1, 2], 1500)
    # each broker leads some partitions and is fetched by the two others, each through a session of its own
    wait_until(lambda: all(gauge(b, "kafka_server_fetchsessioncache_numincrementalfetchsessions") >= 2
                           for b in cluster.brokers.values()), timeout=30, what="followers' sessions")

    def replicated() -> bool:  # every broker's copy of every partition is as long as the others
        sizes = [log_sizes(b, topic) for b in cluster.brokers.values()]
        return len(sizes[0]) == 3 and all(sizes[0].values()) and all(s == sizes[0] for s in sizes)

    wait_until(replicated, timeout=30, what="three equal copies")
    leader = cluster.state(topic, 0)["leader"]
    cluster.brokers[leader].stop()
    cluster.brokers[leader].start()
    cluster.wait_registered({0, 1, 2})
    produce(cluster, topic, [0, 1, 2], 1500, start=1500)
    # every replica of every partition holds all 3,000 records: the restarted leader's followers opened new
    # sessions with it, and it caught up as a follower through sessions of its own
    wait_until(lambda: all(len(cluster.state(topic, p)["isr"]) == 3 for p in range(3)), timeout=60,
               what="full ISRs")
    wait_until(replicated, timeout=30, what="three equal copies after the restart")
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": f"g-{uuid.uuid4().hex[:6]}",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe([topic])
    values = set()
    deadline = time.monotonic() + 60
    while len(values) < 3000 and time.monotonic() < deadline:
        for m in consumer.consume(500, 0.5):
            if not m.error():
                values.add(m.value())
    consumer.close()
    assert values == {f"m{i}".encode() for i in range(3000)}
