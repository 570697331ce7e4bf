"""Names clients choose that become paths: topic names matched whole, group and member ids encoded as znodes."""

import pytest
from broker.cluster.znodes import node_name
from broker.metadata.topics import TopicError, validate_topic_name

pytestmark = [pytest.mark.unit, pytest.mark.timeout(10)]


@pytest.mark.parametrize("name", ["abc\n", "abc\r", "a b", "x" * 250, "", ".", "..", "a/b", "ünï"])
def test_bad_topic_names_are_refused(name):
    with pytest.raises(TopicError):
        validate_topic_name(name)


def test_good_topic_names_pass():
    for name in ("page-views", "a.b_c-1", "x" * 249):
        validate_topic_name(name)


def test_node_names_encode_what_zookeeper_paths_cannot_hold():
    assert node_name("reports") == "reports" and node_name("rdkafka-1f2e") == "rdkafka-1f2e"  # unchanged
    assert node_name("g/offsets/x") == "g%2Foffsets%2Fx"
    assert node_name("100%") == "100%25"
    assert node_name(".") == "%2E" and node_name("..") == "%2E%2E" and node_name("...") == "..."
    assert node_name("a\nb") == "a%0Ab" and node_name("a\x00") == "a%00"
    assert node_name("\ue000") == "%EE%80%80"  # private use: refused by ZooKeeper's path check
    encoded = {node_name(n) for n in ("g/x", "g%2Fx", "g", "g/", "g%")}
    assert len(encoded) == 5  # no two names share a node
    assert all("/" not in e for e in encoded)
