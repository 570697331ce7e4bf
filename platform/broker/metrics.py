"""The broker's metrics, served in Prometheus' text format on ``metrics.listener`` (``http://HOST:PORT``, path
``/metrics``; empty: off), named after Kafka's JMX metrics the way the Prometheus JMX exporter renders them
(``kafka.server:type=BrokerTopicMetrics,name=MessagesInPerSec,topic=T`` →
``kafka_server_brokertopicmetrics_messagesin_total{topic="T"}``).

The request path only adds to plain counters (a few dict operations per request, no lock): request counts and
latency buckets per API, messages and bytes per topic. Everything else is read at scrape time from the broker's
own state — partitions led, ISRs, the controller role, log sizes, purgatories, connections — and that read runs
on the broker's event loop (the HTTP server's thread hands it over and waits), so a scrape never sees a
half-changed structure.
"""

from __future__ import annotations

import asyncio
import bisect
import logging
from collections import defaultdict

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

from telemetry.exposition import MetricsServer, counter as _counter_family, gauge as _gauge_family

log = logging.getLogger(__name__)

# request latency buckets (seconds), from sub-millisecond answers to long-polled fetches
BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
SCRAPE_TIMEOUT_S = 5.0


class BrokerMetrics:
    """The counters the request path feeds; gauges come from :meth:`snapshot` at scrape time."""

    def __init__(self):
        self.requests: dict[str, list] = {}  # api -> [count, seconds, per-bucket counts (+1 overflow)]
        self.messages_in: dict[str, int] = defaultdict(int)
        self.bytes_in: dict[str, int] = defaultdict(int)
        self.bytes_out: dict[str, int] = defaultdict(int)
        self.replication_bytes_out: dict[str, int] = defaultdict(int)
        self.failed_produce: dict[str, int] = defaultdict(int)
        self.isr_shrinks = 0
        self.isr_expands = 0
        self.failed_authentications: dict[str, int] = defaultdict(int)  # per listener
        self.successful_reauthentications: dict[str, int] = defaultdict(int)  # per listener (KIP-368)
        self.failed_reauthentications: dict[str, int] = defaultdict(int)
        self.expired_connections_killed: dict[str, int] = defaultdict(int)
        self._server = None

    # ---- the request path --------------------------------------------------------------------------------
    def request(self, api: str, seconds: float, count: int = 1) -> None:
        """``count`` requests of ``api`` that took ``seconds`` each (more than one: a run handled as one)."""
        entry = self.requests.get(api)
        if entry is None:
            entry = self.requests[api] = [0, 0.0, [0] * (len(BUCKETS) + 1)]
        entry[0] += count
        entry[1] += seconds * count
        entry[2][bisect.bisect_left(BUCKETS, seconds)] += count

    def produced(self, topic: str, messages: int, nbytes: int) -> None:
        self.messages_in[topic] += messages
        self.bytes_in[topic] += nbytes

    def fetched(self, topic: str, nbytes: int, replica: bool) -> None:
        (self.replication_bytes_out if replica else self.bytes_out)[topic] += nbytes

    def isr_changed(self, before: tuple, after: tuple) -> None:
        if set(after) < set(before):
            self.isr_shrinks += 1
        elif set(after) > set(before):
            self.isr_expands += 1

    # ---- exposition --------------------------------------------------------------------------------------
    def start(self, broker, listener: str) -> tuple[str, int] | None:
        """Serve ``/metrics`` on the listener (a thread of prometheus_client's); the address it bound."""
        loop = asyncio.get_running_loop()

        def collect() -> list:  # the HTTP server's thread: the snapshot is taken on the event loop
            if loop.is_closed():
                return []
            future = asyncio.run_coroutine_threadsafe(_snapshot(self, broker), loop)
            try:
                return future.result(SCRAPE_TIMEOUT_S)
            except Exception:  # a busy or stopping broker: an empty scrape, which Prometheus reports as such
                future.cancel()
                log.warning("metrics scrape: no snapshot within %gs", SCRAPE_TIMEOUT_S)
                return []

        self._server = MetricsServer(listener, collect)
        return self._server.start()

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop()
            self._server = None


