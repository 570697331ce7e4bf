"""Client quotas without I/O: Kafka's sampled rate and throttle time, the precedence of quota entities, the
entity paths and names, AlterClientQuotas' validation and DescribeClientQuotas' filters."""

import pytest

from broker.client_quotas import entities
from broker.client_quotas.entities import QuotaError
from broker.client_quotas.manager import ClientQuotaManager
from broker.client_quotas.rate import Rate

pytestmark = [pytest.mark.unit, pytest.mark.timeout(30)]


def test_a_first_burst_is_spread_over_the_whole_window():
    rate = Rate(num=11, window_ms=1000)
    rate.record(20_000, now=0)
    assert rate.window(0) == 10_000  # num - 1 whole windows at least
    assert rate.measure(0) == 2_000
    # twice the bound of 1,000/s over 10 s: ten more seconds of silence bring it back (Kafka's formula)
    assert rate.throttle_ms(1_000, 0) == 10_000
    assert rate.throttle_ms(2_000, 0) == 0


def test_samples_expire_and_the_window_grows_with_them():
    rate = Rate(num=3, window_ms=1000)
    for t in range(0, 5000, 500):
        rate.record(100, now=t)
    assert rate.window(4500) == 4500 - 2000  # the samples of 2000.. are kept; earlier ones were dropped (expiry 3 s)
    assert rate.measure(10_000) == 0.0  # all expired
    assert rate.max_in_window(1000) == 2000


def test_unrecord_takes_back():
    rate = Rate(num=2, window_ms=1000)
    rate.record(5000, now=0)
    rate.record(-5000, now=1)
    assert rate.measure(1) == 0.0 and rate.throttle_ms(10, 1) == 0


def quotas(stored):
    manager = ClientQuotaManager(num=11, window_ms=1000)
    manager.update(stored)
    return manager


def test_the_most_specific_entity_wins_in_kafkas_order():
    m = quotas({
        "clients/<default>": {"producer_byte_rate": "10"},
        "clients/app": {"producer_byte_rate": "20"},
        "users/<default>": {"producer_byte_rate": "30"},
        "users/<default>/clients/<default>": {"producer_byte_rate": "40"},
        "users/<default>/clients/app": {"producer_byte_rate": "50"},
        "users/alice": {"producer_byte_rate": "60", "SCRAM-SHA-256": "salt=..."},
        "users/alice/clients/<default>": {"producer_byte_rate": "70"},
        "users/alice/clients/app": {"producer_byte_rate": "80"},
    })
    key = "producer_byte_rate"
    assert m.limit(key, "User:alice", "app") == (80, ("alice", "app"))
    assert m.limit(key, "User:alice", "other") == (70, ("alice", "other"))
    assert m.limit(key, "User:bob", "app") == (50, ("bob", "app"))
    assert m.limit(key, "User:bob", "other") == (40, ("bob", "other"))
    assert m.limit("consumer_byte_rate", "User:bob", "other") is None
    assert m.enabled


def test_a_user_quota_is_shared_by_its_clients_a_default_one_is_not():
    m = quotas({"users/alice": {"producer_byte_rate": "1000"}, "clients/<default>": {"consumer_byte_rate": "1000"}})
    assert m.limit("producer_byte_rate", "User:alice", "a")[1] == m.limit("producer_byte_rate", "User:alice", "b")[1]
    assert m.limit("consumer_byte_rate", "User:x", "a")[1] != m.limit("consumer_byte_rate", "User:x", "b")[1]
    assert m.record("producer_byte_rate", "User:alice", "a", 10_000, now_ms=0) == 0  # 1,000/s over 10 s: at the bound
    assert m.record("producer_byte_rate", "User:alice", "b", 10_000, now_ms=0) == 10_000  # the same rate: over it
    assert m.record("producer_byte_rate", "User:carol", "a", 10_000, now_ms=0) == 0  # no quota


def test_only_quotas_on_requests_turn_the_fast_path_off():
    assert quotas({"users/alice": {"request_percentage": "50"}}).enabled
    assert not quotas({"ips/<default>": {"connection_creation_rate": "5"}}).enabled
    assert not quotas({"users/alice": {"controller_mutation_rate": "5"}}).enabled
    assert not quotas({}).enabled


