"""Two writable registry instances elect one leader through Kafka's group protocol (as Confluent's registry):
writes sent to either reach the leader (forwarded), reads are answered by both. ``kill -9`` of the leader during
registrations: the other instance takes the writes within its session timeout, reads never fail, and the ids the
clients were given run 1..N with none reused or skipped. The killed instance comes back as a follower."""

from __future__ import annotations

import json
import threading
import time

import pytest
import requests
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from support import RegistryProcess, free_port, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]


def schema(i: int) -> str:
    return json.dumps({"type": "record", "name": f"Event{i}", "fields": [{"name": "n", "type": "long"}]})


def status(url: str) -> dict:
    return requests.get(f"{url}/status", timeout=10).json()


def scrape(r: RegistryProcess) -> dict[str, float]:
    """The registry's /metrics, ``name{labels}`` -> value."""
    text = requests.get(f"{r.settings['metrics.listener']}/metrics", timeout=10).text
    return {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
            if line and not line.startswith("#")}


def leader_of(*urls: str) -> str | None:
    """The URL every instance names as leader, once they agree."""
    seen = {status(u).get("leader") for u in urls}
    return seen.pop() if len(seen) == 1 else None


@pytest.fixture
def pair(tmp_path, fresh_broker):
    broker = fresh_broker(group_initial_rebalance_delay_ms=0).start()
    made = [RegistryProcess(tmp_path / f"r{i}", broker.bootstrap, kafkastore_topic_replication_factor="1",
                            metrics_listener=f"http://127.0.0.1:{free_port()}") for i in (1, 2)]
    for r in made:
        r.start()
    yield made
    for r in made:
        r.stop()


def test_writes_reach_the_leader_from_either_instance(pair):
    a, b = pair
    wait_until(lambda: leader_of(a.url, b.url) is not None, 30, interval=0.5, what="one leader")
    leader = leader_of(a.url, b.url)
    follower = b if leader == a.url else a
    assert status(follower.url)["is_leader"] is False and status(leader)["is_leader"] is True
    # through the follower: forwarded, and readable there at once (read-your-write)
    r = requests.post(f"{follower.url}/subjects/a%2Fb-value/versions", json={"schema": schema(1)}, timeout=30)
    assert r.status_code == 200 and r.json()["id"] == 1 and r.json()["version"] == 1, r.text
    assert requests.get(f"{follower.url}/subjects/a%2Fb-value/versions", timeout=10).json() == [1]
    assert requests.get(f"{leader}/schemas/ids/1", timeout=10).status_code == 200
    # the follower forwards the caller's errors unchanged, and admin writes too
    bad = requests.post(f"{follower.url}/subjects/x-value/versions", json={"schema": "{not json"}, timeout=30)
    assert bad.status_code == 422 and bad.json()["error_code"] == 42201, bad.text
    assert requests.put(f"{follower.url}/config/a%2Fb-value", json={"compatibility": "FULL"},
                        timeout=30).json() == {"compatibility": "FULL"}
    assert requests.get(f"{follower.url}/config/a%2Fb-value", timeout=10).json() == {"compatibilityLevel": "FULL"}
    # the DEK registry's writes too: a KEK and a DEK created through the follower, read there at once
    kek = {"name": "k1", "kmsType": "local-kms", "kmsKeyId": "local-kms://k1"}
    assert requests.post(f"{follower.url}/dek-registry/v1/keks", json=kek, timeout=30).status_code == 200
    dek = requests.post(f"{follower.url}/dek-registry/v1/keks/k1/deks/a%2Fb-value",
                        json={"encryptedKeyMaterial": "AAAA"}, timeout=30)
    assert dek.status_code == 200 and dek.json()["version"] == 1, dek.text
    assert requests.get(f"{follower.url}/dek-registry/v1/keks/k1/deks", timeout=10).json() == ["a/b-value"]
    assert requests.get(f"{leader}/dek-registry/v1/keks/k1/deks/a%2Fb-value/versions", timeout=10).json() == [1]
    assert status(follower.url)["forwarded"] >= 5
    # Confluent's client with both URLs
    client = SchemaRegistryClient({"url": f"{follower.url},{leader}"})
    assert client.register_schema("c-value", Schema(schema(2), "AVRO")) == 2
    # the metrics: the leader's role, forwarded writes, requests by route template and status
    on_follower, on_leader = scrape(follower), scrape(a if leader == a.url else b)
    assert on_leader["schema_registry_master_slave_role"] == 1 and on_follower["schema_registry_master_slave_role"] == 0
    assert on_follower["schema_registry_forwarded_requests_total"] >= 3
    assert on_leader['schema_registry_requests_total{method="POST",route="/subjects/{subject:path}/versions",'
                     'status="200"}'] >= 2
    assert on_follower['schema_registry_requests_total{method="GET",route="/status",status="200"}'] >= 1
    assert on_leader['schema_registry_schemas{type="avro"}'] == 2 and on_leader['schema_registry_schemas{type="json"}'] == 0