def _counter(name: str, doc: str, labels: list[str], values) -> CounterMetricFamily:
    if not labels:
        return _counter_family(name, doc, next(iter(values))[1])
    return _counter_family(name, doc, labels=labels, values=values)


def _gauge(name: str, doc: str, value: float, labels: list[str] | None = None, values=None) -> GaugeMetricFamily:
    return _gauge_family(name, doc, value, labels, values or ())


async def _snapshot(m: BrokerMetrics, broker) -> list:
    out = []
    requests = _counter("kafka_network_requestmetrics_requests", "Requests answered, per API (RequestsPerSec).",
                        ["request"], [((api, ), e[0]) for api, e in m.requests.items()])
    latency = HistogramMetricFamily("kafka_network_requestmetrics_totaltime_seconds",
                                    "Time from a request's arrival to its answer, per API (TotalTimeMs).",
                                    labels=["request"])
    for api, (count, total, buckets) in m.requests.items():
        cumulative, running = [], 0
        for bound, n in zip((*map(str, BUCKETS), "+Inf"), buckets):
            running += n
            cumulative.append((bound, running))
        latency.add_metric([api], cumulative, total)
    out += [requests, latency]
    for name, doc, values in (
            ("messagesin", "Records appended, per topic (MessagesInPerSec).", m.messages_in),
            ("bytesin", "Bytes appended by producers, per topic (BytesInPerSec).", m.bytes_in),
            ("bytesout", "Bytes sent to consumers, per topic (BytesOutPerSec).", m.bytes_out),
            ("replicationbytesout", "Bytes sent to follower brokers, per topic (ReplicationBytesOutPerSec).",
             m.replication_bytes_out)):
        out.append(_counter(f"kafka_server_brokertopicmetrics_{name}", doc, ["topic"],
                            [((t, ), v) for t, v in values.items()]))
    out.append(_counter("kafka_server_replicamanager_isrshrinks", "ISR shrinks of partitions this broker leads "
                        "(by itself, or by the controller when a broker's session ended).",
                        [], [((), m.isr_shrinks)]))
    out.append(_counter("kafka_server_replicamanager_isrexpands", "ISR expansions of partitions this broker leads.",
                        [], [((), m.isr_expands)]))
    out.append(_counter("kafka_server_socketservermetrics_failed_authentication",
                        "Failed SASL authentications, per listener.", ["listener"],
                        [((name, ), m.failed_authentications.get(name, 0)) for name in broker.listeners]))
    for name, doc, values in (
            ("successful_reauthentication", "SASL re-authentications that succeeded, per listener (KIP-368).",
             m.successful_reauthentications),
            ("failed_reauthentication", "SASL re-authentications that failed, per listener (KIP-368).",
             m.failed_reauthentications),
            ("expired_connections_killed", "Connections closed because their SASL session expired without a "
             "re-authentication, per listener (KIP-368).", m.expired_connections_killed)):
        out.append(_counter(f"kafka_server_socketservermetrics_{name}", doc, ["listener"],
                            [((listener, ), values.get(listener, 0)) for listener in broker.listeners]))
    authorizer = getattr(broker, "authorizer", None)
    if authorizer is not None:
        out.append(_counter("kafka_server_authorizer_authorization_denied", "Operations the ACLs refused.", [],
                            [((), authorizer.denied)]))
    out.append(_gauge("kafka_server_socketservermetrics_connection_count", "Open client connections, per listener.",
                      0, ["listener"], [((name, ), len(x._connections)) for name, x in broker.listeners.items()]))
    quotas = getattr(broker, "client_quotas", None)
    if quotas is not None:  # Kafka's per-client throttle-time sensors, summed per quota
        kinds = {"producer_byte_rate": "Produce", "consumer_byte_rate": "Fetch",
                 "controller_mutation_rate": "ControllerMutation", "request_percentage": "Request",
                 "connection_creation_rate": "ConnectionCreation"}
        out.append(_counter("logbus_broker_client_quota_throttled_responses", "Answers that throttled a client "
                            "over its quota, per quota type (Kafka's type=Produce/Fetch/ControllerMutation/Request "
                            "throttle-time sensors; ConnectionCreation: connections closed after a delay).",
                            ["quota_type"], [((kinds[k], ), quotas.throttled.get(k, (0, 0))[0]) for k in kinds]))
        out.append(_counter("logbus_broker_client_quota_throttle_seconds", "Time clients were throttled for, per "
                            "quota type.", ["quota_type"],
                            [((kinds[k], ), quotas.throttled.get(k, (0, 0))[1] / 1000) for k in kinds]))
        out.append(_gauge("logbus_broker_client_quota_entities", "Quota entities (users, client ids, IPs) with a "
                          "quota config.", len(quotas.quotas)))
    sessions = broker.fetch_sessions
    out += [_gauge("kafka_server_fetchsessioncache_numincrementalfetchsessions",
                   "Incremental fetch sessions (KIP-227) held.", len(sessions.sessions)),
            _gauge("kafka_server_fetchsessioncache_numincrementalfetchpartitionscached",
                   "Partitions in the incremental fetch sessions held.", sessions.partitions_cached()),
            _counter("kafka_server_fetchsessioncache_incrementalfetchsessionevictions",
                     "Incremental fetch sessions evicted to make room (IncrementalFetchSessionEvictionsPerSec).", [],
                     [((), sessions.evictions)])]
    out += _partition_gauges(broker)
    return out


