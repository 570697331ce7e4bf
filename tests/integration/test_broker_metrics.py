"""The brokers' /metrics (issue 21 item 1) on a 3-broker cluster, scraped over HTTP as Prometheus does: the
numbers move with traffic (messages and bytes in per topic equal what was produced, bytes out follow a consumer,
request counts and latency histograms per API), leadership and the controller add up across brokers. A broker
killed with ``kill -9`` showing as under-replicated partitions and ISR shrinks: tests/integration/test_prometheus.py
(through a real Prometheus)."""

import time
import uuid

import pytest
import requests
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from prometheus_client.parser import text_string_to_metric_families
from support import metrics_cluster, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with metrics_cluster(tmp_path_factory.mktemp("metrics"), size=3, default_replication_factor=3) as c:
        yield c


def scrape(broker) -> dict[tuple[str, tuple], float]:
    """Every sample of one broker's /metrics: (name, sorted labels) -> value."""
    body = requests.get(f"http://127.0.0.1:{broker.metrics_port}/metrics", timeout=10).text
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(body) for s in family.samples}


def total(cluster, name: str, **labels) -> float:
    want = set(labels.items())
    return sum(v for b in cluster.brokers.values() if b.alive() for (n, ls), v in scrape(b).items()
               if n == name and want <= set(ls))


def test_metrics_move_with_traffic(cluster):
    topic = f"m-{uuid.uuid4().hex[:6]}"
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(topic, 3, 3)])[topic].result(30)
    produces_before = total(cluster, "kafka_network_requestmetrics_requests_total", request="Produce")
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "linger.ms": 5})
    payload = b"x" * 100
    for i in range(1000):
        producer.produce(topic, payload, str(i).encode())
    assert producer.flush(30) == 0
    assert total(cluster, "kafka_server_brokertopicmetrics_messagesin_total", topic=topic) == 1000
    assert total(cluster, "kafka_server_brokertopicmetrics_bytesin_total", topic=topic) > 1000 * 100
    assert total(cluster, "kafka_network_requestmetrics_requests_total", request="Produce") > produces_before
    # the latency histogram: every Produce answered is counted in +Inf, none below 0
    assert total(cluster, "kafka_network_requestmetrics_totaltime_seconds_bucket", request="Produce", le="+Inf") \
        == total(cluster, "kafka_network_requestmetrics_totaltime_seconds_count", request="Produce")
    # followers fetched the records: replication bytes out on the leaders
    wait_until(lambda: total(cluster, "kafka_server_brokertopicmetrics_replicationbytesout_total", topic=topic)
               >= 2 * 1000 * 100, 20, what="both followers' copies counted")
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "m", "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    seen = 0
    deadline = time.monotonic() + 30
    while seen < 1000 and time.monotonic() < deadline:
        m = consumer.poll(0.5)
        if m is not None and not m.error():
            seen += 1
    consumer.close()
    assert seen == 1000
    assert total(cluster, "kafka_server_brokertopicmetrics_bytesout_total", topic=topic) > 1000 * 100
    # the cluster's shape adds up: one active controller, each partition led once, logs on all three
    assert total(cluster, "kafka_controller_kafkacontroller_activecontrollercount") == 1
    assert total(cluster, "kafka_server_replicamanager_underreplicatedpartitions") == 0
    assert total(cluster, "kafka_controller_kafkacontroller_offlinepartitionscount") == 0
    assert total(cluster, "kafka_log_log_size", topic=topic) > 3 * 1000 * 100  # three copies
    assert total(cluster, "kafka_server_socketservermetrics_connection_count") > 0
