"""The few numbers per service that ``logbus status`` shows next to up/down, read from the topology's Prometheus
(one query per number, over every instance at once): a broker's records in per second and under-replicated
partitions, the mirror's records per second and lag, a counter's records per second, the audit service's lowest
closed-window completeness. Without a Prometheus in the topology, or while it does not answer, there are none."""

from __future__ import annotations

import json
import urllib.parse
import urllib.request

from logbus.topology import Service

QUERIES = {
    "broker": {"records_in_per_s": "sum by (instance) (rate(kafka_server_brokertopicmetrics_messagesin_total[1m]))",
               "under_replicated_partitions":
                   "sum by (instance) (kafka_server_replicamanager_underreplicatedpartitions)"},
    "mirror": {"records_per_s": "sum by (instance) (rate(logbus_mirror_records_total[1m]))",
               "lag_records": "sum by (instance) (logbus_mirror_lag_records_total)"},
    "counter": {"records_per_s": "sum by (instance) (rate(logbus_audit_counter_records_total[1m]))"},
    "lag": {"consumer_group_lag": "sum by (instance) (kafka_consumergroup_lag_sum)"},
    "audit": {"lowest_closed_window_completeness": "min by (instance) "
                                                   "(logbus_audit_closed_window_completeness_percent)"},
}


def metrics_address(s: Service) -> str | None:
    """host:port of a service's /metrics (as Prometheus' ``instance`` label), if it has one."""
    if s.kind == "broker":
        for line in s.files.get("server.properties", "").splitlines():
            if line.startswith("metrics.listener="):
                return line.split("://", 1)[1].rstrip("/")
    if "--metrics-listener" in s.argv:
        return s.argv[s.argv.index("--metrics-listener") + 1].split("://", 1)[1].rstrip("/")
    if s.kind == "audit" and s.port:
        return f"{s.host}:{s.port}"
    return None


def _query(base: str, expr: str, timeout: float) -> dict[str, float]:
    url = f"{base}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback: never through a proxy
    with opener.open(url, timeout=timeout) as r:
        result = json.loads(r.read())["data"]["result"]
    return {row["metric"].get("instance", ""): float(row["value"][1]) for row in result}


def numbers(svcs: list[Service], timeout: float = 3.0) -> dict[str, dict[str, float]]:
    """service name -> {number: value}; empty when there is no Prometheus or it does not answer."""
    prom = next((s for s in svcs if s.kind == "prometheus"), None)
    if prom is None:
        return {}
    base = f"http://{prom.host}:{prom.port}"
    by_address = {metrics_address(s): s.name for s in svcs if metrics_address(s)}
    out: dict[str, dict[str, float]] = {}
    try:
        for kind, queries in QUERIES.items():
            if not any(s.kind == kind for s in svcs):
                continue
            for number, expr in queries.items():
                for instance, value in _query(base, expr, timeout).items():
                    name = by_address.get(instance)
                    if name is not None:
                        out.setdefault(name, {})[number] = round(value, 1)
    except (OSError, ValueError, KeyError):
        return out
    return out


def render(values: dict[str, float]) -> str:
    short = {"records_in_per_s": "in {:g}/s", "under_replicated_partitions": "URP {:g}", "records_per_s": "{:g}/s",
             "lag_records": "lag {:g}", "consumer_group_lag": "groups' lag {:g}",
             "lowest_closed_window_completeness": "closed windows ≥ {:g}%"}
    return ", ".join(short[k].format(v) for k, v in values.items() if k in short)
