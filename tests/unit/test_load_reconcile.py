"""The loads' reconcile step without Spark or brokers: the warehouse tier is judged against the time the plan cut
the offsets, not the time the load task started (in Airflow the load runs later, after a task hand-over and a
Spark start-up: windows that closed in between are not in the warehouse yet, so they are pending, not lost)."""

import json
import time

import pytest

from spark_jobs import load as cycle
from spark_jobs.config import LoadConfig

pytestmark = [pytest.mark.unit, pytest.mark.timeout(60)]
WINDOW_MS, PRODUCER = 1000, "p-1"


class FakeStore:
    def __init__(self, events):
        self._events = events

    def events(self):
        return list(self._events)

    def stats(self):
        return {"malformed_by_reason": {}}


class FakeWarehouse:
    """The part of :class:`spark_jobs.warehouse.Warehouse` the cycle's steps use, in a dict."""

    def __init__(self, manifests=(), counts=(), load_id=0):
        self.files = {"mem://wh/_audit/counts/load-000001.json": json.dumps(list(counts))} if counts else {}
        self._manifests, self.load_id, self.published = list(manifests), load_id, []

    def path(self, *parts):
        return "/".join(["mem://wh", *parts])

    def list_files(self, path):
        return sorted(f for f in self.files if f.startswith(path + "/"))

    def read_text(self, path):
        return self.files.get(path)

    def write_text(self, path, text):
        self.files[path] = text

    def delete(self, path):
        for f in [f for f in self.files if f == path or f.startswith(path + "/")]:
            del self.files[f]

    def manifests(self):
        return self._manifests

    def size(self, path):
        return sum(len(text) for f, text in self.files.items() if f == path or f.startswith(path + "/"))

    def staging(self, load_id):
        return self.path("_staging", f"load-{load_id:06d}")

    def recover(self):
        return []

    def ledger(self):
        return {"load_id": self.load_id, "offsets": {}}

    def publish(self, load_id, manifest):
        self.published.append({**manifest, "load_id": load_id})


def config():
    return LoadConfig({"bootstrap.servers": "b:1", "schema.registry.url": "http://r", "warehouse.path": "/wh",
                       "audit.cluster.offline.bootstrap.servers": "o:1", "audit.tiers": "warehouse",
                       "audit.window.ms": str(WINDOW_MS), "audit.grace.ms": "0"})


def produced(start_ms, first, last):
    return {"kind": "PRODUCED", "producer_id": PRODUCER, "topic": "clicks", "window_start": start_ms,
            "window_end": start_ms + WINDOW_MS, "first_seq": first, "last_seq": last, "emitted_at": 0}


def counted(start_ms, first, last):
    return {"topic": "clicks", "producer_id": PRODUCER, "window_start": start_ms, "window_end": start_ms + WINDOW_MS,
            "count": last - first + 1, "sequences": [[first, last]]}


def report_for(monkeypatch, tmp_path, manifest, events, counts):
    """The report of a real file:// warehouse (no Spark session: plain file calls) holding one published load."""
    import audit.collector
    import pyarrow.parquet as pq

    from spark_jobs.warehouse import Warehouse

    monkeypatch.setattr(audit.collector, "read_once", lambda clusters, registry, **kw: FakeStore(events))
    root = tmp_path / "wh"  # the same for every call: a second report replaces the first one's files
    wh = Warehouse(None, root.as_uri())
    wh.write_text(wh.path("_manifests", "load-000001.json"), json.dumps(manifest))
    wh.write_text(wh.path("_audit", "counts", "load-000001.json"), json.dumps(counts))
    report = cycle.reconcile_report(config(), wh)
    assert json.loads((root / "_audit" / "report.json").read_text()) == report
    table = pq.read_table(root / "_audit" / "report.parquet")  # a directory, as Spark writes it
    assert table.num_rows == len(report["rows"])
    assert sorted(table.column("window_start").to_pylist()) == sorted(r["window_start"] for r in report["rows"])
    return {r["window_start"]: r["status"] for r in report["rows"]}


