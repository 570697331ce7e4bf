"""topology/secure.json: SASL_SSL everywhere, an authorizer, one principal per service with least privilege, and no
secret in any generated file (passwords come from the secrets directory through Kafka's FileConfigProvider)."""

import json
import re

import pytest

from logbus import secure_topology as secure
from logbus.compose import render
from logbus.topology import SECURE, TopologyError, load, services
from settings.properties import parse_properties

pytestmark = pytest.mark.unit


def by_name(tmp_path, target="local", authorizer=None):
    topo = load(SECURE)
    if authorizer is not None:
        topo["security"]["authorizer"] = authorizer
    return {s.name: s for s in services(topo, target, tmp_path)}


@pytest.mark.parametrize("authorizer", [True, False])
def test_every_broker_listener_is_sasl_ssl_with_the_authorizer(tmp_path, authorizer):
    for target in ("local", "compose"):
        for s in by_name(tmp_path, target, authorizer).values():
            if s.kind != "broker":
                continue
            props = parse_properties(s.files["server.properties"].replace("${file:", "$[file:"))
            listeners = [item.split("://")[0] for item in props["listeners"].split(",")]
            assert all(f"{name}:SASL_SSL" in props["listener.security.protocol.map"] for name in listeners)
            assert "PLAINTEXT" not in props["listeners"]
            if authorizer:
                assert props["authorizer.class.name"] == secure.AUTHORIZER
                assert props["super.users"] == "User:broker;User:admin"
            else:  # topology/secure.json until the broker enforces ACLs: stored by security-init, not enforced
                assert "authorizer.class.name" not in props
            assert "security-init" in s.depends_on


def test_no_secret_in_any_generated_file(tmp_path):
    svcs = by_name(tmp_path)
    for s in svcs.values():
        for name, text in s.files.items():
            for value in re.findall(r'password="([^"]*)"', text):
                assert value.startswith("${file:"), (s.name, name, value)
            assert "password=" not in text.replace("password=\"${file:", ""), (s.name, name)
    _, files = render(load(SECURE), "docker/config-secure")
    assert all("${file:/etc/logbus/secrets/" in text for rel, text in files.items() if rel.endswith("server.properties"))


def test_each_service_has_its_own_principal_and_only_what_it_needs():
    plan = secure.acl_plan(load(SECURE))
    assert set(plan) == {"live", "offline"}
    grants = {(dc, a["principal"], a["resource"], a["name"], op) for dc, acls in plan.items() for a in acls
              for op in a["operations"]}
    assert ("live", "User:frontend", "topic", "page-views", "Write") in grants
    assert not any(p == "User:frontend" and op == "Read" for _, p, _, _, op in grants)  # frontends only write
    assert ("live", "User:mirror-offline", "topic", "*", "Read") in grants  # the mirror reads its source ...
    assert not any(dc == "live" and p == "User:mirror-offline" and op == "Write" for dc, p, _, _, op in grants)
    assert ("offline", "User:mirror-offline", "transactional_id", "logbus-mirror.", "Write") in grants
    assert {a["principal"] for a in plan["live"] if a["name"] == "_schemas"} == {"User:registry",
                                                                                 "User:registry-offline"}
    assert not any(p == "User:registry-offline" and op in ("Write", "All") for _, p, _, _, op in grants)
    assert not any(p == "User:audit" and op == "Write" for _, p, _, _, op in grants)
    assert secure.principals(plan) == ["admin", "audit", "broker", "counter-live", "counter-offline", "frontend",
                                       "loads", "mirror-offline", "monitor", "registry", "registry-offline"]
    # the lag exporters' principal only describes (groups, topics, the cluster), in both datacenters
    assert {op for _, p, _, _, op in grants if p == "User:monitor"} == {"Describe"}
    assert {dc for dc, p, _, _, _ in grants if p == "User:monitor"} == {"live", "offline"}
    roles = secure.registry_users(plan)
    assert roles["frontend"] == "write" and roles["loads"] == "read" and roles["admin"] == "admin"


def test_clients_are_configured_for_their_principal(tmp_path):
    svcs = by_name(tmp_path)
    assert 'username="mirror-offline"' in svcs["offline-mirror-live"].files["consumer.properties"]
    # librdkafka's record path (secured clusters) keeps librdkafka's fetch defaults: no wait for 256 KB there
    assert "fetch.min.bytes" not in svcs["offline-mirror-live"].files["consumer.properties"]
    assert "schema.registry.basic.auth.user.info=counter-live:${file:" in \
        svcs["live-audit-counter"].files["consumer.properties"]
    assert svcs["live-frontend1"].argv[-2:] == ["--command-config", f"{tmp_path / 'live-frontend1'}/client.properties"]
    assert "kafkastore.sasl.jaas.config" in svcs["offline-registry"].files["registry.properties"]
    assert svcs["live-registry"].url.startswith("https://") and svcs["live-registry"].health[0] == "https"
    plan = json.loads(svcs["security-init"].files["plan.json"])
    assert plan["certificates"]["live-broker1"] == ["127.0.1.1"]
    assert plan["zookeepers"]["offline"].endswith("/offline")


def test_only_sasl_ssl_is_offered():
    topo = load(SECURE)
    topo["security"] = {"protocol": "SASL_PLAINTEXT"}
    with pytest.raises(TopologyError, match="SASL_SSL"):
        services(topo, "local", "/tmp/x")


def test_secrets_files_are_made_once(tmp_path):
    first = secure.ensure_passwords(tmp_path, ["a", "b"])
    assert secure.ensure_passwords(tmp_path, ["a", "b"]) == first and first["a"] != first["b"]
    assert oct((tmp_path / "a.properties").stat().st_mode & 0o777) == "0o600"
