"""The registry's Prometheus metrics (``metrics.listener=http://HOST:PORT``, logbus' key as the broker's): requests
by route template and status, request latency, whether this instance is the leader, elections and forwarded
writes, the ``_schemas`` replay. Names follow Confluent's JMX beans where one exists
(``kafka.schema.registry:type=master-slave-role`` → ``schema_registry_master_slave_role``)."""

from __future__ import annotations

import time
from collections import Counter

from prometheus_client.core import HistogramMetricFamily
from starlette.routing import Match

from schema_registry.core import SCHEMA_TYPES
from telemetry.exposition import counter, gauge

BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class RequestMetrics:
    """ASGI middleware (outermost): counts every answered request by (method, route template, status)."""

    def __init__(self, app, routes, forwarding=None):
        self.app, self.routes, self.forwarding = app, routes, forwarding
        self.requests: Counter = Counter()
        self.latency: dict[str, list] = {}  # route -> [bucket counts..., sum, count]

    def route_of(self, scope) -> str:
        """The template of the route that answered (the router leaves it in the scope), else the one that would
        have (a request refused or forwarded before it reached the router)."""
        answered = scope.get("route")
        if answered is not None and hasattr(answered, "path"):
            return answered.path
        for route in self.routes:
            match, _ = route.matches(scope)
            if match == Match.FULL:
                return route.path
        return "unmatched"

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        started, status = time.perf_counter(), [500]

        async def seen(message):
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, seen)
        finally:
            route = self.route_of(scope)
            self.requests[(scope["method"], route, str(status[0]))] += 1
            stats = self.latency.setdefault(route, [0] * (len(BUCKETS) + 2))
            took = time.perf_counter() - started
            for i, bound in enumerate(BUCKETS):
                if took <= bound:
                    stats[i] += 1
            stats[-2] += took
            stats[-1] += 1


def collect(requests: RequestMetrics, registry, store, election):
    """The metric families at scrape time."""
    def families():
        yield counter("schema_registry_requests", "HTTP requests answered, by method, route template and status",
                      labels=["method", "route", "status"], values=sorted(requests.requests.items()))
        latency = HistogramMetricFamily("schema_registry_request_latency_seconds", "Time to answer a request",
                                        labels=["route"])
        for route, stats in sorted(requests.latency.items()):
            cumulative = [(str(b), float(stats[i])) for i, b in enumerate(BUCKETS)] + [("+Inf", float(stats[-1]))]
            latency.add_metric([route], cumulative, stats[-2])
        yield latency
        leader = election is not None and election.is_leader
        yield gauge("schema_registry_master_slave_role", "1 while this instance is the elected leader (Confluent's "
                    "master-slave-role)", 1.0 if leader else 0.0)
        yield gauge("schema_registry_leader_known", "1 while this instance knows the leader",
                    1.0 if election is None or election.leader is not None else 0.0)
        yield counter("schema_registry_elections", "Leader assignments received", election.elections if election else 0)
        yield counter("schema_registry_forwarded_requests", "Writes forwarded to the leader",
                      election.forwarded if election else 0)
        yield gauge("schema_registry_store_applied_offset", "The last _schemas offset applied", store.applied)
        yield counter("schema_registry_store_records_skipped", "_schemas records that could not be applied",
                      store.skipped)
        yield gauge("schema_registry_registered_count", "Schemas known (ids)", len(registry.schemas))
        by_type = Counter(stored.schema_type for stored in registry.schemas.values())
        yield gauge("schema_registry_schemas", "Schemas known (ids) by schema type (Confluent's "
                    "avro/json/protobuf-schemas-created)", labels=["type"],
                    values=[((kind.lower(),), float(by_type.get(kind, 0))) for kind in SCHEMA_TYPES])
    return families
