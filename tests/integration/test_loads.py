"""Warehouse loads with real parts: a broker, the schema registry, Spark (local mode) through ``logbus load``:
Parquet rows equal the produced Avro records, the ledger advances, a second load takes only what is new, a
record with an unknown schema id goes to quarantine, and a load killed at any point and rerun publishes every
record exactly once."""

from __future__ import annotations

import json
import os
import signal
import struct
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.dataset as ds
import pytest
from audit import AuditedProducer
from audit.ranges import runs
from confluent_kafka import Producer
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from support import REPO, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(420)]
SCHEMA = json.dumps({"type": "record", "name": "PageView", "namespace": "demo", "fields": [
    {"name": "member", "type": "long"}, {"name": "url", "type": "string"},
    {"name": "referrer", "type": ["null", "string"], "default": None},
    {"name": "tags", "type": {"type": "array", "items": "string"}, "default": []}]})


class Traffic:
    def __init__(self, broker, registry, topic: str):
        self.broker, self.registry, self.topic = broker, registry, topic
        self.serializer = AvroSerializer(SchemaRegistryClient({"url": registry.url}), SCHEMA)
        self.producer = AuditedProducer({"bootstrap.servers": broker.bootstrap, "schema.registry.url": registry.url,
                                         "audit.window.ms": 1000, "linger.ms": 5})
        self.sent: list[dict] = []

    def send(self, count: int, partition: int = -1) -> None:
        topic = self.topic
        for _ in range(count):
            i = len(self.sent)
            record = {"member": i, "url": f"/jobs/{i % 13}", "referrer": None if i % 3 else f"r{i}",
                      "tags": [f"t{i % 4}"] * (i % 3)}
            value = self.serializer(record, SerializationContext(topic, MessageField.VALUE))
            self.producer.produce(topic, value, key=str(i).encode(), partition=partition)
            self.sent.append(record)
        assert self.producer.flush(30) == 0


def load_config(tmp_path: Path, broker, registry, topic: str) -> Path:
    path = tmp_path / "load.properties"
    path.write_text(f"bootstrap.servers={broker.bootstrap}\nschema.registry.url={registry.url}\n"
                    f"warehouse.path={tmp_path / 'warehouse'}\ntopics={topic}\nspark.master=local[2]\n"
                    f"audit.window.ms=1000\naudit.grace.ms=0\n"
                    f"audit.cluster.offline.bootstrap.servers={broker.bootstrap}\naudit.tiers=warehouse\n"
                    "load.max.records.per.partition=1500\n")
    return path


def run_load(config: Path, crash_at: str | None = None, timeout: float = 240) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(REPO / "platform"))
    env.pop("LOGBUS_LOAD_CRASH_AT", None)
    if crash_at:
        env["LOGBUS_LOAD_CRASH_AT"] = crash_at
    return subprocess.run([sys.executable, "-m", "logbus.cli", "load", "--config", str(config)], env=env,
                          capture_output=True, text=True, timeout=timeout)


def warehouse_rows(tmp_path: Path, what: str) -> list[dict]:
    root = tmp_path / "warehouse" / what
    if not root.exists():
        return []
    return ds.dataset(str(root), format="parquet", partitioning="hive").to_table().to_pylist()


def check_exactly_once(tmp_path: Path, traffic: Traffic) -> list[dict]:
    rows = warehouse_rows(tmp_path, f"topic={traffic.topic}")
    got = sorted(((r["member"], r["url"], r["referrer"], tuple(r["tags"])) for r in rows))
    want = sorted(((r["member"], r["url"], r["referrer"], tuple(r["tags"])) for r in traffic.sent))
    assert len(got) == len(want), f"{len(got)} rows in the warehouse, {len(want)} produced"
    assert got == want
    assert len({(r["_partition"], r["_offset"]) for r in rows}) == len(rows)
    return rows


def counts_of(rows: list[dict], topic: str, window_ms: int) -> list[dict]:
    """The warehouse tier's counts of ``rows`` (per producer and window: rows, runs of distinct sequences)."""
    groups: dict[tuple[str, int], list] = {}
    for r in rows:
        if None not in (r["_producer"], r["_seq"], r["_generated"]):
            entry = groups.setdefault((r["_producer"], r["_generated"] - r["_generated"] % window_ms), [0, set()])
            entry[0] += 1
            entry[1].add(r["_seq"])
    out = []
    for (pid, start), (n, seqs) in sorted(groups.items()):
        out.append({"topic": topic, "producer_id": pid, "window_start": start, "window_end": start + window_ms,
                    "count": n, "sequences": [list(r) for r in runs(seqs)]})
    return out


