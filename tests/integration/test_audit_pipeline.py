"""The audit end to end with real processes: audited producers → live broker (127.0.1.1) → mirror (or a test
copier that drops and replays on purpose) → offline broker (127.0.2.1), a tier counter on each side, and the audit
service reconciling the ``_audit`` topics of both clusters over HTTP."""

from __future__ import annotations

import struct
import time
from collections import defaultdict

import pytest
import requests
from audit import AuditedProducer
from audit.events import PRODUCER_HEADER, SEQUENCE_HEADER, TIME_HEADER, window_of
from audit.ranges import RangeSet
from confluent_kafka import Consumer, Producer, TopicPartition
from support import (
    BrokerProcess,
    LogbusProcess,
    RegistryProcess,
    free_port,
    mirror_process,
    read_topic,
    wait_for_port,
    wait_until,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]
WINDOW_MS = 1000


class Pipeline:
    def __init__(self, root, grace_ms: int):
        self.root = root
        self.live = BrokerProcess(root / "live", host="127.0.1.1", num_partitions=2).start()
        self.offline = BrokerProcess(root / "offline", host="127.0.2.1", num_partitions=2).start()
        self.registry = RegistryProcess(root / "registry", self.live.bootstrap,
                                        kafkastore_topic_replication_factor="1").start()
        self.procs: list[LogbusProcess] = []
        self.counters = {tier: self._counter(tier, b.bootstrap)
                         for tier, b in (("live", self.live), ("offline", self.offline))}
        port = free_port()
        (root / "audit.properties").write_text(
            f"listeners=http://127.0.0.1:{port}\nschema.registry.url={self.registry.url}\n"
            f"audit.cluster.live.bootstrap.servers={self.live.bootstrap}\n"
            f"audit.cluster.offline.bootstrap.servers={self.offline.bootstrap}\n"
            f"audit.tiers=live,offline\naudit.grace.ms={grace_ms}\n")
        self.service = self.start(LogbusProcess(root, "audit-service", ["audit-service",
                                                                       str(root / "audit.properties")]))
        wait_for_port("127.0.0.1", port, timeout=60, proc=self.service.proc)
        self.url = f"http://127.0.0.1:{port}"

    def _counter(self, tier: str, bootstrap: str) -> LogbusProcess:
        (self.root / f"{tier}.properties").write_text(f"bootstrap.servers={bootstrap}\n")
        return self.start(LogbusProcess(self.root, f"counter-{tier}", [
            "audit-counter", "--tier", tier, "--consumer.config", str(self.root / f"{tier}.properties"),
            "--whitelist", "pageviews", "--schema-registry-url", self.registry.url, "--window-ms", str(WINDOW_MS),
            "--emit-interval-ms", "300"]))

    def start(self, proc: LogbusProcess) -> LogbusProcess:
        self.procs.append(proc)
        return proc.start()

    def report(self, **params) -> list[dict]:
        r = requests.get(self.url + "/api/report", params=params, timeout=10)
        assert r.status_code == 200, r.text
        return r.json()

    def status(self) -> dict:
        return requests.get(self.url + "/api/status", timeout=10).json()

    def stop(self) -> None:
        for p in reversed(self.procs):
            p.stop()
        self.registry.stop()
        self.offline.stop()
        self.live.stop()


@pytest.fixture
def pipeline(tmp_path):
    made = []

    def make(grace_ms: int = 0) -> Pipeline:
        made.append(Pipeline(tmp_path, grace_ms))
        return made[-1]

    yield make
    for p in made:
        p.stop()


def produce_traffic(p: Pipeline, per_producer: int, on_window=None) -> dict[str, list[int]]:
    """Two audited producers ("frontend-1", "frontend-2") over several windows; returns each one's sequences."""
    producers = [AuditedProducer({"bootstrap.servers": p.live.bootstrap, "linger.ms": 5, "audit.window.ms": WINDOW_MS,
                                  "audit.host": f"frontend-{i + 1}", "schema.registry.url": p.registry.url})
                 for i in range(2)]
    bursts = 4
    for burst in range(bursts):
        for i in range(per_producer // bursts):
            for n, prod in enumerate(producers):
                prod.produce("pageviews", f"{n}:{burst}:{i}".encode(), key=f"member-{i % 97}".encode())
        for prod in producers:
            prod.poll(0)
        time.sleep(0.6)
        if on_window:
            on_window(burst)
    for prod in producers:
        assert prod.flush(30) == 0
    return {prod.producer_id: list(range(per_producer)) for prod in producers}


def records_in(bootstrap: str, topic: str) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "audit-e2e-check"})
    try:
        md = consumer.list_topics(timeout=10).topics.get(topic)  # naming no topic: never auto-creates it
        return sum(max(consumer.get_watermark_offsets(TopicPartition(topic, part), timeout=10)[1], 0)
                   for part in (md.partitions if md else ()))
    finally:
        consumer.close()