def _partition_gauges(broker) -> list:
    led = under = under_min = offline = produce_waiting = 0
    sizes = []
    cluster = broker.cluster
    min_isr_default = broker.config["min.insync.replicas"]
    for name in sorted(broker.topics.topics):
        info = broker.topics.get(name)
        if info is None:
            continue
        needed = int(info.configs.get("min.insync.replicas", min_isr_default))
        for p in range(info.partitions):
            _error, leader, *_ = broker.partition_view(name, p)
            if leader < 0:
                offline += 1
            if cluster is None:
                plog = broker.logs.get(name, p)
                if plog is not None:
                    led += 1
                    sizes.append(((name, str(p)), plog.size_bytes))
                continue
            part = cluster.partition(name, p)
            if part is None:
                continue
            sizes.append(((name, str(p)), part.log.size_bytes))
            if part.is_leader:
                led += 1
                produce_waiting += len(part._waiters)
                if len(part.isr) < len(part.replicas):
                    under += 1
                if len(part.isr) < needed:
                    under_min += 1
    active = 1 if cluster is None or cluster.controller.active else 0
    fetch_waiting = sum(len(w) for w in broker._waiters.values())
    return [
        _gauge("kafka_server_replicamanager_leadercount", "Partitions this broker leads.", led),
        _gauge("kafka_server_replicamanager_underreplicatedpartitions",
               "Partitions this broker leads whose ISR is smaller than their replica set.", under),
        _gauge("kafka_server_replicamanager_underminisrpartitioncount",
               "Partitions this broker leads whose ISR is smaller than min.insync.replicas.", under_min),
        _gauge("kafka_controller_kafkacontroller_activecontrollercount", "1 on the active controller.", active),
        _gauge("kafka_controller_kafkacontroller_offlinepartitionscount",
               "Partitions without a leader (reported by the active controller, 0 elsewhere).",
               offline if active else 0),
        _gauge("kafka_log_log_size", "Bytes of a partition's log on this broker.", 0, ["topic", "partition"], sizes),
        _gauge("kafka_server_delayedoperationpurgatory_purgatorysize",
               "Requests waiting: produce (acks=all) and fetch (long polls).", 0, ["delayedoperation"],
               [(("Produce", ), produce_waiting), (("Fetch", ), fetch_waiting)]),
    ]