def test_kill_the_leader_during_registrations(pair):
    a, b = pair
    wait_until(lambda: leader_of(a.url, b.url) is not None, 30, interval=0.5, what="one leader")
    leader = a if leader_of(a.url, b.url) == a.url else b
    survivor = b if leader is a else a
    given: dict[int, int] = {}  # schema number -> id the client was given
    read_failures: list = []
    stop = threading.Event()

    def read_all_along():
        while not stop.is_set():
            try:
                r = requests.get(f"{survivor.url}/schemas/ids/1", timeout=10)
                if r.status_code != 200:
                    read_failures.append(r.status_code)
            except requests.RequestException as exc:
                read_failures.append(repr(exc))
            time.sleep(0.05)

    def register(i: int, deadline: float) -> tuple[int, float]:
        """Register schema i through both instances (the way a client with two URLs retries) until it works."""
        while time.monotonic() < deadline:
            for url in (leader.url, survivor.url):
                try:
                    r = requests.post(f"{url}/subjects/events-value/versions", json={"schema": schema(i)},
                                      timeout=15)
                except requests.RequestException:
                    continue
                if r.status_code == 200:
                    return r.json()["id"], time.monotonic()
                assert r.json()["error_code"] in (50002, 50003, 50004), r.text  # retriable, nothing else
            time.sleep(0.2)
        raise AssertionError(f"schema {i} not registered in time")

    reader = threading.Thread(target=read_all_along, daemon=True)
    requests.put(f"{leader.url}/config/events-value", json={"compatibility": "NONE"}, timeout=30)
    given[0], _ = register(0, time.monotonic() + 30)
    reader.start()
    try:
        for i in range(1, 15):
            given[i], _ = register(i, time.monotonic() + 30)
        killed_at = time.monotonic()
        leader.proc.kill()  # kill -9 mid-stream: the next registrations find no leader for a while
        leader.proc.wait(10)
        first_after = None
        for i in range(15, 40):
            given[i], at = register(i, time.monotonic() + 60)
            first_after = first_after or at
        assert first_after - killed_at < 45, "writes did not move to the surviving instance"
        assert status(survivor.url)["is_leader"] is True
        # the killed instance returns as a follower: the leader stays, writes through it are forwarded
        leader.start()
        wait_until(lambda: status(leader.url).get("leader") == survivor.url, 60, interval=0.5,
                   what="the restarted instance following the survivor")
        given[40], _ = register(40, time.monotonic() + 30)
    finally:
        stop.set()
        reader.join(15)
    assert not read_failures, read_failures[:5]
    ids = [given[i] for i in sorted(given)]
    assert ids == list(range(1, len(ids) + 1)), ids  # one new id per new schema, in order: none reused or skipped
    versions = requests.get(f"{survivor.url}/subjects/events-value/versions", timeout=10).json()
    assert versions == list(range(1, len(ids) + 1))
    for i, sid in given.items():  # every id names the schema its client registered, on both instances
        for url in (survivor.url, leader.url):
            got = requests.get(f"{url}/schemas/ids/{sid}", timeout=10)
            assert json.loads(got.json()["schema"])["name"] == f"Event{i}"
