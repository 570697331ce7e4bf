"""Named listeners, Kafka style (issue 15): ``listeners=INTERNAL://...,EXTERNAL://...``,
``listener.security.protocol.map``, ``inter.broker.listener.name`` and per-listener ``advertised.listeners``.
A client gets the brokers' addresses of the listener it connected to; replication uses the inter-broker one."""

import uuid

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from support import BrokerProcess, ZooKeeperProcess, free_port, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


@pytest.fixture
def two_listener_cluster(tmp_path):
    zk = ZooKeeperProcess(tmp_path / "zk").start()
    brokers = []
    try:
        for i in range(3):
            b = BrokerProcess(tmp_path / f"b{i}", broker_id=i)
            b.external = free_port()
            b.settings.update({
                "listeners": f"INTERNAL://127.0.0.1:{b.port},EXTERNAL://127.0.0.1:{b.external}",
                "advertised.listeners": f"INTERNAL://127.0.0.1:{b.port},EXTERNAL://127.0.0.1:{b.external}",
                "listener.security.protocol.map": "INTERNAL:PLAINTEXT,EXTERNAL:PLAINTEXT",
                "inter.broker.listener.name": "INTERNAL",
                "zookeeper.connect": zk.connect + "/listeners", "zookeeper.session.timeout.ms": 6000,
                "replica.fetch.wait.max.ms": 100, "group.initial.rebalance.delay.ms": 0,
            })
            brokers.append(b.start())
        yield brokers
    finally:
        for b in brokers:
            b.stop()
        zk.stop()


def test_clients_see_the_addresses_of_the_listener_they_connected_to(two_listener_cluster):
    brokers = two_listener_cluster
    internal = ",".join(f"127.0.0.1:{b.port}" for b in brokers)
    external = ",".join(f"127.0.0.1:{b.external}" for b in brokers)

    def advertised(bootstrap):
        meta = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10)
        return {(m.host, m.port) for m in meta.brokers.values()}, meta.controller_id

    wait_until(lambda: len(advertised(external)[0]) == 3, 30, what="three brokers on EXTERNAL")
    ext, controller = advertised(external)
    assert ext == {("127.0.0.1", b.external) for b in brokers} and controller in (0, 1, 2)
    assert advertised(internal)[0] == {("127.0.0.1", b.port) for b in brokers}

    topic = f"lsn-{uuid.uuid4().hex[:6]}"
    admin = AdminClient({"bootstrap.servers": external})
    admin.create_topics([NewTopic(topic, 2, 3)])[topic].result(30)
    producer = Producer({"bootstrap.servers": external, "acks": "all", "enable.idempotence": True})
    for i in range(200):
        producer.produce(topic, key=str(i % 7).encode(), value=str(i).encode())
    assert producer.flush(30) == 0  # acks=all: the followers fetched over INTERNAL

    # a group through EXTERNAL: FindCoordinator must answer the coordinator's EXTERNAL address
    consumer = Consumer({"bootstrap.servers": external, "group.id": f"g-{topic}", "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    seen = []
    try:
        wait_until(lambda: seen.extend(m.value() for m in consumer.consume(500, 1) if not m.error())
                   or len(seen) >= 200, 60, what="200 records through EXTERNAL")
    finally:
        consumer.close()
    assert sorted(int(v) for v in seen) == list(range(200))
