"""The topology definition and what comes from it: local services and the checked-in docker-compose files."""

import json

import pytest
from logbus.compose import check, published_twice, render
from logbus.topology import TopologyError, load, services

pytestmark = pytest.mark.unit


def test_default_topology_has_the_two_datacenters_of_the_issue():
    svcs = {s.name: s for s in services(load(), "local", "/tmp/logbus-state")}
    live = {s.kind for s in svcs.values() if s.datacenter == "live"}
    offline = {s.kind for s in svcs.values() if s.datacenter == "offline"}
    assert live == {"zookeeper", "broker", "registry", "counter", "frontend"}
    assert offline == {"zookeeper", "broker", "registry", "mirror", "counter", "audit", "airflow"}
    assert sum(s.kind == "broker" for s in svcs.values()) == 6
    assert svcs["live-broker1"].host == "127.0.1.1" and svcs["offline-broker3"].host == "127.0.2.3"
    assert "mode=READONLY" in svcs["offline-registry"].files["registry.properties"]
    assert "127.0.1.1:9092" in svcs["offline-mirror-live"].files["consumer.properties"]
    assert svcs["offline-airflow"].env["LOGBUS_LOAD_CONFIG"] == "/tmp/logbus-state/offline-airflow/load.properties"


def test_local_and_compose_services_are_the_same_services():
    topo = load()
    local = services(topo, "local", "/tmp/s")
    compose = services(topo, "compose")
    assert [s.name for s in local] == [s.name for s in compose]
    for a, b in zip(local, compose):
        assert (a.kind, a.datacenter, a.depends_on, a.port, a.program) == (b.kind, b.datacenter, b.depends_on,
                                                                           b.port, b.program)
        assert a.argv[0] == b.argv[0] and set(a.files) == set(b.files)
    assert compose[1].host == "live-broker1"


def test_checked_in_compose_files_match_the_topology():
    assert check() == [], "run: .venv/bin/logbus compose (then commit docker-compose.yml and docker/config)"
    text, files = render(load())
    assert "offline-airflow:" in text and "127.0.0.1:8080:8080" in text and len(files) == 14


def test_bad_topologies_are_refused(tmp_path):
    bad = tmp_path / "t.json"
    bad.write_text("{not json")
    with pytest.raises(TopologyError, match="not valid JSON"):
        load(bad)
    topo = load()
    topo["datacenters"]["offline"]["mirror_from"] = ["nowhere"]
    with pytest.raises(TopologyError, match="unknown datacenter 'nowhere'"):
        services(topo, "local", tmp_path)
    bad.write_text(json.dumps({"datacenters": {}}))
    with pytest.raises(TopologyError, match="missing 'ports'"):
        load(bad)


def test_compose_publishes_every_host_port_once_and_brokers_have_an_external_listener(tmp_path):
    text, files = render(load())
    assert published_twice(text) == []
    assert published_twice(text + '    ports: ["127.0.0.1:8081:8081"]\n') == ["127.0.0.1:8081"]
    ports = [line.strip() for line in text.splitlines() if line.strip().startswith("ports:")]
    assert len(ports) == 10  # six brokers, two registries, the audit service, Airflow
    props = files["offline-broker2/server.properties"]
    assert "listeners=INTERNAL://0.0.0.0:9092,EXTERNAL://0.0.0.0:19092\n" in props
    assert "advertised.listeners=INTERNAL://offline-broker2:9092,EXTERNAL://127.0.0.1:29093\n" in props
    assert "inter.broker.listener.name=INTERNAL\n" in props
    assert '"127.0.0.1:29093:19092"' in text
    local = {s.name: s for s in services(load(), "local", state_dir=tmp_path) if s.kind == "broker"}
    assert "listeners=PLAINTEXT://127.0.2.2:9092\n" in local["offline-broker2"].files["server.properties"]
