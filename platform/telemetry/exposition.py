"""Serve a service's metrics in Prometheus' text format on ``http://HOST:PORT/metrics`` (the services'
``--metrics-listener`` option; the broker's ``metrics.listener`` key uses the same parser).

A service hands over a function that returns metric families (prometheus_client's ``*MetricFamily``): they are
built at scrape time from the service's own counters, so the service's hot path keeps plain integers and no
metric object is shared between threads.
"""

from __future__ import annotations

import logging
from typing import Callable, Iterable
from urllib.parse import urlparse

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import CollectorRegistry

log = logging.getLogger(__name__)


def parse_listener(value: str) -> tuple[str, int] | None:
    """``http://HOST:PORT`` → (host, port); empty → None. ValueError otherwise."""
    if not value:
        return None
    url = urlparse(value)
    try:
        port = url.port
    except ValueError:
        port = None
    if url.scheme != "http" or not port or url.path not in ("", "/"):
        raise ValueError(f"metrics listener {value!r} must be http://HOST:PORT")
    return url.hostname or "0.0.0.0", port


class _Collector:
    def __init__(self, collect: Callable[[], Iterable]):
        self._collect = collect

    def collect(self):
        try:
            return list(self._collect())
        except Exception:  # a scrape must not take the service down; Prometheus sees an empty answer
            log.exception("collecting metrics failed")
            return []


def registry_for(collect: Callable[[], Iterable]) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Collector(collect))
    return registry


class MetricsServer:
    """prometheus_client's HTTP server in a thread of its own; ``stop`` closes it."""

    def __init__(self, listener: str, collect: Callable[[], Iterable]):
        self.where = parse_listener(listener)
        self.collect = collect
        self._server = None

    def start(self) -> tuple[str, int] | None:
        if self.where is None:
            return None
        from prometheus_client import start_http_server

        self._server, _thread = start_http_server(self.where[1], self.where[0], registry=registry_for(self.collect))
        bound = self._server.server_address[:2]
        log.info("metrics on http://%s:%d/metrics", *bound)
        return bound

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None


def counter(name: str, doc: str, value: float | None = None, labels: list[str] | None = None,
            values: Iterable = ()) -> CounterMetricFamily:
    """A counter family: one value, or ``values`` of (label values tuple, value) with ``labels``."""
    if not labels:
        return CounterMetricFamily(name, doc, value=value or 0)
    family = CounterMetricFamily(name, doc, labels=labels)
    for key, v in values:
        family.add_metric(list(key), v)
    return family


def gauge(name: str, doc: str, value: float | None = None, labels: list[str] | None = None,
          values: Iterable = ()) -> GaugeMetricFamily:
    if not labels:
        return GaugeMetricFamily(name, doc, value=value or 0)
    family = GaugeMetricFamily(name, doc, labels=labels)
    for key, v in values:
        family.add_metric(list(key), v)
    return family
