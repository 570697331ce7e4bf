"""The registry leader election's assignment and identities (pure logic; the group protocol itself runs against a
real broker in tests/integration/test_registry_leader_election.py)."""

import json

import pytest
from schema_registry.config import RegistryConfig, RegistryConfigError
from schema_registry.election import Identity, assign

pytestmark = [pytest.mark.unit, pytest.mark.timeout(30)]

A, B, C = Identity("10.0.0.2", 8081), Identity("10.0.0.1", 8081), Identity("10.0.0.3", 8081, eligible=False)


def test_identity_round_trips_in_confluents_shape():
    raw = Identity("reg1", 8443, "https", False).encode()
    assert json.loads(raw) == {"version": 1, "host": "reg1", "port": 8443, "scheme": "https",
                               "leader_eligibility": False}
    assert Identity.decode(raw) == Identity("reg1", 8443, "https", False)
    # an older Confluent member's metadata says master_eligibility
    assert Identity.decode(b'{"host":"h","port":1,"master_eligibility":false}').eligible is False


def test_the_first_eligible_url_leads_and_a_current_leader_stays():
    plan = assign({"m-a": A, "m-b": B, "m-c": C}, current=None)
    assert plan["error"] == 0 and plan["leader"] == "m-b"  # 10.0.0.1 sorts first
    assert Identity.decode(json.dumps(plan["leader_identity"]).encode()) == B
    assert assign({"m-a": A, "m-b": B}, current=A)["leader"] == "m-a"  # no move when an instance joins
    assert assign({"m-a2": A, "m-b": B}, current=A)["leader"] == "m-a2"  # the same instance, rejoined
    assert assign({"m-b": B, "m-c": C}, current=C)["leader"] == "m-b"  # an ineligible one never leads


def test_no_eligible_member_is_an_error_assignment():
    plan = assign({"m-c": C}, current=None)
    assert plan["error"] == 1 and plan["leader"] is None


def test_config_identity_and_eligibility(tmp_path):
    path = tmp_path / "r.properties"
    path.write_text("listeners=http://0.0.0.0:8081,http://127.0.0.1:8082\nkafkastore.bootstrap.servers=b:9092\n"
                    "host.name=reg1\n")
    assert RegistryConfig.load(str(path)).identity == Identity("reg1", 8081, "http", True)
    cfg = RegistryConfig.load(str(path), ["inter.instance.protocol=http", "leader.eligibility=false"])
    assert cfg.identity == Identity("reg1", 8081, "http", False)
    with pytest.raises(RegistryConfigError, match="leader.eligibility must be true or false"):
        RegistryConfig.load(str(path), ["leader.eligibility=maybe"])
    with pytest.raises(RegistryConfigError, match="inter.instance.protocol=ftp"):
        RegistryConfig.load(str(path), ["inter.instance.protocol=ftp"])
