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
    assert live == {"zookeeper", "broker", "registry", "counter", "frontend", "lag"}
    assert offline == {"zookeeper", "broker", "registry", "mirror", "counter", "audit", "airflow", "prometheus", "lag",
                       "spark-master", "spark-worker", "postgres", "alertmanager"}
    assert sum(s.kind == "broker" for s in svcs.values()) == 6 and len(svcs) == 30
    # two writable registries in live elect their leader; every registry client is given both
    assert svcs["live-registry2"].host == "127.0.1.21" and "mode=READWRITE" in \
        svcs["live-registry2"].files["registry.properties"]
    assert "--schema-registry-url" in svcs["live-frontend1"].argv
    assert "http://127.0.1.20:8081,http://127.0.1.21:8081" in svcs["live-frontend1"].argv
    # the offline lag exporter leaves out the exactly-once mirror's group (it holds live's offsets)
    assert svcs["offline-lag-exporter"].argv[-2:] == ["--exclude-groups", "mirror-offline"]
    assert "--exclude-groups" not in svcs["live-lag-exporter"].argv
    # every broker, mirror and counter serves /metrics, and the offline Prometheus scrapes them all
    scraped = svcs["offline-prometheus"].files["prometheus.yml"]
    for s in svcs.values():
        if s.kind == "broker":
            assert f"metrics.listener=http://{s.host}:9404" in s.files["server.properties"]
        if s.kind in ("broker", "mirror", "counter", "lag"):
            assert f'"{s.host}:9404"' in scraped, s.name
    assert '"127.0.2.40:8090"' in scraped and "alerts.yml" in scraped
    # its alerts go to the datacenter's Alertmanager (scraped too), which holds them for the operators' receiver
    assert json.loads(scraped)["alerting"]["alertmanagers"][0]["static_configs"][0]["targets"] == ["127.0.2.61:9093"]
    assert '"127.0.2.61:9093"' in scraped and "offline-alertmanager" in svcs["offline-prometheus"].depends_on
    assert json.loads(svcs["offline-alertmanager"].files["alertmanager.yml"])["route"]["receiver"] == "operators"
    assert svcs["live-broker1"].host == "127.0.1.1" and svcs["offline-broker3"].host == "127.0.2.3"
    assert "mode=READONLY" in svcs["offline-registry"].files["registry.properties"]
    mirror_consumer = svcs["offline-mirror-live"].files["consumer.properties"]
    assert "127.0.1.1:9092" in mirror_consumer
    # the mirror's fetches wait for 256 KB or 100 ms (fewer copy cycles, so fewer requests offline)
    assert "fetch.min.bytes=262144\n" in mirror_consumer and "fetch.wait.max.ms=100\n" in mirror_consumer
    topo = load()
    topo["datacenters"]["offline"].update(mirror_fetch_min_bytes=1, mirror_fetch_wait_max_ms=50)
    tuned = {s.name: s for s in services(topo, "local", "/tmp/logbus-state")}["offline-mirror-live"]
    assert "fetch.min.bytes=1\n" in tuned.files["consumer.properties"]
    assert "fetch.wait.max.ms=50\n" in tuned.files["consumer.properties"]
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
    assert {s.name: s.host for s in compose}["live-broker1"] == "live-broker1"


def test_each_datacenter_runs_a_three_node_zookeeper_ensemble_its_brokers_all_list(tmp_path):
    topo = load()
    for target in ("local", "compose"):
        svcs = {s.name: s for s in services(topo, target, tmp_path)}
        for dc, network in (("live", "127.0.1"), ("offline", "127.0.2")):
            names = [f"{dc}-zookeeper{i}" for i in (1, 2, 3)]
            assert [s.name for s in svcs.values() if s.kind == "zookeeper" and s.datacenter == dc] == names
            hosts = names if target == "compose" else [f"{network}.{octet}" for octet in (10, 11, 12)]
            assert [svcs[name].host for name in names] == hosts
            members = ",".join(f"{i}={h}:2888:3888" for i, h in enumerate(hosts, 1))
            for i, name in enumerate(names, 1):
                zk = svcs[name]
                assert zk.depends_on == [] and zk.health == ("zookeeper", 2181) and zk.port == 2181
                assert zk.argv[zk.argv.index("--server-id") + 1] == str(i)
                assert zk.argv[zk.argv.index("--server") + 1] == members
                assert zk.argv[zk.argv.index("--host") + 1] == ("0.0.0.0" if target == "compose" else hosts[i - 1])
            connect = ",".join(f"{h}:2181" for h in hosts) + f"/{dc}"
            for b in (1, 2, 3):
                broker = svcs[f"{dc}-broker{b}"]
                assert broker.depends_on == names
                assert f"zookeeper.connect={connect}\n" in broker.files["server.properties"]
    text, _ = render(topo)
    assert text.count("printf srvr") == 6 and "2181:" not in text and "2888" in text  # never published


