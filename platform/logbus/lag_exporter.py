"""``logbus lag-exporter``: every consumer group's lag as Prometheus metrics, the role kafka-lag-exporter, Burrow
or kafka_exporter play next to Kafka (brokers do not export it: the group's coordinator knows the committed
offsets, the partitions' leaders know the log ends). One per cluster in the topology.

At each scrape (results kept ``CACHE_S`` so concurrent scrapes cost one round): the groups (ListGroups), their
committed offsets (OffsetFetch) and the log end offsets of those partitions (ListOffsets, latest, batched), with
kafka_exporter's names::

    kafka_consumergroup_current_offset{consumergroup,topic,partition}
    kafka_consumergroup_lag{consumergroup,topic,partition}        log end - committed (partitions with a commit)
    kafka_consumergroup_lag_sum{consumergroup}
    kafka_consumergroup_members{consumergroup}

``--exclude-groups`` (a regex) leaves groups out whose offsets are not this cluster's own: the exactly-once
mirror commits the source's offsets on the target (its lag is the mirror's own ``logbus_mirror_lag_records``).
"""

from __future__ import annotations

import logging
import re
import signal
import sys
import threading
import time

from telemetry.exposition import MetricsServer, gauge

log = logging.getLogger(__name__)
CACHE_S = 2.0
TIMEOUT_S = 10.0


def group_offsets(admin, exclude: re.Pattern | None = None) -> list[dict]:
    """One row per (group, topic, partition) with a committed offset: current offset, log end, lag; plus the
    group's member count."""
    from confluent_kafka import ConsumerGroupTopicPartitions
    from confluent_kafka.admin import OffsetSpec

    listed = admin.list_consumer_groups(request_timeout=TIMEOUT_S).result()
    groups = sorted(g.group_id for g in listed.valid if not (exclude and exclude.fullmatch(g.group_id)))
    if not groups:
        return []
    members = {}
    for gid, future in admin.describe_consumer_groups(groups, request_timeout=TIMEOUT_S).items():
        try:
            members[gid] = len(future.result().members)
        except Exception:  # noqa: BLE001 — deleted meanwhile: no members
            members[gid] = 0
    committed: dict[str, dict[tuple[str, int], int]] = {}
    for gid in groups:  # one group per request (librdkafka's limit for list_consumer_group_offsets)
        result = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(gid)],
                                                   request_timeout=TIMEOUT_S)[gid].result()
        committed[gid] = {(tp.topic, tp.partition): tp.offset for tp in result.topic_partitions if tp.offset >= 0}
    partitions = {tp for offsets in committed.values() for tp in offsets}
    ends: dict[tuple[str, int], int] = {}
    if partitions:
        from confluent_kafka import TopicPartition

        asked = {TopicPartition(t, p): OffsetSpec.latest() for t, p in sorted(partitions)}
        for tp, future in admin.list_offsets(asked, request_timeout=TIMEOUT_S).items():
            try:
                ends[(tp.topic, tp.partition)] = future.result().offset
            except Exception:  # noqa: BLE001 — a partition without a leader now: no log end this round
                continue
    rows = []
    for gid in groups:
        for (topic, partition), offset in sorted(committed[gid].items()):
            end = ends.get((topic, partition))
            rows.append({"group": gid, "topic": topic, "partition": partition, "current_offset": offset,
                         "log_end_offset": end, "lag": None if end is None else max(end - offset, 0),
                         "members": members.get(gid, 0)})
        if not committed[gid]:
            rows.append({"group": gid, "topic": None, "partition": None, "members": members.get(gid, 0)})
    return rows


def families(rows: list[dict]) -> list:
    with_offsets = [r for r in rows if r["topic"] is not None]
    lag_sum: dict[str, int] = {}
    for r in with_offsets:
        if r["lag"] is not None:
            lag_sum[r["group"]] = lag_sum.get(r["group"], 0) + r["lag"]
    members = {r["group"]: r["members"] for r in rows}
    key = ["consumergroup", "topic", "partition"]
    return [
        gauge("kafka_consumergroup_current_offset", "A group's committed offset, per partition.", labels=key,
              values=[((r["group"], r["topic"], str(r["partition"])), r["current_offset"]) for r in with_offsets]),
        gauge("kafka_consumergroup_lag", "Log end offset minus the group's committed offset, per partition.",
              labels=key, values=[((r["group"], r["topic"], str(r["partition"])), r["lag"]) for r in with_offsets
                                  if r["lag"] is not None]),
        gauge("kafka_consumergroup_lag_sum", "A group's lag over all its partitions.", labels=["consumergroup"],
              values=[((g, ), v) for g, v in sorted(lag_sum.items())]),
        gauge("kafka_consumergroup_members", "Members of a group now.", labels=["consumergroup"],
              values=[((g, ), v) for g, v in sorted(members.items())]),
    ]


class LagExporter:
    def __init__(self, client_conf: dict, exclude: str | None = None):
        from confluent_kafka.admin import AdminClient

        self.admin = AdminClient({**client_conf, "log_level": 3})
        self.exclude = re.compile(exclude) if exclude else None
        self._lock = threading.Lock()
        self._cached: tuple[float, list] = (0.0, [])

    def collect(self) -> list:
        with self._lock:  # concurrent scrapes share one round
            at, rows = self._cached
            if time.monotonic() - at > CACHE_S:
                rows = group_offsets(self.admin, self.exclude)
                self._cached = (time.monotonic(), rows)
        return families(rows)


def run(args) -> int:
    from logbus.user_configs import client_config

    try:
        exporter = LagExporter(client_config(args.bootstrap_server, args.command_config), args.exclude_groups)
        server = MetricsServer(args.metrics_listener, exporter.collect)
        if server.where is None:
            raise ValueError("--metrics-listener is required")
        server.start()
    except (ValueError, OSError, re.error) as exc:
        print(f"logbus: lag-exporter: {exc}", file=sys.stderr)
        return 2
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        while not stop.wait(3600):
            pass
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
    return 0
