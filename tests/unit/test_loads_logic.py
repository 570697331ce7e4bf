"""Load-job logic without Spark or brokers: offset planning, the source's options, config, Avro → Spark types."""

import pytest

from spark_jobs.config import LoadConfig, LoadConfigError
from spark_jobs.decode import avro_to_spark, table_schema
from spark_jobs.source import SourceError, _decoding, normalize, parse_offsets, plan_ranges

pytestmark = pytest.mark.unit


class FakeCluster:
    def __init__(self, logs):
        self.logs = logs  # {topic: {partition: (low, high)}}

    def topics(self):
        return {t: list(parts) for t, parts in self.logs.items()}

    def __call__(self, topic, partition):
        return self.logs[topic][partition]


def test_plan_ranges_resolves_earliest_latest_json_and_patterns():
    cluster = FakeCluster({"pv": {0: (0, 10), 1: (5, 20)}, "clicks": {0: (0, 0)}, "_audit": {0: (0, 3)}})
    assert plan_ranges({"subscribe": "pv"}, cluster) == [("pv", 0, 0, 10), ("pv", 1, 5, 20)]
    assert plan_ranges({"subscribe": "pv", "startingOffsets": '{"pv": {"1": 7}}', "endingOffsets": "latest"},
                       cluster) == [("pv", 0, 0, 10), ("pv", 1, 7, 20)]
    assert plan_ranges({"subscribePattern": "p.|clicks", "startingOffsets": "latest"}, cluster) == []
    assert plan_ranges({"subscribe": "pv", "endingOffsets": '{"pv": {"0": 4, "1": -2}}'}, cluster) == [
        ("pv", 0, 0, 4)]
    # assign: the named partitions only (the load names what it planned; a subscribed topic's unnamed partitions
    # would be read from earliest to latest)
    assert plan_ranges({"assign": '{"pv": [1]}', "startingOffsets": '{"pv": {"1": 7}}',
                        "endingOffsets": '{"pv": {"1": 9}}'}, cluster) == [("pv", 1, 7, 9)]
    for options, message in (({"subscribe": "nope"}, "unknown topic 'nope'"),
                             ({}, "assign, subscribe or subscribePattern"),
                             ({"assign": '{"pv": [2]}'}, r"unknown topic partition pv\[2\]"),
                             ({"assign": '{"nope": [0]}'}, r"unknown topic partition nope\[0\]"),
                             ({"assign": '["pv"]'}, "assign must be JSON"),
                             ({"assign": '{"pv": [0]}', "subscribe": "pv"}, "only one of the options"),
                             ({"subscribe": "pv", "startingOffsets": '{"pv": {"1": 2}}'}, r"outside the log"),
                             ({"subscribe": "pv", "startingOffsets": "soon"}, "startingOffsets must be")):
        with pytest.raises(SourceError, match=message):
            plan_ranges(options, cluster)
    assert parse_offsets("earliest", -1, "x") == (-2, {})
    assert normalize({"startingoffsets": "latest", "kafka.fetch.min.bytes": "1"}) == {
        "startingOffsets": "latest", "kafka.fetch.min.bytes": "1"}


def test_load_config_defaults_and_errors(tmp_path):
    c = LoadConfig({"bootstrap.servers": "b:1", "schema.registry.url": "http://r", "warehouse.path": str(tmp_path),
                    "audit.cluster.live.bootstrap.servers": "l:1", "spark.executor.memory": "1g"})
    assert c.warehouse == tmp_path.resolve().as_uri() and c.master == "local[2]" and c.driver_master == "local[1]"
    assert c.tiers == ["live", "warehouse"] and c.spark == {"spark.executor.memory": "1g"}
    assert c.wants("page-views") and not c.wants("_audit")
    for values, message in (({"bootstrap.servers": "b"}, "schema.registry.url is required"),
                            ({"bootstrap.servers": "b", "schema.registry.url": "r", "warehouse.path": "w",
                              "topic": "x"}, "unknown config key 'topic'"),
                            ({"bootstrap.servers": "b", "schema.registry.url": "r", "warehouse.path": "w",
                              "audit.window.ms": "1m"}, "integer")):
        with pytest.raises(LoadConfigError, match=message):
            LoadConfig(values)


