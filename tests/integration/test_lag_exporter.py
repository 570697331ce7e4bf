"""``logbus lag-exporter`` (issue 21 item 3, "the same numbers appear as metrics"): against a real broker, a group's
``kafka_consumergroup_lag`` per partition equals log end minus committed offset as kafka-python and confluent-kafka
each see them, the sum and the member count follow, excluded groups are left out, and a bad listener is a
one-line error."""

import os
import subprocess
import sys
import time

import pytest
import requests
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from prometheus_client.parser import text_string_to_metric_families
from support import REPO, BrokerProcess, free_port, terminate, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(90)]


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    b = BrokerProcess(tmp_path_factory.mktemp("lag"), group_initial_rebalance_delay_ms=0).start()
    yield b
    b.stop()


def scrape(port: int) -> dict:
    http = requests.Session()
    http.trust_env = False
    body = http.get(f"http://127.0.0.1:{port}/metrics", timeout=20).text
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for f in text_string_to_metric_families(body) for s in f.samples}


def test_lag_per_partition_equals_log_end_minus_committed(broker, tmp_path):
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic("lagged", 2, 1)])["lagged"].result(20)
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(100):
        producer.produce("lagged", str(i).encode(), partition=i % 2)
    assert producer.flush(20) == 0
    # group "readers" commits 30 and 10; "mirror-offline" is excluded; a member stays in "readers"
    for group, offsets in (("readers", {0: 30, 1: 10}), ("mirror-offline", {0: 1, 1: 1})):
        c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group, "enable.auto.commit": False})
        c.commit(offsets=[TopicPartition("lagged", p, o) for p, o in offsets.items()], asynchronous=False)
        c.close()
    member = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "readers", "enable.auto.commit": False,
                       "auto.offset.reset": "latest"})
    member.subscribe(["lagged"])
    wait_until(lambda: member.poll(0.2) is None and member.assignment(), 30, interval=0, what="a member joined")

    port = free_port()
    env = dict(os.environ, PYTHONPATH=str(REPO / "platform"))
    proc = subprocess.Popen([sys.executable, "-m", "logbus.cli", "lag-exporter", "--bootstrap-server",
                             broker.bootstrap, "--metrics-listener", f"http://127.0.0.1:{port}",
                             "--exclude-groups", "mirror-.*"], env=env, stderr=subprocess.PIPE)
    try:
        def ready():
            try:
                return scrape(port)
            except requests.ConnectionError:
                return None

        samples = wait_until(ready, 30, interval=0.5, what="the exporter's /metrics")
        lag = {int(dict(k)["partition"]): v for (n, k), v in samples.items()
               if n == "kafka_consumergroup_lag" and dict(k)["consumergroup"] == "readers"}
        # confluent-kafka's view: committed offsets and watermarks
        view = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "readers"})
        committed = {tp.partition: tp.offset for tp in view.committed(
            [TopicPartition("lagged", 0), TopicPartition("lagged", 1)], timeout=20)}
        ends = {p: view.get_watermark_offsets(TopicPartition("lagged", p), timeout=20)[1] for p in (0, 1)}
        view.close()
        assert lag == {p: ends[p] - committed[p] for p in (0, 1)} == {0: 20, 1: 40}
        # kafka-python's view
        from kafka import KafkaAdminClient, KafkaConsumer
        from kafka.structs import TopicPartition as KpTopicPartition

        kp_admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
        kp_offsets = kp_admin.list_group_offsets("readers")["readers"]
        kp_committed = {tp.partition: meta.offset for tp, meta in kp_offsets.items()}
        kp_admin.close()
        kp = KafkaConsumer(bootstrap_servers=broker.bootstrap)
        kp_ends = {tp.partition: o for tp, o in kp.end_offsets([KpTopicPartition("lagged", 0),
                                                               KpTopicPartition("lagged", 1)]).items()}
        kp.close()
        assert lag == {p: kp_ends[p] - kp_committed[p] for p in (0, 1)}
        assert samples[("kafka_consumergroup_lag_sum", (("consumergroup", "readers"),))] == 60
        assert samples[("kafka_consumergroup_members", (("consumergroup", "readers"),))] == 1
        assert not any(dict(k).get("consumergroup") == "mirror-offline" for _, k in samples)
        # the numbers move: 10 more records on partition 1
        for i in range(10):
            producer.produce("lagged", b"more", partition=1)
        producer.flush(20)
        time.sleep(2.1)  # past the exporter's 2 s cache
        assert wait_until(lambda: scrape(port)[("kafka_consumergroup_lag", (("consumergroup", "readers"),
                                                                          ("partition", "1"), ("topic", "lagged")))]
                          == 50, 20, interval=0.5, what="the lag following the log end")
    finally:
        member.close()
        terminate(proc)
    bad = subprocess.run([sys.executable, "-m", "logbus.cli", "lag-exporter", "--bootstrap-server", broker.bootstrap,
                          "--metrics-listener", "ftp://x"], env=env, capture_output=True, text=True, timeout=30)
    assert bad.returncode == 2 and bad.stderr.strip().count("\n") == 0