def all_complete(p: Pipeline, expected_total: int):
    rows = p.report(topic="pageviews")
    tiers = {r["tier"] for r in rows}
    if tiers != {"live", "offline"} or not all(r["status"] == "complete" for r in rows):
        return None
    per_tier = defaultdict(int)
    for r in rows:
        per_tier[r["tier"]] += r["expected"]
    return rows if all(v == expected_total for v in per_tier.values()) else None


def test_mirrored_traffic_is_complete_on_every_tier_and_a_counter_kill_changes_nothing(pipeline, tmp_path):
    p = pipeline(grace_ms=0)
    p.start(mirror_process(tmp_path / "mirror", p.live.bootstrap, p.offline.bootstrap, "pageviews"))

    def kill_offline_counter(burst: int) -> None:
        if burst == 1:  # kill -9 after its first complete round, mid-traffic; the restart must not double count
            wait_until(lambda: records_in(p.offline.bootstrap, "_audit"), 60, interval=0.3,
                       what="the offline counter's first round")
            time.sleep(0.5)  # the round marker follows its snapshots in the same flush
            p.counters["offline"].kill9()
            p.counters["offline"].start()

    sent = produce_traffic(p, 2000, on_window=kill_offline_counter)
    total = sum(len(s) for s in sent.values())
    rows = wait_until(lambda: all_complete(p, total), 90, interval=1, what="a 100% report on both tiers")
    assert {r["tier"] for r in rows} == {"live", "offline"}
    assert len({r["window_start"] for r in rows}) >= 2  # the traffic spans several windows
    for r in rows:
        assert r["received"] == r["distinct"] == r["expected"] and r["missing"] == 0 and r["duplicates"] == 0
        assert r["completeness"] == 100.0 and r["window_end"] - r["window_start"] == WINDOW_MS
    assert "tier offline: recovered" in p.counters["offline"].log_text()
    # the filters of the API
    one = rows[0]
    assert p.report(tier="live") == [r for r in rows if r["tier"] == "live"]
    window = p.report(**{"from": one["window_start"], "to": one["window_end"]})
    assert {r["window_start"] for r in window} == {one["window_start"]}
    assert p.report(topic="no-such-topic") == []
    bad = requests.get(p.url + "/api/report", params={"from": "yesterday-ish"}, timeout=10)
    assert bad.status_code == 400 and bad.json()["error_code"] == 400
    # the HTML page: every tier side by side, the plot embedded as a PNG
    page = requests.get(p.url + "/", timeout=30)
    assert page.status_code == 200 and "text/html" in page.headers["content-type"]
    assert "<th colspan=6>live</th><th colspan=6>offline</th>" in page.text
    assert "data:image/png;base64," in page.text and page.text.count(">complete<") == len(rows)
    png = requests.get(p.url + "/plot.png", timeout=30)
    assert png.status_code == 200 and png.content.startswith(b"\x89PNG")


def test_exactly_once_mirror_killed_mid_stream_leaves_no_duplicates_offline(pipeline, tmp_path):
    """The mirror copies in transactions with its offsets (--exactly-once): killed with kill -9 twice while the
    traffic flows, it re-reads what its open transactions held, and the offline counter (a read_committed
    reader, librdkafka's default) counts every record once: 100% complete, 0 duplicates (at-least-once shows
    the re-reads as duplicates)."""
    p = pipeline(grace_ms=0)
    mirror = p.start(mirror_process(tmp_path / "mirror", p.live.bootstrap, p.offline.bootstrap, "pageviews",
                                    "--exactly-once"))

    def kill_mirror(burst: int) -> None:
        if burst in (1, 2):
            wait_until(lambda: records_in(p.offline.bootstrap, "pageviews"), 60, interval=0.2,
                       what="the mirror copying")
            mirror.kill9()
            mirror.start()

    sent = produce_traffic(p, 2000, on_window=kill_mirror)
    total = sum(len(s) for s in sent.values())
    rows = wait_until(lambda: all_complete(p, total), 120, interval=1, what="a 100% report on both tiers")
    for r in rows:
        assert r["received"] == r["distinct"] == r["expected"] and r["duplicates"] == 0 and r["missing"] == 0
    copies = len(read_topic(p.offline.bootstrap, "pageviews"))  # read_committed
    assert copies == total, f"{copies} committed copies of {total} records"