def test_load_writes_the_records_advances_the_ledger_and_quarantines(broker, registry, tmp_path):
    """Three partitions; the second load's new records are all in one of them: it reads that partition's new
    records and nothing of the other two (they are not in its plan; read as a subscribed topic's unnamed
    partitions they were loaded again from their start). A third load finds nothing new."""
    from confluent_kafka.admin import AdminClient, NewTopic

    reg = registry(broker.bootstrap)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})  # kept: a collected client cancels its futures
    admin.create_topics([NewTopic("pageviews", 3, 1)])["pageviews"].result(30)
    traffic = Traffic(broker, reg, "pageviews")
    traffic.send(2500)
    junk = Producer({"bootstrap.servers": broker.bootstrap})
    junk.produce("pageviews", b"\x00" + struct.pack(">I", 424242) + b"\x02\x04ab", key=b"bad")
    assert junk.flush(10) == 0
    config = load_config(tmp_path, broker, reg, "pageviews")
    out = run_load(config)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "load 1: published pageviews: 2500 rows, 1 quarantined" in out.stdout
    rows = check_exactly_once(tmp_path, traffic)
    first = next(r for r in rows if r["member"] == 0)
    assert first["_producer"] == traffic.producer.producer_id and first["_seq"] == 0 and first["_schema_id"] >= 1
    assert first["date"] == time.strftime("%Y-%m-%d", time.gmtime()) and 0 <= int(first["hour"]) < 24
    quarantine = warehouse_rows(tmp_path, "_quarantine/topic=pageviews")
    assert len(quarantine) == 1 and quarantine[0]["_error"] == "unknown schema id 424242"
    assert quarantine[0]["_key"] == b"bad" and quarantine[0]["_value"].endswith(b"\x02\x04ab")
    ledger = json.loads((tmp_path / "warehouse" / "_ledger.json").read_text())
    assert ledger["load_id"] == 1 and sum(ledger["offsets"]["pageviews"].values()) == 2501
    manifest = json.loads((tmp_path / "warehouse" / "_manifests" / "load-000001.json").read_text())
    assert manifest["rows"] == {"pageviews": 2500} and manifest["quarantined"] == {"pageviews": 1}
    assert all(Path(f.removeprefix("file:")).exists() for f in manifest["files"])
    counted = json.loads((tmp_path / "warehouse" / "_audit" / "counts" / "load-000001.json").read_text())
    assert counted == counts_of(rows, "pageviews", 1000)  # taken in the write's pass, equal to the rows written
    report = json.loads((tmp_path / "warehouse" / "_audit" / "report.json").read_text())
    assert report["rows"] and all(r["status"] == "complete" and r["tier"] == "warehouse" for r in report["rows"])
    assert sum(r["expected"] for r in report["rows"]) == 2500
    assert "<th colspan=6>warehouse</th>" in (tmp_path / "warehouse" / "_audit" / "report.html").read_text()

    traffic.send(700, partition=1)  # the next load takes only what is new, from that partition only
    out = run_load(config)
    assert out.returncode == 0, out.stderr[-3000:]
    second = out.stdout.split("load 2:")[1]
    assert "pageviews[1] " in second and "pageviews[0]" not in second and "pageviews[2]" not in second, out.stdout
    assert "load 2: published pageviews: 700 rows, 0 quarantined" in out.stdout
    check_exactly_once(tmp_path, traffic)
    assert json.loads((tmp_path / "warehouse" / "_ledger.json").read_text())["load_id"] == 2
    out = run_load(config)
    assert out.returncode == 0 and "nothing new to load" in out.stdout