def test_request_time_is_charged_in_percent_of_a_thread_and_throttled_at_most_a_window():
    class Session:
        muted_until = 0.0

    m = quotas({"clients/app": {"request_percentage": "10"}})  # a tenth of a thread: 1 s of time in 10 s
    session = Session()
    assert m.record_request("User:ANONYMOUS", "app", 0.5, session, now_ms=0) == 0
    assert m.record_request("User:ANONYMOUS", "other", 5.0, session, now_ms=0) == 0  # no quota
    throttle = m.record_request("User:ANONYMOUS", "app", 1.0, session, now_ms=0)  # 15% of a thread over 10 s
    assert throttle == 1000 and session.muted_until > 0  # Kafka's (15 - 10) / 10 x 10 s, bounded by one window
    assert m.throttled["request_percentage"] == [1, 1000]


def test_connections_over_their_ips_creation_rate_are_not_counted():
    m = ClientQuotaManager(num=2, window_ms=1000)
    m.update({"ips/<default>": {"connection_creation_rate": "2"}, "ips/127.0.0.2": {"connection_creation_rate": "5"},
              "ips/0:0:0:0:0:0:0:1": {"connection_creation_rate": "1"}})
    assert [m.connection_throttle("127.0.0.1", now_ms=0) for _ in range(4)] == [0, 0, 500, 500]  # 3/s over 2/s
    assert [m.connection_throttle("127.0.0.2", now_ms=0) for _ in range(6)] == [0] * 5 + [200]  # its own quota
    assert m.connection_throttle("::1", now_ms=0) == 0 and m.connection_throttle("::1", now_ms=0) == 1000
    assert m.connection_throttle("127.0.0.1", now_ms=1500) == 0  # the refused ones were not counted
    assert m.throttled["connection_creation_rate"][0] == 4
    assert quotas({}).connection_throttle("127.0.0.1") == 0


def test_entity_paths_and_names():
    assert entities.entity_path([("user", "alice"), ("client-id", None)]) == "users/alice/clients/<default>"
    assert entities.entity_path([("client-id", "a b*~/")]) == "clients/a%20b%2A%7E%2F"
    assert entities.entity_components("clients/a%20b%2A%7E%2F") == [("client-id", "a b*~/")]
    assert entities.entity_path([("ip", None)]) == "ips/<default>"
    for components, message in (
            ([], "Invalid empty client quota entity"),
            ([("user", "a"), ("ip", "127.0.0.1")], "Invalid quota entity combination"),
            ([("group", "g")], "Unhandled client quota entity type: group"),
            ([("user", "")], "Empty user not supported"),
            ([("user", "a"), ("user", "b")], "duplicate entity entry user"),
            ([("ip", "not-an-ip")], "not-an-ip is not a valid IP")):
        with pytest.raises(QuotaError, match=message) as caught:
            entities.entity_path(components)
        assert caught.value.error == "invalid_request"


def test_alterations_are_validated_as_kafkas_controller_does():
    path = "users/alice"
    assert entities.altered(path, {"SCRAM-SHA-256": "x"}, [("producer_byte_rate", 1024.0, False)]) == {
        "SCRAM-SHA-256": "x", "producer_byte_rate": "1024"}
    assert entities.altered(path, {"producer_byte_rate": "1"}, [("producer_byte_rate", 0.0, True)]) == {}
    assert entities.altered(path, {}, [("request_percentage", 12.5, False)]) == {"request_percentage": "12.5"}
    for ops, message in (
            ([("bogus", 1.0, False)], "Invalid configuration key bogus"),
            ([("producer_byte_rate", 0.0, False)], "Quota producer_byte_rate must be greater than 0"),
            ([("producer_byte_rate", 1.5, False)], "producer_byte_rate cannot be a fractional value"),
            ([("producer_byte_rate", 1.0, False), ("producer_byte_rate", 2.0, False)], "Duplicate quota key"),
            ([("connection_creation_rate", 1.0, False)], "Invalid configuration key")):
        with pytest.raises(QuotaError, match=message):
            entities.altered(path, {}, ops)
    with pytest.raises(QuotaError, match="too large for an INT"):
        entities.altered("ips/127.0.0.1", {}, [("connection_creation_rate", 2.0**40, False)])