def copy_with_faults(source: str, target: str, drop: dict[str, set[int]], replay: dict[str, range]) -> int:
    """A test mirror: copies pageviews, dropping some sequences and sending a range twice."""
    producer = Producer({"bootstrap.servers": target, "linger.ms": 5})
    records = read_topic(source, "pageviews")
    replayed = []
    for m in records:
        headers = dict(m.headers())
        pid, seq = headers[PRODUCER_HEADER].decode(), int(headers[SEQUENCE_HEADER])
        if seq in drop.get(pid, ()):
            continue
        producer.produce("pageviews", m.value(), key=m.key(), headers=m.headers(), timestamp=m.timestamp()[1])
        if seq in replay.get(pid, ()):
            replayed.append(m)
    for m in replayed:
        producer.produce("pageviews", m.value(), key=m.key(), headers=m.headers(), timestamp=m.timestamp()[1])
    assert producer.flush(30) == 0
    return len(records)


def test_drops_and_replays_show_exact_missing_and_duplicates_on_the_right_tier_and_window(pipeline):
    p = pipeline(grace_ms=0)
    sent = produce_traffic(p, 1600)
    a, b = sorted(sent)
    drop = {a: {100, 101, 102, 1333}, b: {7}}
    replay = {b: range(500, 540)}
    assert copy_with_faults(p.live.bootstrap, p.offline.bootstrap, drop, replay) == 3200
    # where each dropped / replayed sequence belongs: the window of its generation time, from the live copy
    window_of_seq = {}
    for m in read_topic(p.live.bootstrap, "pageviews"):
        h = dict(m.headers())
        window_of_seq[(h[PRODUCER_HEADER].decode(), int(h[SEQUENCE_HEADER]))] = window_of(int(h[TIME_HEADER]),
                                                                                            WINDOW_MS)[0]
    want_missing: dict[int, dict[str, RangeSet]] = defaultdict(lambda: defaultdict(RangeSet))
    for pid, seqs in drop.items():
        for s in seqs:
            want_missing[window_of_seq[(pid, s)]][pid].add(s)
    want_dups: dict[int, int] = defaultdict(int)
    for pid, seqs in replay.items():
        for s in seqs:
            want_dups[window_of_seq[(pid, s)]] += 1

    def settled():
        rows = p.report(topic="pageviews", tier="offline")
        got = {r["window_start"]: r for r in rows}
        if sum(r["received"] for r in rows) != 3200 - 5 + 40:
            return None
        return rows if all(got.get(w, {}).get("missing") == sum(len(rs) for rs in m.values())
                           for w, m in want_missing.items()) else None

    rows = wait_until(settled, 90, interval=1, what="the offline tier's counts")
    assert sum(r["missing"] for r in rows) == 5 and sum(r["duplicates"] for r in rows) == 40
    for r in rows:
        want = {pid: rs.as_list() for pid, rs in want_missing.get(r["window_start"], {}).items()}
        assert r["missing_sequences"] == want, r
        assert r["missing"] == sum(len(rs) for rs in want_missing.get(r["window_start"], {}).values())
        assert r["duplicates"] == want_dups.get(r["window_start"], 0), r
        assert r["status"] == ("lost" if r["missing"] else "duplicated" if r["duplicates"] else "complete")
        assert r["completeness"] == round(100.0 * (r["expected"] - r["missing"]) / r["expected"], 4)
    # the live tier saw everything: the loss is pinned on the offline tier only
    live = wait_until(lambda: [r for r in p.report(topic="pageviews", tier="live") if r["status"] == "complete"]
                      if sum(r["distinct"] for r in p.report(tier="live")) == 3200 else None, 60, interval=1,
                      what="the live tier's counts")
    assert all(r["status"] == "complete" for r in live) and sum(r["expected"] for r in live) == 3200

    # bad events in _audit are counted as malformed and never stop the service
    junk = Producer({"bootstrap.servers": p.offline.bootstrap})
    good_id = requests.get(f"{p.registry.url}/subjects/_audit-value/versions/latest", timeout=10).json()["id"]
    junk.produce("_audit", b"garbage")
    junk.produce("_audit", b"\x00" + struct.pack(">I", 987654) + b"\x02")  # an unknown schema id
    junk.produce("_audit", b"\x00" + struct.pack(">I", good_id) + b"\x0a\x02")  # a truncated body
    assert junk.flush(10) == 0
    status = wait_until(lambda: (s := p.status())["malformed"] >= 3 and s, 30, interval=0.5,
                        what="the malformed records counted")
    assert status["malformed_by_reason"] == {"not_confluent_avro": 1, "unknown_schema_id": 1, "undecodable": 1}
    assert p.report(topic="pageviews", tier="offline") == rows
    page = requests.get(p.url + "/", timeout=30)
    assert page.status_code == 200 and "malformed: 3" in page.text and ">lost<" in page.text
    assert p.service.proc.poll() is None