def test_a_load_killed_anywhere_and_rerun_publishes_exactly_once(broker, registry, tmp_path):
    reg = registry(broker.bootstrap)
    traffic = Traffic(broker, reg, "clicks")
    traffic.send(3000)
    config = load_config(tmp_path, broker, reg, "clicks")
    # (a staging output without a publication intent, complete or not, is discarded: the kill -9 below leaves
    # one; unit-tested on plain files in test_local_files.py)
    # crash in the middle of publication, after one file was moved: rolled forward by the next run
    out = run_load(config, crash_at="publish.move:1")
    assert out.returncode == 137, out.stderr[-3000:]
    assert 0 < len(warehouse_rows(tmp_path, "topic=clicks")) < 3000  # half published: what a reader must never rely on
    traffic.send(500)
    # kill -9 of the whole job (driver and Spark's JVM) while Spark writes the staging files
    env = dict(os.environ, PYTHONPATH=str(REPO / "platform"))
    with open(tmp_path / "killed-load.log", "wb") as log:
        job = subprocess.Popen([sys.executable, "-m", "logbus.cli", "load", "--config", str(config)], env=env,
                               stdout=log, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        wait_until(lambda: list((tmp_path / "warehouse" / "_staging").glob("load-000002/data/*")),
                   180, interval=0.05, what="the load writing its staging files")
    finally:
        os.killpg(job.pid, signal.SIGKILL)
        job.wait()
    assert "recovery: rolled load 1 forward" in (tmp_path / "killed-load.log").read_text()
    out = run_load(config)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "recovery: discarded the staging output of load 2" in out.stdout
    check_exactly_once(tmp_path, traffic)
    ledger = json.loads((tmp_path / "warehouse" / "_ledger.json").read_text())
    assert sum(ledger["offsets"]["clicks"].values()) == 3500
    report = json.loads((tmp_path / "warehouse" / "_audit" / "report.json").read_text())
    assert sum(r["expected"] for r in report["rows"]) == 3500
    assert all(r["status"] == "complete" for r in report["rows"]), report["rows"]


def airflow_env(tmp_path: Path, config: Path, port: int) -> dict:
    (tmp_path / "passwords.json").write_text(json.dumps({"admin": "audit-test-password"}))
    return dict(os.environ, AIRFLOW_HOME=str(tmp_path / "airflow"), AIRFLOW__CORE__DAGS_FOLDER=str(REPO / "dags"),
                AIRFLOW__CORE__PLUGINS_FOLDER=str(REPO / "airflow_plugins"), AIRFLOW__CORE__LOAD_EXAMPLES="False",
                AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS="admin:admin",
                AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS="False",
                AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE=str(tmp_path / "passwords.json"),
                AIRFLOW__API__BASE_URL=f"http://127.0.0.1:{port}", LOGBUS_LOAD_CONFIG=str(config))


def test_airflow_dag_loads_and_the_audit_page_renders_behind_the_login(broker, registry, tmp_path):
    import requests
    from browser import Browser
    from support import free_port

    reg = registry(broker.bootstrap)
    traffic = Traffic(broker, reg, "jobviews")
    for _ in range(3):  # a few audit windows
        traffic.send(600)
        time.sleep(1.1)
    config = load_config(tmp_path, broker, reg, "jobviews")
    port = free_port()
    env = airflow_env(tmp_path, config, port)
    airflow = str(Path(sys.executable).parent / "airflow")
    out = subprocess.run([airflow, "db", "migrate"], env=env, capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stderr[-3000:]
    out = subprocess.run([airflow, "dags", "test", "logbus_load"], env=env, capture_output=True, text=True,
                         timeout=300)
    log = out.stdout + out.stderr
    assert out.returncode == 0, log[-5000:]
    assert "DagRun Finished: dag_id=logbus_load" in log and "state=success" in log
    check_exactly_once(tmp_path, traffic)
    ledger = json.loads((tmp_path / "warehouse" / "_ledger.json").read_text())
    assert ledger["load_id"] == 1 and sum(ledger["offsets"]["jobviews"].values()) == 1800
    report = json.loads((tmp_path / "warehouse" / "_audit" / "report.json").read_text())
    assert len(report["rows"]) >= 3 and all(r["status"] == "complete" for r in report["rows"])
    assert (tmp_path / "warehouse" / "_audit" / "report.parquet").is_dir()

    # the Airflow UI with the plugin: the page needs the Airflow login, then renders the report table
    with open(tmp_path / "api-server.log", "wb") as api_log:
        server = subprocess.Popen([airflow, "api-server", "--host", "127.0.0.1", "--port", str(port),
                                   "--workers", "1"], env=env, stdout=api_log, stderr=subprocess.STDOUT,
                                  start_new_session=True)
    try:
        base = f"http://127.0.0.1:{port}"
        wait_until(lambda: _ok(requests, f"{base}/api/v2/monitor/health"), 120, interval=0.5,
                   what="the Airflow API server")
        anonymous = requests.get(f"{base}/logbus-audit/", timeout=30)
        assert anonymous.status_code == 401
        token = requests.post(f"{base}/auth/token", json={"username": "admin", "password": "audit-test-password"},
                              timeout=30).json()["access_token"]
        page = requests.get(f"{base}/logbus-audit/", headers={"Authorization": f"Bearer {token}"}, timeout=30)
        assert page.status_code == 200 and "<th colspan=6>warehouse</th>" in page.text
        assert page.text.count(">complete<") == len(report["rows"])
        with Browser() as browser:
            browser.set_cookie(base + "/", "_token", token)
            browser.open(f"{base}/plugin/logbus-audit")
            text = browser.wait_for("(() => { const f = document.querySelector('iframe');"
                                    " const t = f && f.contentDocument && f.contentDocument.body"
                                    " && f.contentDocument.body.innerText;"
                                    " return t && t.includes('complete') && t; })()", 90)
            assert "jobviews" in text and "warehouse" in text
            assert "Audit" in browser.evaluate("document.body.innerText")  # the navigation entry
            time.sleep(1)
            png = browser.screenshot(tmp_path / "airflow-audit.png")
        assert png.startswith(b"\x89PNG") and len(png) > 20_000
        if os.environ.get("LOGBUS_SCREENSHOT_DIR"):  # how docs/airflow-audit-page.png is refreshed
            (Path(os.environ["LOGBUS_SCREENSHOT_DIR"]) / "airflow-audit-page.png").write_bytes(png)
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()


def _ok(requests, url: str) -> bool:
    try:
        return requests.get(url, timeout=5).status_code == 200
    except requests.RequestException:
        return False


def test_a_load_on_a_full_disk_fails_cleanly_and_the_next_one_publishes_exactly_once(broker, registry, tmp_path):
    """The warehouse's filesystem (a small tmpfs) full while a load writes: the load exits non-zero with one line
    naming the cause, publishes nothing and leaves the ledger as it was; once space is back, the next load
    publishes every record once."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    warehouse = tmp_path / "warehouse"
    warehouse.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(warehouse)],
                             capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs: {mounted.stderr.strip()}")
    try:
        reg = registry(broker.bootstrap)
        traffic = Traffic(broker, reg, "full-disk-clicks")
        traffic.send(1000)
        config = load_config(tmp_path, broker, reg, "full-disk-clicks")
        out = run_load(config)
        assert out.returncode == 0, out.stderr[-3000:]
        ledger_before = (warehouse / "_ledger.json").read_bytes()
        traffic.send(3000)
        filler = warehouse / "filler"
        with open(filler, "wb") as f:  # the disk full but for 32 KiB: the load's data does not fit
            try:
                while True:
                    f.write(b"\0" * 65536)
                    f.flush()
            except OSError:
                pass
        os.truncate(filler, max(filler.stat().st_size - 32768, 0))
        out = run_load(config)
        assert out.returncode != 0, out.stdout[-3000:]
        ours = [line for line in out.stderr.splitlines() if line.startswith("logbus: ")]  # (Spark logs around it)
        assert ours == ["logbus: load failed: java.io.IOException: No space left on device"], out.stderr[-3000:]
        assert "Traceback" not in out.stderr, out.stderr[-3000:]
        assert (warehouse / "_ledger.json").read_bytes() == ledger_before
        assert len(warehouse_rows(tmp_path, "topic=full-disk-clicks")) == 1000  # nothing of the failed load
        filler.unlink()
        out = run_load(config)
        assert out.returncode == 0, out.stderr[-3000:]
        check_exactly_once(tmp_path, traffic)
        ledger = json.loads((warehouse / "_ledger.json").read_text())
        assert sum(ledger["offsets"]["full-disk-clicks"].values()) == 4000
    finally:
        subprocess.run(["umount", "-l", str(warehouse)], check=False)
