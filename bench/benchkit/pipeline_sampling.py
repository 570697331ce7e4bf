"""The whole-pipeline benchmark's samples: every stage's counter (producers, end offsets, the mirror's and the
audit counters' /metrics), the audit report's windows and the CPU of every service's process tree."""

from __future__ import annotations

import json
import time
from pathlib import Path

from benchkit.pipeline_stages import PARTITIONS, TIERS, TOPIC
from benchkit.topology_run import http_session


def prom_samples(http, urls: list[str], name: str) -> list | None:
    """Every sample of metric ``name`` on the /metrics pages ``urls``; None if one is unreachable."""
    from prometheus_client.parser import text_string_to_metric_families

    out = []
    for url in urls:
        try:
            text = http.get(url, timeout=3).text
        except Exception:
            return None
        out += [sample for family in text_string_to_metric_families(text) for sample in family.samples
                if sample.name == name]
    return out


def prom_by_label(http, urls: list[str], name: str, label: str) -> dict[str, float] | None:
    """The samples of metric ``name`` on the /metrics pages ``urls``, summed by the value of ``label``; None if one
    is unreachable."""
    samples = prom_samples(http, urls, name)
    if samples is None:
        return None
    out: dict[str, float] = {}
    for sample in samples:
        if label in sample.labels:
            out[sample.labels[label]] = out.get(sample.labels[label], 0.0) + sample.value
    return out


def prom_values(http, urls: list[str], name: str, **labels) -> float | None:
    """The sum of the samples of metric ``name`` (labels matching) on the /metrics pages ``urls``; None if one is
    unreachable or none has it."""
    samples = prom_samples(http, urls, name)
    matching = [s.value for s in samples or () if all(s.labels.get(k) == v for k, v in labels.items())]
    return sum(matching) if matching else None


class Watermarks:
    """The sum of a topic's high watermarks on a cluster (ListOffsets through a consumer)."""

    def __init__(self, bootstrap: str):
        from confluent_kafka import Consumer

        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "pipeline-benchmark-watermarks",
                                  "enable.auto.commit": False})

    def total(self, topic: str) -> int | None:
        from confluent_kafka import TopicPartition

        try:
            return sum(self.consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=3, cached=False)[1]
                       for p in range(PARTITIONS))
        except Exception:
            return None

    def close(self) -> None:
        self.consumer.close()


class ServiceCpu:
    """CPU seconds of each service's process tree (the supervisor's child and its descendants)."""

    def __init__(self, state: Path):
        self.state = state

    def sample(self) -> dict[str, float]:
        import psutil

        out = {}
        for f in (self.state / "pids").glob("*.status"):
            try:
                pid = json.loads(f.read_text()).get("service_pid")
                if not pid:
                    continue
                root = psutil.Process(pid)
                total = 0.0
                for proc in [root, *root.children(recursive=True)]:
                    try:
                        t = proc.cpu_times()
                        total += t.user + t.system + t.children_user + t.children_system
                    except psutil.Error:
                        pass
                out[f.name[:-len(".status")]] = round(total, 2)
            except (OSError, ValueError, psutil.Error):
                continue
        return out


class Sampler:
    def __init__(self, topo: dict, net: int, state: Path, workers_dir: Path, start_ms: int):
        from logbus.status_numbers import metrics_address
        from logbus.topology import services

        self.http = http_session()
        # each stage's /metrics, from the topology's own services (every mirror service, each datacenter's counter)
        svcs = services(topo, "local", state)
        self.urls = {"mirror": [f"http://{metrics_address(s)}/metrics" for s in svcs
                                if s.kind == "mirror" and metrics_address(s)]}
        for dc in TIERS:
            self.urls[f"{dc}_counter"] = [f"http://{metrics_address(s)}/metrics" for s in svcs
                                          if s.kind == "counter" and s.datacenter == dc and metrics_address(s)]
            self.urls[f"{dc}_brokers"] = [f"http://{metrics_address(s)}/metrics" for s in svcs
                                          if s.kind == "broker" and s.datacenter == dc and metrics_address(s)]
        port = topo["ports"]["broker"]
        self.watermarks = {dc: Watermarks(",".join(f"127.{net}.{o}.{i}:{port}" for i in (1, 2, 3)))
                           for dc, o in (("live", 1), ("offline", 2))}
        self.audit = f"http://127.{net}.2.40:{topo['ports']['audit']}"
        self.workers_dir, self.start_ms = workers_dir, start_ms
        self.cpu = ServiceCpu(state)
        self.windows: dict[str, dict] = {}  # "start|tier" -> {"start", "end", "tier", "first_complete", ...}

    def producers(self) -> dict:
        out = {"sent": 0, "skipped": 0, "buffer_full": 0, "queued": 0, "cpu": 0.0, "states": []}
        for f in sorted(self.workers_dir.glob("producer*.json")):
            try:
                s = json.loads(f.read_text())
            except (OSError, ValueError):
                continue
            for k in ("sent", "skipped", "buffer_full", "queued"):
                out[k] += s.get(k, 0)
            out["cpu"] += s.get("cpu", 0.0)
            out["states"].append(s.get("state"))
        return out

    def audit_rows(self, now: float) -> int | None:
        try:
            rows = self.http.get(f"{self.audit}/api/report", params={"topic": TOPIC, "from": self.start_ms},
                                 timeout=10).json()
        except Exception:
            return None
        for r in rows:
            if r["tier"] not in TIERS:
                continue
            key = f"{r['window_start']}|{r['tier']}"
            w = self.windows.setdefault(key, {"start": r["window_start"], "end": r["window_end"], "tier": r["tier"],
                                              "first_complete": None, "first_seen": now})
            w.update(expected=r["expected"], received=r["received"], missing=r["missing"],
                     duplicates=r["duplicates"], completeness=r["completeness"], status=r["status"])
            if r["missing"] == 0 and w["first_complete"] is None:
                w["first_complete"] = now
            elif r["missing"]:
                w["first_complete"] = None  # not complete any more (a later producer event raised the expected)
        return len(rows)

    def sample(self) -> dict:
        now = time.time()
        row = {"t": now, "producers": self.producers()}
        for dc, wm in self.watermarks.items():
            row[dc] = wm.total(TOPIC)
        row["mirror"] = prom_values(self.http, self.urls["mirror"], "logbus_mirror_records_total")
        row["mirror_lag"] = prom_values(self.http, self.urls["mirror"], "logbus_mirror_lag_records_total")
        for dc in TIERS:
            row[f"{dc}_counter"] = prom_values(self.http, self.urls[f"{dc}_counter"],
                                               "logbus_audit_counter_records_total", topic=TOPIC)
        row["audit_rows"] = self.audit_rows(now)
        for dc in TIERS:  # the brokers' requests answered by API (what their per-request CPU is spent on)
            row[f"{dc}_requests"] = prom_by_label(self.http, self.urls[f"{dc}_brokers"],
                                                  "kafka_network_requestmetrics_requests_total", "request")
        row["cpu"] = self.cpu.sample()
        import psutil

        t = psutil.cpu_times()  # the whole machine's, other users' work included
        row["machine_busy_s"] = round(t.user + t.nice + t.system + t.irq + t.softirq + t.steal, 2)
        return row

    def close(self) -> None:
        for wm in self.watermarks.values():
            wm.close()