STORED = {
    "users/alice": {"producer_byte_rate": "1", "SCRAM-SHA-256": "x"},
    "users/bob": {"SCRAM-SHA-256": "x"},  # no quota: never described
    "users/<default>": {"consumer_byte_rate": "2"},
    "users/alice/clients/app": {"request_percentage": "3"},
    "clients/app": {"producer_byte_rate": "4"},
    "clients/<default>": {"producer_byte_rate": "5"},
    "ips/127.0.0.1": {"connection_creation_rate": "6"},
}


def described(components, strict):
    return [tuple(parts) for parts, _ in entities.describe(STORED, components, strict)]


def test_describe_filters_as_the_zookeeper_broker():
    assert len(described([], strict=False)) == 6
    assert described([], strict=True) == []
    assert described([("user", entities.EXACT, "alice")], strict=True) == [(("user", "alice"),)]
    assert described([("user", entities.EXACT, "alice")], strict=False) == [
        (("user", "alice"),), (("user", "alice"), ("client-id", "app"))]
    assert described([("user", entities.DEFAULT_MATCH, None)], strict=True) == [(("user", None),)]
    assert described([("client-id", entities.SPECIFIED, None)], strict=True) == [
        (("client-id", None),), (("client-id", "app"),)]
    assert described([("ip", entities.SPECIFIED, None)], strict=False) == [(("ip", "127.0.0.1"),)]
    values = dict(entities.describe(STORED, [("user", entities.EXACT, "alice")], True)[0][1])
    assert values == {"producer_byte_rate": 1.0}  # the SCRAM credential is not a quota


@pytest.mark.parametrize("components,error,message", [
    ([("user", 0, "a"), ("user", 0, "b")], "invalid_request", "Duplicate user filter component"),
    ([("", 0, "a")], "invalid_request", "Unexpected empty filter component entity type"),
    ([("group", 0, "a")], "unsupported_version", "Custom entity type 'group' not supported"),
    ([("user", 0, "a"), ("ip", 2, None)], "invalid_request", "IP filter component should not be used"),
    ([("user", 7, "a")], "invalid_request", "Unexpected match type: 7"),
])
def test_bad_filters_get_kafkas_errors(components, error, message):
    with pytest.raises(QuotaError, match=message) as caught:
        entities.describe(STORED, components, False)
    assert caught.value.error == error


def test_the_token_bucket_of_controller_mutations():
    from broker.client_quotas.rate import TokenBucket

    bucket = TokenBucket(num=2, window_ms=1000)  # burst: 2 s of the quota
    assert bucket.throttle_ms(5, now=0) == 0  # full at first: 10 tokens
    bucket.record(12, 5, now=0)
    assert bucket.throttle_ms(5, now=0) == 400  # -2 tokens at 5 a second
    assert bucket.throttle_ms(5, now=400) == 0
    assert bucket.throttle_ms(5, now=100_000) == 0 and bucket.tokens == 10  # never more than the burst


def test_strict_and_permissive_mutation_quotas():
    m = ClientQuotaManager(mutation_num=2, mutation_window_ms=1000)
    m.update({"clients/c": {"controller_mutation_rate": "1"}})
    assert m.mutations_enabled and not m.enabled  # the produce fast path stays on
    strict = m.mutation_quota("User:ANONYMOUS", "c", strict=True)
    assert not strict.exceeded()
    strict.record(5)  # a burst of 2 taken whole: the bucket at -3
    assert strict.exceeded() and 2900 <= strict.throttle <= 3000
    permissive = m.mutation_quota("User:ANONYMOUS", "c", strict=False)  # the same bucket (the client's)
    assert not permissive.exceeded()
    permissive.record(1)
    assert permissive.throttle >= 3900
    assert m.mutation_quota("User:ANONYMOUS", "other", strict=True) is None


def test_values_written_by_hand_that_are_not_positive_numbers_are_no_quota():
    m = quotas({"clients/a": {"producer_byte_rate": "0"}, "clients/b": {"producer_byte_rate": "x"},
                "clients/c": {"producer_byte_rate": "-5", "consumer_byte_rate": "inf"}})
    assert not m.enabled and m.quotas == {}
