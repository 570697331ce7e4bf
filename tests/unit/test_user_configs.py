"""``logbus configs --entity-type users``: parsing of --add-config and the stored node (no ZooKeeper)."""

import json

import pytest

from broker.security import credentials, scram
from logbus.user_configs import UsageError, credentials_to_add, describe_line, parse_add_config

pytestmark = [pytest.mark.unit, pytest.mark.timeout(30)]


def test_add_config_kafka_syntax():
    parsed = parse_add_config("SCRAM-SHA-256=[iterations=8192,password=x],SCRAM-SHA-512=[password=y]")
    assert parsed == {"SCRAM-SHA-256": {"iterations": "8192", "password": "x"}, "SCRAM-SHA-512": {"password": "y"}}


@pytest.mark.parametrize("text", ["SCRAM-SHA-1=[password=x]", "SCRAM-SHA-512=[iterations=4096]",
                                  "SCRAM-SHA-512=[password=x", "password", "SCRAM-SHA-512=[iterations=10,password=x]"])
def test_add_config_refused(text):
    with pytest.raises(UsageError):
        credentials_to_add(text)


def test_node_is_kafkas_json_and_verifies_the_password():
    node = credentials.updated_node(None, credentials_to_add("SCRAM-SHA-512=[password=secret]"), [])
    doc = json.loads(node)
    assert doc["version"] == 1 and doc["config"]["SCRAM-SHA-512"].endswith(",iterations=4096")
    credential = credentials.credential_from_node(node, "SCRAM-SHA-512")
    client, server = scram.ScramClient("SCRAM-SHA-512", "u", "secret"), scram.ScramServer("SCRAM-SHA-512")
    server.client_first(client.first())
    client.verify(server.client_final(client.final(server.server_first(credential))))
    assert credentials.credential_from_node(node, "SCRAM-SHA-256") is None
    assert "SCRAM-SHA-512=iterations=4096" in describe_line("u", node)
    emptied = credentials.updated_node(node, {}, ["SCRAM-SHA-512"])
    assert json.loads(emptied)["config"] == {}


@pytest.mark.parametrize("name", ["", "a/b", ".."])
def test_user_names_that_are_not_a_znode_are_refused(name):
    with pytest.raises(ValueError):
        credentials.user_path(name)
