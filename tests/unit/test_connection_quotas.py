"""broker.network.quotas: max.connections (KIP-402's inter-broker exemption), per listener, per IP, overrides."""

import pytest

from broker.config import BrokerConfig, ConfigError
from broker.network.quotas import ConnectionQuotas

pytestmark = pytest.mark.unit


def test_per_ip_limit_and_overrides():
    q = ConnectionQuotas(per_ip=2, overrides={"127.0.0.9": 0, "::1": 3})
    assert q.admit("PLAINTEXT", "127.0.0.1") is None
    assert q.admit("PLAINTEXT", "127.0.0.1") is None
    assert "max.connections.per.ip=2 reached for 127.0.0.1" in q.admit("PLAINTEXT", "127.0.0.1")
    assert q.admit("PLAINTEXT", "127.0.0.2") is None  # another address has its own count
    assert q.admit("PLAINTEXT", "127.0.0.9") is not None  # override 0: never
    for _ in range(3):
        assert q.admit("PLAINTEXT", "0:0::1") is None  # IPv6 in any spelling counts as one address
    assert q.admit("PLAINTEXT", "::1") is not None
    q.release("PLAINTEXT", "127.0.0.1")
    assert q.admit("PLAINTEXT", "127.0.0.1") is None
    assert q.refused["max.connections.per.ip"] == 3
    assert q.total == 6


def test_broker_wide_limit_spares_the_inter_broker_listener():
    q = ConnectionQuotas(max_connections=2, inter_broker_listener="INTERNAL")
    assert q.admit("EXTERNAL", "10.0.0.1") is None
    assert q.admit("EXTERNAL", "10.0.0.2") is None
    assert q.admit("EXTERNAL", "10.0.0.3") == "max.connections=2 reached"
    assert q.admit("INTERNAL", "10.0.0.4") is None  # replication and the controller still get in
    q.release("EXTERNAL", "10.0.0.1")
    assert q.admit("EXTERNAL", "10.0.0.3") is None
    assert q.by_listener == {"EXTERNAL": 2, "INTERNAL": 1} and q.total == 2


def test_listener_limit_applies_to_the_inter_broker_listener_too():
    q = ConnectionQuotas(listener_limits={"INTERNAL": 1}, inter_broker_listener="INTERNAL")
    assert q.admit("INTERNAL", "10.0.0.1") is None
    assert q.admit("INTERNAL", "10.0.0.2") == "listener.name.internal.max.connections=1 reached"


def test_config_keys():
    config = BrokerConfig.from_strings({
        "listeners": "INTERNAL://127.0.0.1:9092,EXTERNAL://127.0.0.1:9093",
        "listener.security.protocol.map": "INTERNAL:PLAINTEXT,EXTERNAL:PLAINTEXT",
        "inter.broker.listener.name": "INTERNAL", "max.connections": "100",
        "listener.name.external.max.connections": "10", "max.connections.per.ip": "5",
        "max.connections.per.ip.overrides": "127.0.0.1:50, localhost:7"})
    q = ConnectionQuotas.from_config(config)
    assert (q.max_connections, q.per_ip, q.inter_broker_listener) == (100, 5, "INTERNAL")
    assert q.overrides == {"127.0.0.1": 50, "localhost": 7} and q.listener_limits == {"EXTERNAL": 10}
    defaults = ConnectionQuotas.from_config(BrokerConfig.from_strings({}))
    assert defaults.max_connections == defaults.per_ip == 2**31 - 1
    for bad in ({"max.connections.per.ip.overrides": "127.0.0.1"}, {"max.connections": "-1"},
                {"max.connections.per.ip.overrides": "h:x"}):
        with pytest.raises(ConfigError):
            BrokerConfig.from_strings(bad)