def test_windows_closed_between_the_plan_and_the_load_start_are_pending_not_lost(monkeypatch, tmp_path):
    cut = (time.time() // 60 * 60) - 3600  # an hour ago, on a window boundary: every window below has closed
    cut_ms = int(cut * 1000)
    before, between, lost = cut_ms - 5 * WINDOW_MS, cut_ms + 10 * WINDOW_MS, cut_ms - 8 * WINDOW_MS
    events = [produced(before, 0, 99), produced(between, 100, 206), produced(lost, 300, 309)]
    # the plan cut the offsets at ``cut``: the load has 'before' in full, nothing of 'between' (produced after the
    # cut), and 'lost' only partly (a real loss: it closed long before the cut)
    counts = [counted(before, 0, 99), counted(lost, 300, 304)]
    manifest = {"load_id": 1, "ranges": {"clicks": {"0": [0, 105]}}, "planned_at": cut, "started_at": cut + 30,
                "finished_at": cut + 40}
    statuses = report_for(monkeypatch, tmp_path, manifest, events, counts)
    assert statuses == {before: "complete", between: "pending", lost: "lost"}

    # a manifest written before plans recorded their cut: judged against the load's start, as before
    old = {k: v for k, v in manifest.items() if k != "planned_at"}
    assert report_for(monkeypatch, tmp_path, old, events, counts) == {before: "complete", between: "lost", lost: "lost"}
    old["started_at"] = cut + 5  # the window closed after that load started: pending
    assert report_for(monkeypatch, tmp_path, old, events, counts)[between] == "pending"


def test_the_cut_time_and_the_pending_rule():
    assert cycle.warehouse_cut_ms([]) == 0
    assert cycle.warehouse_cut_ms([{"started_at": 1.0, "planned_at": 0.5}, {"started_at": 20.25}]) == 20250
    assert cycle.warehouse_cut_ms([{"started_at": 20.0, "planned_at": 12.5}]) == 12500
    rows = [{"tier": "warehouse", "status": "lost", "window_end": 12_000},
            {"tier": "warehouse", "status": "lost", "window_end": 13_000},
            {"tier": "warehouse", "status": "lost", "window_end": 11_000},
            {"tier": "offline", "status": "lost", "window_end": 13_000},
            {"tier": "warehouse", "status": "duplicated", "window_end": 13_000}]
    cycle.pending_after_cut(rows, 12_500, grace_ms=1000)
    assert [r["status"] for r in rows] == ["pending", "pending", "lost", "lost", "duplicated"]


def test_the_plan_records_its_cut_and_the_load_publishes_it(monkeypatch):
    import spark_jobs.warehouse

    wh = FakeWarehouse()
    monkeypatch.setattr(spark_jobs.warehouse, "Warehouse", lambda spark, url: wh)
    read_at = []
    monkeypatch.setattr(cycle, "plan", lambda c, ledger: read_at.append(time.time()) or {"clicks": {"0": [0, 5]}})
    monkeypatch.setattr(cycle, "load_topic", lambda spark, c, staging, topic, ranges: {
        "rows": 5, "quarantined": 0, "events": [], "seconds": {}})
    t0 = time.time()
    planned = cycle.plan_step(None, config(), say=lambda line: None)
    assert t0 <= planned["planned_at"] <= read_at[0]  # taken before the high watermarks are read
    json.dumps(planned)  # an Airflow XCom
    time.sleep(0.01)
    cycle.load_step(None, config(), planned, say=lambda line: None)
    (manifest,) = wh.published
    assert manifest["planned_at"] == planned["planned_at"] < manifest["started_at"]
    assert cycle.warehouse_cut_ms([manifest]) == int(planned["planned_at"] * 1000)

    # a plan from before this change (a retried load task's XCom) has no cut: the manifest has none either
    wh.load_id, wh.published = 1, []
    cycle.load_step(None, config(), {"load_id": 2, "ranges": {"clicks": {"0": [5, 9]}}}, say=lambda line: None)
    assert "planned_at" not in wh.published[0]
