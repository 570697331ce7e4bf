import pytest
from broker.config import BrokerConfig, ConfigError, parse_properties

pytestmark = [pytest.mark.unit, pytest.mark.timeout(10)]


def test_properties_and_defaults(tmp_path):
    path = tmp_path / "server.properties"
    path.write_text("# comment\nbroker.id=3\nlisteners=PLAINTEXT://127.0.0.1:9999\nlog.dirs=/a,/b\n"
                    "log.retention.minutes=5\nauto.create.topics.enable=false\n")
    config = BrokerConfig.load(path, ["log.segment.bytes=1000"])
    assert config["broker.id"] == 3 and config.listener == ("127.0.0.1", 9999)
    assert config["log.dirs"] == ["/a", "/b"] and config["log.segment.bytes"] == 1000
    assert config.retention_ms == 300_000 and config["auto.create.topics.enable"] is False
    assert config["num.partitions"] == 1 and config["socket.request.max.bytes"] == 104857600


def test_retention_precedence_matches_kafka():
    assert BrokerConfig.from_strings({}).retention_ms == 168 * 3_600_000
    assert BrokerConfig.from_strings({"log.retention.hours": "1", "log.retention.ms": "10"}).retention_ms == 10
    assert BrokerConfig.from_strings({"log.retention.hours": "-1"}).retention_ms == -1


@pytest.mark.parametrize("raw, message", [
    ({"no.such.key": "1"}, "unknown config key 'no.such.key'"),
    ({"broker.id": "x"}, "invalid value 'x' for broker.id"),
    ({"log.segment.bytes": "5"}, "must be >= 14"),
    ({"auto.create.topics.enable": "yes"}, "true or false"),
    ({"listeners": "SSL://h:1"}, "SSL needs ssl.keystore.location"),
    ({"listeners": "INTERNAL://h:1"}, "INTERNAL is not in listener.security.protocol.map"),
    ({"listeners": "PLAINTEXT://h:1,PLAINTEXT://h:2"}, "each listener name may appear once"),
    ({"listeners": "A://h:1,B://h:1", "listener.security.protocol.map": "A:PLAINTEXT,B:PLAINTEXT"},
     "a port of its own"),
    ({"inter.broker.listener.name": "INTERNAL"}, "INTERNAL is not a listener name"),
    ({"advertised.listeners": "EXTERNAL://h:1",
      "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,EXTERNAL:PLAINTEXT"},
     "EXTERNAL is not a listener name"),
])
def test_invalid_settings_are_refused(raw, message):
    with pytest.raises(ConfigError, match=message):
        BrokerConfig.from_strings(raw)


def test_malformed_properties_line():
    with pytest.raises(ConfigError, match="line 2"):
        parse_properties("a=1\njust words\n")