def test_one_zookeeper_node_runs_standalone_and_bad_counts_are_refused(tmp_path):
    topo = load()
    topo["datacenters"]["live"]["zookeeper"] = True
    svcs = {s.name: s for s in services(topo, "local", tmp_path)}
    zk = svcs["live-zookeeper"]
    assert zk.host == "127.0.1.10" and "--server-id" not in zk.argv and zk.health == ("zookeeper", 2181)
    assert svcs["live-broker1"].depends_on == ["live-zookeeper"]
    assert "zookeeper.connect=127.0.1.10:2181/live\n" in svcs["live-broker1"].files["server.properties"]
    assert "offline-zookeeper3" in svcs
    topo["ports"].update(zookeeper_quorum=4888, zookeeper_election=5888)
    svcs = {s.name: s for s in services(topo, "compose")}
    assert "2=offline-zookeeper2:4888:5888" in svcs["offline-zookeeper1"].argv[-1]
    for bad in ("3", -1, 1.5, 10):
        topo["datacenters"]["live"]["zookeeper"] = bad
        with pytest.raises(TopologyError, match="live: zookeeper must be true, false or a number of nodes"):
            services(topo, "local", tmp_path)
    topo["datacenters"]["live"]["zookeeper"] = False
    with pytest.raises(TopologyError, match="live-broker1 depends on live-zookeeper, which the topology does not"):
        services(topo, "local", tmp_path)


def test_checked_in_compose_files_match_the_topology():
    assert check() == [], ("run: .venv/bin/logbus compose; .venv/bin/logbus compose --topology topology/secure.json "
                           "--output docker-compose.secure.yml --config-dir docker/config-secure; .venv/bin/logbus compose "
                           "--topology topology/three-dc.json --output docker-compose.three-dc.yml --config-dir "
                           "docker/config-three-dc (then commit)")
    text, files = render(load())
    assert "offline-airflow:" in text and "127.0.0.1:8080:8080" in text and len(files) == 18


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
    topo = load()
    topo["datacenters"]["offline"]["mirror_exactly_onse"] = True  # misspelt: refused, not left at its default
    with pytest.raises(TopologyError, match="offline: unknown datacenter key 'mirror_exactly_onse'"):
        services(topo, "compose")
    topo = load()
    topo["audit_windows_ms"] = 1000
    with pytest.raises(TopologyError, match="unknown topology key 'audit_windows_ms'"):
        services(topo, "local", tmp_path)


def test_compose_publishes_every_host_port_once_and_brokers_have_an_external_listener(tmp_path):
    text, files = render(load())
    assert published_twice(text) == []
    assert published_twice(text + '    ports: ["127.0.0.1:8081:8081"]\n') == ["127.0.0.1:8081"]
    ports = [line.strip() for line in text.splitlines() if line.strip().startswith("ports:")]
    assert len(ports) == 13  # six brokers, three registries, the audit service, Airflow, Prometheus, Alertmanager
    props = files["offline-broker2/server.properties"]
    assert "listeners=INTERNAL://0.0.0.0:9092,EXTERNAL://0.0.0.0:19092\n" in props
    assert "advertised.listeners=INTERNAL://offline-broker2:9092,EXTERNAL://127.0.0.1:29093\n" in props
    assert "inter.broker.listener.name=INTERNAL\n" in props
    assert '"127.0.0.1:29093:19092"' in text
    local = {s.name: s for s in services(load(), "local", state_dir=tmp_path) if s.kind == "broker"}
    assert "listeners=PLAINTEXT://127.0.2.2:9092\n" in local["offline-broker2"].files["server.properties"]


