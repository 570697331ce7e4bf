"""Pure parts of CreatePartitions: Kafka's checks of one entry, the placement of new partitions, the standalone
topic store, and the CLI's parsing (``logbus topics alter`` / ``--alter``)."""

import json

import pytest
from broker.cluster.placement import PlacementError, assign_new_partitions, assign_replicas
from broker.metadata.topics import TopicError, TopicStore, check_new_partitions
from logbus.admin import AdminError, parse_replica_assignment
from logbus.cli import build_parser

pytestmark = pytest.mark.unit


def refused(code: str, *args) -> str:
    with pytest.raises(TopicError) as err:
        check_new_partitions(*args)
    assert err.value.error == code
    return str(err.value)


def test_the_count_must_grow_with_kafkas_messages():
    assert refused("invalid_partitions", 5, 3, None, 1, {0}) == \
        "Topic currently has 5 partitions, which is higher than the requested 3."
    assert refused("invalid_partitions", 5, 5, None, 1, {0}) == "Topic already has 5 partitions."
    assert refused("invalid_partitions", 5, -1, None, 1, {0}).startswith("Topic currently has 5 partitions")
    assert check_new_partitions(5, 6, None, 1, {0}) is None  # placement left to the broker


def test_a_manual_assignment_names_each_new_partition_with_registered_distinct_brokers():
    assert check_new_partitions(2, 4, [[1, 0], [2, 1]], 2, {0, 1, 2}) == {2: [1, 0], 3: [2, 1]}
    assert refused("invalid_replica_assignment", 2, 4, [[1, 7], [2, 9]], 2, {0, 1, 2}) == \
        "Unknown broker(s) in replica assignment: 7, 9."
    assert refused("invalid_replica_assignment", 2, 4, [[1, 0]], 2, {0, 1, 2}) == \
        "Increasing the number of partitions by 2 but 1 assignments provided."
    assert refused("invalid_replica_assignment", 2, 3, [[1, 1]], 2, {0, 1, 2}) == \
        "Duplicate brokers not allowed in replica assignment: 1, 1 for partition id 2."
    assert refused("invalid_replica_assignment", 2, 3, [[]], 2, {0, 1, 2}) == \
        "Cannot have replication factor of 0 for partition id 2."
    assert refused("invalid_replica_assignment", 2, 4, [[0], [0, 1]], 2, {0, 1, 2}) == (
        "Inconsistent replication factor between partitions, partition 0 has 2 while partitions [2] have "
        "replication factors [1], respectively.")


def test_new_partitions_continue_the_topics_round_robin():
    existing = assign_replicas([0, 1, 2], 3, 2, start_index=1, start_shift=1)  # partition 0 led by broker 1
    grown = assign_new_partitions([2, 0, 1], existing, 9)
    assert sorted(grown) == list(range(3, 9))
    both = {**existing, **grown}
    assert [both[p][0] for p in range(9)] == [1, 2, 0] * 3  # leaders carry on where the topic left off
    assert all(len(set(r)) == 2 for r in grown.values())
    # the same as placing all nine at once with the topic's start
    assert both == assign_replicas([0, 1, 2], 9, 2, start_index=1, start_shift=1)


def test_new_partitions_when_partition_0s_leader_is_gone_or_brokers_are_too_few():
    grown = assign_new_partitions([0, 2, 3], {0: [1, 0]}, 4)  # broker 1 is gone: start at the next id up (2)
    assert [grown[p][0] for p in (1, 2, 3)] == [3, 0, 2]
    assert assign_new_partitions([0, 1], {0: [5, 0]}, 2) == {1: [1, 0]}  # no id above 5: the first broker
    with pytest.raises(PlacementError, match="replication factor 3"):
        assign_new_partitions([0, 1], {0: [0, 1, 2]}, 2)


def test_the_standalone_store_keeps_the_new_count(tmp_path):
    store = TopicStore(str(tmp_path))
    info = store.create("t", 2, 1, {})
    store.add_partitions("t", 5)
    saved = json.loads((tmp_path / TopicStore.FILE).read_text())
    assert saved[0]["partitions"] == 5
    again = TopicStore(str(tmp_path)).get("t")
    assert again.partitions == 5 and again.topic_id == info.topic_id


def test_a_full_disk_leaves_the_count_as_it_was(tmp_path):
    store = TopicStore(str(tmp_path))
    store.create("t", 2, 1, {})
    (tmp_path / TopicStore.FILE).unlink()
    (tmp_path / TopicStore.FILE).mkdir()  # the file cannot be replaced (an OSError, as from a full disk)
    with pytest.raises(TopicError) as err:
        store.add_partitions("t", 5)
    assert err.value.error == "kafka_storage_error" and store.get("t").partitions == 2


def test_the_cli_takes_alter_as_a_verb_or_as_kafka_topics_flag():
    parser = build_parser()
    verb = parser.parse_args(["topics", "alter", "--bootstrap-server", "b:1", "--topic", "t", "--partitions", "4"])
    flag = parser.parse_args(["topics", "--alter", "--bootstrap-server", "b:1", "--topic", "t", "--partitions", "4"])
    assert (verb.action, verb.action_flag) == ("alter", None) and (flag.action, flag.action_flag) == (None, "alter")
    assert verb.partitions == flag.partitions == 4
    with pytest.raises(SystemExit):
        parser.parse_args(["topics", "--alter", "--list", "--bootstrap-server", "b:1"])
    assert parse_replica_assignment("0:1,1:2,2") == [[0, 1], [1, 2], [2]]
    with pytest.raises(AdminError, match="expected broker ids"):
        parse_replica_assignment("0:x")