def test_avro_schemas_become_spark_columns():
    schema = {"type": "record", "name": "E", "fields": [
        {"name": "id", "type": "long"}, {"name": "ref", "type": ["null", "string"]},
        {"name": "either", "type": ["int", "string"]},
        {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "kind", "type": {"type": "enum", "name": "K", "symbols": ["A"]}},
        {"name": "tags", "type": {"type": "map", "values": "int"}},
        {"name": "inner", "type": {"type": "record", "name": "I", "fields": [{"name": "x", "type": "double"}]}},
        {"name": "again", "type": "I"}]}
    t, nullable = avro_to_spark(schema)
    assert not nullable
    assert t.simpleString() == ("struct<id:bigint,ref:string,either:string,at:timestamp,kind:string,"
                                "tags:map<string,int>,inner:struct<x:double>,again:struct<x:double>>")
    cols = [f.name for f in table_schema(schema).fields]
    assert cols[:8] == ["id", "ref", "either", "at", "kind", "tags", "inner", "again"]
    assert {"_partition", "_offset", "_producer", "_seq", "_error", "_value"} <= set(cols)


def test_value_format_options():
    assert _decoding({}) is None and _decoding({"valueFormat": "binary"}) is None
    assert _decoding({"valueFormat": "confluent-avro", "schema.registry.url": "http://r",
                      "valueSchema": '{"type": "string"}'}) == ({"url": "http://r"}, {"type": "string"})
    secured = {"valueFormat": "confluent-avro", "schema.registry.url": "https://r",
               "schema.registry.basic.auth.user.info": "loads:pw", "schema.registry.ssl.ca.location": "/ca.pem"}
    assert _decoding(secured)[0] == {"url": "https://r", "basic.auth.user.info": "loads:pw",
                                     "ssl.ca.location": "/ca.pem"}
    assert _decoding({"valueFormat": "confluent-avro", "schema.registry.url": "http://r", "valueSchema": "null"}) == (
        {"url": "http://r"}, None)
    for options, message in (({"valueFormat": "json"}, "binary or confluent-avro"),
                             ({"valueFormat": "confluent-avro"}, "schema.registry.url"),
                             ({"valueFormat": "confluent-avro", "schema.registry.url": "r", "valueSchema": "{"},
                              "valueSchema")):
        with pytest.raises(SourceError, match=message):
            _decoding(options)
    assert normalize({"valueformat": "confluent-avro"}) == {"valueFormat": "confluent-avro"}


def test_the_dags_plan_and_reconcile_start_no_spark_on_a_local_warehouse_and_the_driver_master_elsewhere(
        tmp_path, monkeypatch):
    """On a cluster every session launches an executor per worker: the plan and reconcile tasks, whose work is
    the driver's, take ``load.driver.master``; the load task takes ``spark.master``. On a ``file://`` warehouse
    plan and reconcile start no session at all (their Warehouse works on plain files)."""
    from spark_jobs import dag
    from spark_jobs import load as cycle

    config = tmp_path / "load.properties"
    config.write_text(f"bootstrap.servers=b:1\nschema.registry.url=http://r\nwarehouse.path={tmp_path}\n"
                      "spark.master=spark://m:7077\n")
    monkeypatch.setenv("LOGBUS_LOAD_CONFIG", str(config))
    masters, given = [], []

    class Session:
        def __init__(self, config, master=None):
            masters.append(master or config.master)

        def stop(self):
            pass

    monkeypatch.setattr(cycle, "session", Session)
    monkeypatch.setattr(cycle, "plan_step", lambda spark, config: given.append(spark) or {"load_id": 1, "ranges": {}})
    monkeypatch.setattr(cycle, "load_step", lambda spark, config, planned: given.append(spark) or {"load_id": 1})
    monkeypatch.setattr(cycle, "reconcile_step", lambda spark, config: given.append(spark) or {"rows": []})
    dag.load_step(dag.plan_step())
    dag.reconcile_step()
    assert masters == ["spark://m:7077"] and given[0] is None and given[2] is None
    assert isinstance(given[1], Session)
    config.write_text(config.read_text().replace(f"warehouse.path={tmp_path}", "warehouse.path=hdfs://nn:8020/wh"))
    masters.clear()
    dag.load_step(dag.plan_step())
    dag.reconcile_step()
    assert masters == ["local[1]", "spark://m:7077", "local[1]"]
    config.write_text(config.read_text() + "load.driver.master=spark://m:7077\n")
    dag.plan_step()
    assert masters[-1] == "spark://m:7077"
