"""Kafka's sasl.kerberos.principal.to.local.rules (KerberosShortNamer) and the start-up checks of a GSSAPI
listener, without a KDC."""

import pytest

from broker.config import BrokerConfig, ConfigError
from broker.security.kerberos import NoMatchingRule, parse_rules, short_name

pytestmark = [pytest.mark.unit, pytest.mark.timeout(30)]

REALM = "EXAMPLE.COM"


@pytest.mark.parametrize("rules, name, expected", [
    (["DEFAULT"], "alice@EXAMPLE.COM", "alice"),
    (["DEFAULT"], "kafka/broker1.example.com@EXAMPLE.COM", "kafka"),
    (["DEFAULT"], "alice", "alice"),  # no realm: the name itself
    # Kafka's documented examples (KerberosShortNamer, the security docs)
    (["RULE:[1:$1@$0](.*@EXAMPLE.COM)s/@.*//", "DEFAULT"], "alice@EXAMPLE.COM", "alice"),
    (["RULE:[1:$1@$0](.*@OTHER.ORG)s/@.*//", "DEFAULT"], "bob@OTHER.ORG", "bob"),
    (["RULE:[2:$1@$0](.*@EXAMPLE.COM)s/@.*//", "DEFAULT"], "kafka/host@EXAMPLE.COM", "kafka"),
    (["RULE:[1:$1]/L"], "ALICE@EXAMPLE.COM", "alice"),
    (["RULE:[1:$1]/U"], "alice@OTHER.ORG", "ALICE"),
    (["RULE:[2:$2-$1](.*-bob)s/^.*$/batch-bob/", "DEFAULT"], "bob/batch@EXAMPLE.COM", "batch-bob"),
    (["RULE:[1:$1](a.*)s/a/A/g"], "banana@X", None),  # the match must cover the whole name
    (["RULE:[1:$1](b.*)s/a/A/g"], "banana@X", "bAnAnA"),
    (["RULE:[1:$1](b.*)s/a/A/"], "banana@X", "bAnana"),
    (["RULE:[1:$1](b.*)s/(n)a/$1o/g"], "banana@X", "banono"),  # Java's $1 in the replacement
])
def test_short_names(rules, name, expected):
    parsed = parse_rules(rules)
    if expected is None:
        with pytest.raises(NoMatchingRule):
            short_name(name, parsed, REALM)
    else:
        assert short_name(name, parsed, REALM) == expected


def test_no_rule_matches_names_of_another_realm_by_default():
    with pytest.raises(NoMatchingRule, match="No rules apply to alice@OTHER.ORG"):
        short_name("alice@OTHER.ORG", parse_rules(["DEFAULT"]), REALM)


def test_a_rule_leaving_a_non_simple_name_is_refused():
    with pytest.raises(NoMatchingRule, match="Non-simple name"):
        short_name("alice@EXAMPLE.COM", parse_rules(["RULE:[1:$1@$0]"]), REALM)


@pytest.mark.parametrize("rule", ["RULE:[1:$1", "NONSENSE", "RULE:1:$1"])
def test_invalid_rules(rule):
    with pytest.raises(ValueError, match="Invalid rule"):
        parse_rules([rule])


JAAS = ('com.sun.security.auth.module.Krb5LoginModule required useKeyTab=true storeKey=true keyTab="{keytab}" '
        'principal="kafka/h@EXAMPLE.COM";')


def _config(**extra) -> BrokerConfig:
    return BrokerConfig.from_strings({"listeners": "PLAINTEXT://h:1,SASL_PLAINTEXT://h:2", **extra})


@pytest.mark.parametrize("extra, message", [
    ({}, "No serviceName defined"),  # Kafka's default mechanism, GSSAPI, without its settings
    ({"sasl.kerberos.service.name": "kafka"}, "needs listener.name.sasl_plaintext.gssapi.sasl.jaas.config"),
    ({"sasl.kerberos.service.name": "kafka", "listener.name.sasl_plaintext.gssapi.sasl.jaas.config":
      'com.sun.security.auth.module.Krb5LoginModule required principal="kafka/h@EXAMPLE.COM";'},
     "needs useKeyTab=true and keyTab"),
    ({"sasl.kerberos.service.name": "other", "listener.name.sasl_plaintext.gssapi.sasl.jaas.config":
      JAAS.format(keytab="/etc/hostname")}, "is not of the service sasl.kerberos.service.name=other"),
    ({"sasl.kerberos.service.name": "kafka", "listener.name.sasl_plaintext.gssapi.sasl.jaas.config":
      JAAS.format(keytab="/no/such.keytab")}, "keyTab /no/such.keytab cannot be read"),
    ({"sasl.kerberos.service.name": "kafka", "sasl.kerberos.principal.to.local.rules": "RULE:[1",
      "listener.name.sasl_plaintext.gssapi.sasl.jaas.config": JAAS.format(keytab="/etc/hostname")},
     "Invalid rule"),
    ({"sasl.kerberos.service.name": "kafka", "listener.name.sasl_plaintext.gssapi.sasl.jaas.config":
      JAAS.format(keytab="/etc/hostname")}, "no credentials for kafka/h@EXAMPLE.COM in /etc/hostname"),
    ({"sasl.enabled.mechanisms": "PLAIN", "inter.broker.listener.name": "SASL_PLAINTEXT"},
     "must be included in sasl.enabled.mechanisms"),
])
def test_gssapi_listener_checks_at_start_up(extra, message):
    with pytest.raises(ConfigError, match=message):
        _config(**extra).check_security()