def test_a_wan_network_puts_the_mirror_behind_the_wan_listener_of_the_source_brokers(tmp_path):
    topo = load()
    topo["datacenters"]["live"]["wan_network"] = "127.0.3"
    topo["ports"]["broker_wan"] = 9093
    svcs = {s.name: s for s in services(topo, "local", tmp_path)}
    props = svcs["live-broker2"].files["server.properties"]
    assert "listeners=PLAINTEXT://127.0.1.2:9092,WAN://127.0.1.2:9093\n" in props
    assert "advertised.listeners=PLAINTEXT://127.0.1.2:9092,WAN://127.0.3.2:9093\n" in props
    assert "inter.broker.listener.name=PLAINTEXT\n" in props
    mirror = svcs["offline-mirror-live"].files
    assert "bootstrap.servers=127.0.3.1:9093,127.0.3.2:9093,127.0.3.3:9093\n" in mirror["consumer.properties"]
    assert "bootstrap.servers=127.0.2.1:9092" in mirror["producer.properties"]  # its own datacenter: direct
    counter = svcs["live-audit-counter"].files["consumer.properties"]
    assert "127.0.1.1:9092" in counter  # inside the datacenter nothing changes
    assert "WAN" not in svcs["offline-broker1"].files["server.properties"]
    with pytest.raises(TopologyError, match="wan_network is for local topologies"):
        services(topo, "compose")


def test_the_loads_run_on_the_spark_cluster_and_airflow_on_postgres():
    svcs = {s.name: s for s in services(load(), "local", "/tmp/logbus-state")}
    airflow = svcs["offline-airflow"]
    assert {"offline-spark-master", "offline-spark-worker1", "offline-spark-worker2", "offline-postgres"} <= \
        set(airflow.depends_on)
    load_props = dict(line.split("=", 1) for line in airflow.files["load.properties"].splitlines())
    assert load_props["spark.master"] == "spark://127.0.2.70:7077" and load_props["spark.cores.max"] == "2"
    workers = [s for s in svcs.values() if s.kind == "spark-worker"]
    assert [w.argv[w.argv.index("--master") + 1] for w in workers] == ["spark://127.0.2.70:7077"] * 2
    # the password is read by a command from the database's data directory, never in the environment
    assert not [k for k in airflow.env if k.startswith("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN") and "CMD" not in k]
    assert airflow.env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN_CMD"].endswith(
        "--password-file /tmp/logbus-state/offline-postgres/data/password")
    compose = {s.name: s for s in services(load(), "compose")}
    # compose: the executors (in the workers' containers) write the warehouse the driver (Airflow's) publishes
    assert "warehouse:/var/lib/logbus/warehouse" in compose["offline-airflow"].volumes
    assert "warehouse:/var/lib/logbus/warehouse" in compose["offline-spark-worker1"].volumes
    assert "offline-postgres-data:/var/lib/logbus/offline-postgres:ro" in compose["offline-airflow"].volumes


def test_spark_and_database_choices_are_checked():
    topo = load()
    topo["datacenters"]["offline"]["spark_workers"] = "two"
    with pytest.raises(TopologyError, match="spark_workers"):
        services(topo, "local", "/tmp/x")
    topo["datacenters"]["offline"]["spark_workers"] = 0
    topo["datacenters"]["offline"]["airflow_database"] = "mysql"
    with pytest.raises(TopologyError, match="airflow_database"):
        services(topo, "local", "/tmp/x")
    topo["datacenters"]["offline"]["airflow_database"] = "sqlite"
    svcs = {s.name: s for s in services(topo, "local", "/tmp/x")}
    assert "offline-postgres" not in svcs and "offline-spark-master" not in svcs
    assert "spark.master=local[2]" in svcs["offline-airflow"].files["load.properties"]
