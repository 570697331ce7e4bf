"""``logbus alertmanager``: Debian's Alertmanager (``/usr/bin/prometheus-alertmanager``) receiving the alerts of
the topology's Prometheus, and the generation of its configuration.

The configuration is JSON (valid YAML, which Alertmanager reads): one route grouping alerts by name and
datacenter (10 s before the first notification of a group, 1 min between updates, 1 h between repeats), alerts
of severity ``page`` and ``ticket`` to the receiver ``operators``. That receiver notifies the webhooks a topology
lists (``alertmanager_webhooks``: Alertmanager's webhook payload, version 4, POSTed to each URL); with none it
only holds the alerts, seen in Alertmanager's UI and API (``/api/v2/alerts``), until an operator adds the
integrations they use (email, Slack, PagerDuty: Alertmanager's own keys in the generated file). An inhibition
rule mutes a datacenter's other alerts while a ``KafkaNoActiveController`` of that datacenter fires (everything
else there follows from it). Alertmanager's own clustering (gossip on port 9094) is turned off: one instance.
``run`` replaces the process with Alertmanager (``exec``), as ``logbus prometheus`` does.
"""

from __future__ import annotations

import json

from logbus import prometheus

BINARY = "prometheus-alertmanager"


def config(webhooks: list[str] | None = None) -> str:
    receiver: dict = {"name": "operators"}
    if webhooks:
        receiver["webhook_configs"] = [{"url": url, "send_resolved": True} for url in webhooks]
    return json.dumps({
        "route": {"receiver": "operators", "group_by": ["alertname", "datacenter"], "group_wait": "10s",
                  "group_interval": "1m", "repeat_interval": "1h"},
        "receivers": [receiver],
        "inhibit_rules": [{"source_matchers": ["alertname = KafkaNoActiveController"],
                           "target_matchers": ["alertname != KafkaNoActiveController"],
                           "equal": ["datacenter"]}],
    }, indent=1) + "\n"


def binary() -> str:
    return prometheus.binary(BINARY, "prometheus-alertmanager")


def run(args) -> int:
    flags = [f"--storage.path={args.data_dir}", f"--web.listen-address={args.listen}", "--cluster.listen-address="]
    if args.external_url:
        flags.append(f"--web.external-url={args.external_url}")
    return prometheus.exec_debian("alertmanager", BINARY, "prometheus-alertmanager", args.config, args.data_dir, flags)
