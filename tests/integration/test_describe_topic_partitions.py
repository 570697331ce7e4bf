"""DescribeTopicPartitions (key 75, KIP-966), judged by kafka-python's ``describe_topic_partitions`` and
confluent-kafka's ``describe_topics``: partitions with leaders, replicas and ISR on three brokers, pages of
``response_partition_limit`` partitions followed by their cursor, unknown topics, a cursor outside the request."""

from __future__ import annotations

import pytest
from confluent_kafka import TopicCollection
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaAdminClient

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]


def test_pages_of_partitions_with_kafka_python(cluster):
    c = cluster(3)
    admin = AdminClient({"bootstrap.servers": c.bootstrap})
    for f in admin.create_topics([NewTopic("dtp-a", 5, 2), NewTopic("dtp-b", 3, 3)]).values():
        f.result(30)
    kadmin = KafkaAdminClient(bootstrap_servers=c.bootstrap, request_timeout_ms=30000)
    try:
        whole = kadmin.describe_topic_partitions(["dtp-b", "dtp-a", "dtp-none"])
        assert whole["next_cursor"] is None
        by_name = {t["name"]: t for t in whole["topics"]}
        assert [t["name"] for t in whole["topics"]] == ["dtp-a", "dtp-b", "dtp-none"]  # in name order
        assert by_name["dtp-none"]["error_code"] == 3 and by_name["dtp-none"]["partitions"] == []
        for name, count, rf in (("dtp-a", 5, 2), ("dtp-b", 3, 3)):
            parts = by_name[name]["partitions"]
            assert [p["partition_index"] for p in parts] == list(range(count))
            for p in parts:
                state = c.state(name, p["partition_index"])
                assert len(p["replica_nodes"]) == rf and p["leader_id"] == state["leader"]
                assert sorted(p["isr_nodes"]) == sorted(state["isr"]) and p["error_code"] == 0
            assert by_name[name]["topic_id"] is not None and by_name[name]["is_internal"] is False

        # pages of 3 partitions: a, a, b — each page's cursor names where the next starts
        pages, cursor = [], None
        while True:
            page = kadmin.describe_topic_partitions(["dtp-a", "dtp-b"], response_partition_limit=3, cursor=cursor)
            pages.append([(t["name"], [p["partition_index"] for p in t["partitions"]]) for t in page["topics"]])
            cursor = page["next_cursor"]
            if cursor is None:
                break
        assert pages == [[("dtp-a", [0, 1, 2])], [("dtp-a", [3, 4]), ("dtp-b", [0])], [("dtp-b", [1, 2])]]
        bad = kadmin.describe_topic_partitions(["dtp-a"], cursor={"topic_name": "dtp-b", "partition_index": 0})
        assert [t["error_code"] for t in bad["topics"]] == [42]  # INVALID_REQUEST
    finally:
        kadmin.close()

    # confluent-kafka's describe_topics agrees (librdkafka asks Metadata or this API, whichever it prefers)
    described = admin.describe_topics(TopicCollection(["dtp-a"]))["dtp-a"].result(30)
    assert [p.id for p in described.partitions] == list(range(5))
    assert all(p.leader.id == c.state("dtp-a", p.id)["leader"] for p in described.partitions)
