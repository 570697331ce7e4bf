"""``topology/secure.json`` as a user runs it: ``logbus up`` on a fresh state directory (security-init makes the CA,
certificates, passwords, SCRAM users and ACLs), every service healthy over SASL_SSL and HTTPS with its own
principal, the demo frontends' audited traffic complete at live and offline (audit service, behind its login), a
schema on the primary registry read back from the read-only one with credentials, and one load through Airflow
complete at every tier. Then the outside view: a PLAINTEXT client and a wrong password get nowhere, a principal
gets Kafka's authorization errors outside its ACLs, the registry answers 401 without credentials and 403 to a
read-only user's write; ``logbus down`` leaves no process behind.

Smaller than the default topology to keep CI short: one ZooKeeper node per datacenter (the ensemble is the
default e2e test's business), three brokers each (transactions and min.insync.replicas as in production)."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest
import requests
from chaos import logbus
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from support import REPO, wait_until
from topology_checks import SMALL_WINDOWS, airflow_token, check_complete, fresh_loopback, run_dag, wait_recovered

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(1200)]


def password(secrets: Path, principal: str) -> str:
    return (secrets / f"{principal}.properties").read_text().split("=", 1)[1].strip()


def client(bootstrap: str, secrets: Path, principal: str, secret: str | None = None, **extra) -> dict:
    return {"bootstrap.servers": bootstrap, "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.username": principal, "sasl.password": secret if secret is not None else password(secrets, principal),
            "ssl.ca.location": str(secrets / "ca.pem"), **extra}


def test_secure_topology(tmp_path):
    from logbus.local import leftovers

    topo = json.loads((REPO / "topology" / "secure.json").read_text())
    net = fresh_loopback(topo)
    for dc in ("live", "offline"):
        topo["datacenters"][dc]["zookeeper"] = 1
    topo.update(SMALL_WINDOWS)
    (tmp_path / "topology.json").write_text(json.dumps(topo))
    state = tmp_path / "state"
    secrets = state / "secrets"
    out = None
    try:
        out = logbus("up", "--topology", str(tmp_path / "topology.json"), "--state-dir", str(state))
        assert out.returncode == 0, out.stdout + out.stderr
        assert "security-init            done" in out.stdout, out.stdout
        status = json.loads(logbus("status", "--json", "--state-dir", str(state)).stdout)
        assert status["healthy"], [s["name"] for s in status["services"] if not s["healthy"]]
        # nothing secret in any config the topology wrote; the secrets are 0600 files of their own
        for path in (p for p in state.glob("*/*.properties") if p.parent != secrets):
            assert 'password="${file:' in path.read_text() or "password" not in path.read_text(), path
        assert all(oct(p.stat().st_mode & 0o777) == "0o600" for p in secrets.glob("*.properties"))

        ca = str(secrets / "ca.pem")
        admin = requests.Session()
        admin.auth, admin.verify = ("admin", password(secrets, "admin")), ca
        admin.trust_env = False  # REQUESTS_CA_BUNDLE (a proxy's CA here) would win over verify
        live_registry = f"https://127.{net}.1.20:{topo['ports']['registry']}"
        offline_registry = f"https://127.{net}.2.20:{topo['ports']['registry']}"
        audit = f"https://127.{net}.2.40:{topo['ports']['audit']}"
        airflow = f"http://127.{net}.2.50:{topo['ports']['airflow']}"

        # the registries: HTTPS, BASIC, roles
        assert requests.get(f"{live_registry}/subjects", verify=ca, timeout=30).status_code == 401
        schema = {"type": "record", "name": "Signup", "fields": [{"name": "member_id", "type": "long"}]}
        r = admin.post(f"{live_registry}/subjects/signups-value/versions", json={"schema": json.dumps(schema)},
                       timeout=30)
        assert r.status_code == 200, r.text
        reader = requests.Session()
        reader.auth, reader.verify = ("loads", password(secrets, "loads")), ca
        reader.trust_env = False
        wait_until(lambda: reader.get(f"{offline_registry}/schemas/ids/{r.json()['id']}", timeout=10).status_code
                   == 200, 60, interval=0.5, what="the read-only registry following the primary")
        denied = reader.post(f"{live_registry}/subjects/other-value/versions", json={"schema": '"string"'},
                             timeout=30)
        assert denied.status_code == 403, denied.text

        # the brokers: SASL_SSL only; a principal gets only what its ACLs allow
        live = ",".join(f"127.{net}.1.{i}:{topo['ports']['broker']}" for i in (1, 2, 3))
        offline = ",".join(f"127.{net}.2.{i}:{topo['ports']['broker']}" for i in (1, 2, 3))
        producer = Producer(client(live, secrets, "admin", **{"enable.idempotence": True}))
        for i in range(100):
            producer.produce("secure-check", str(i).encode(), str(i).encode())
        assert producer.flush(60) == 0
        mirrored = Consumer(client(offline, secrets, "admin", **{"group.id": "secure-check",
                                                                 "auto.offset.reset": "earliest"}))
        mirrored.subscribe(["secure-check"])
        seen: set[bytes] = set()
        deadline = time.monotonic() + 120
        while len(seen) < 100 and time.monotonic() < deadline:
            m = mirrored.poll(1)
            if m is not None and not m.error():
                seen.add(m.value())
        mirrored.close()
        assert len(seen) == 100, "the mirror did not copy what admin produced on live"

        # the operators' CLI with kafka-topics.sh's --command-config (Kafka's Java names, the password by reference)
        admin_props = tmp_path / "admin.properties"
        admin_props.write_text(
            "config.providers=file\n"
            "config.providers.file.class=org.apache.kafka.common.config.provider.FileConfigProvider\n"
            "security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-512\n"
            "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username=\"admin\" "
            f"password=\"${{file:{secrets}/admin.properties:password}}\";\n"
            f"ssl.truststore.location={secrets}/ca.pem\n")
        listed = logbus("topics", "--list", "--bootstrap-server", live, "--command-config", str(admin_props))
        assert listed.returncode == 0 and "secure-check" in listed.stdout.split(), listed.stdout + listed.stderr

        acls = topo["security"].get("authorizer", True)  # the brokers enforce the ACLs security-init stored
        stored = logbus("acls", "--list", "--authorizer-properties",
                        f"zookeeper.connect=127.{net}.1.10:{topo['ports']['zookeeper']}/live")
        assert stored.returncode == 0 and "User:frontend" in stored.stdout and "page-views" in stored.stdout, \
            stored.stdout + stored.stderr
        errors: list = []
        nosy = Consumer(client(live, secrets, "frontend", **{"group.id": "logbus-nosy",
                                                             "auto.offset.reset": "earliest"}))
        nosy.subscribe(["page-views"])
        deadline = time.monotonic() + 30
        while acls and not errors and time.monotonic() < deadline:
            m = nosy.poll(1)
            if m is not None and m.error():
                errors.append(m.error().code())
        nosy.close()
        assert not acls or errors and errors[0] in (KafkaError.GROUP_AUTHORIZATION_FAILED,
                                                    KafkaError.TOPIC_AUTHORIZATION_FAILED), errors
        intruder = Producer(client(live, secrets, "frontend", "not-the-password", **{"message.timeout.ms": 10000}))
        failed: list = []
        intruder.produce("page-views", b"x", on_delivery=lambda err, _m: failed.append(err))
        intruder.flush(20)
        assert failed and failed[0] is not None
        plaintext = Producer({"bootstrap.servers": live, "message.timeout.ms": 5000})
        plaintext.produce("page-views", b"x", on_delivery=lambda err, _m: failed.append(err))
        plaintext.flush(15)
        assert len(failed) == 2 and failed[1] is not None
        if acls:
            from confluent_kafka.admin import AdminClient, NewTopic

            frontend_admin = AdminClient(client(live, secrets, "frontend"))
            with pytest.raises(KafkaException) as refused:  # the frontend principal may not create topics at will
                frontend_admin.create_topics([NewTopic("not-mine", 1, 3)])["not-mine"].result(30)
            assert refused.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
            # only the registry's principal writes _schemas: a frontend (which may register schemas over HTTP)
            # cannot rewrite the registry's view behind its back
            forged: list = []
            forger = Producer(client(live, secrets, "frontend", **{"message.timeout.ms": 15000}))
            forger.produce("_schemas", b'{"keytype":"SCHEMA","subject":"signups-value","version":9}', b"{}",
                           on_delivery=lambda err, _m: forged.append(err))
            forger.flush(30)
            assert forged and forged[0] is not None and forged[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED

        # the audited demo traffic, complete at live and offline, read behind the audit service's login
        assert requests.get(f"{audit}/api/report", verify=ca, timeout=30).status_code == 401
        try:
            wait_recovered(audit, 0, http=admin)
        except TimeoutError:
            now = int(time.time() * 1000)
            rows = admin.get(f"{audit}/api/report", timeout=30).json()
            bad = [r for r in rows if r["window_end"] + 4000 < now and r["completeness"] != 100.0]
            raise AssertionError(f"{len(bad)} closed windows below 100% of {len(rows)}: {bad[:6]}") from None
        # one load with the loads principal: every closed window 100% at every tier
        token = airflow_token(airflow, json.loads((state / "offline-airflow" / "passwords.json").read_text())["admin"])
        cut = run_dag(airflow, token)
        report = state / "offline-airflow" / "data" / "warehouse" / "_audit" / "report.json"
        rows = check_complete(json.loads(report.read_text()), audit, airflow, token, until_ms=cut, http=admin)
        assert rows
    finally:
        down = logbus("down", "--state-dir", str(state), timeout=300)
        left = leftovers(state.resolve())
        for pid in left:
            os.kill(pid, signal.SIGKILL)
    assert down.returncode == 0, down.stderr
    assert left == [], f"processes left behind by logbus down: {left}"
