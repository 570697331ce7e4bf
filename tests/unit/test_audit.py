"""Audit logic: sequence range sets and the reconciliation function."""

import pytest
from audit.ranges import RangeSet
from audit.reconcile import reconcile

pytestmark = pytest.mark.unit


def test_range_set_merges_and_subtracts():
    rs = RangeSet()
    for first, last in ((5, 9), (0, 2), (3, 4), (20, 20), (11, 12)):
        rs.add(first, last)
    assert rs.as_list() == [[0, 9], [11, 12], [20, 20]]
    assert len(rs) == 13 and 11 in rs and 10 not in rs
    assert RangeSet([(0, 20)]).difference(rs).as_list() == [[10, 10], [13, 19]]
    assert rs.covers(RangeSet([(1, 3), (11, 11)])) and not rs.covers(RangeSet([(9, 10)]))


def produced(topic, start, pid, first, last, emitted=0):
    return {"kind": "PRODUCED", "tier": "producer", "producer_id": pid, "topic": topic, "window_start": start,
            "window_end": start + 60_000, "count": last - first + 1, "first_seq": first, "last_seq": last,
            "emitted_at": emitted}


def tier(name, topic, start, pid, seqs, count, source, emitted=1):
    return {"kind": "TIER", "tier": name, "producer_id": pid, "topic": topic, "window_start": start,
            "window_end": start + 60_000, "count": count, "sequences": seqs, "emitted_at": emitted,
            "source": [{"partition": p, "first": a, "last": b} for p, a, b in source]}


def test_reconcile_tells_loss_from_duplication_and_ignores_replays():
    events = [produced("pv", 0, "p1", 0, 99), produced("pv", 0, "p2", 0, 49),
              tier("live", "pv", 0, "p1", [[0, 99]], 100, [(0, 0, 99)]),
              tier("live", "pv", 0, "p2", [[0, 49]], 50, [(1, 0, 49)]),
              tier("live", "pv", 0, "p2", [[0, 49]], 50, [(1, 0, 49)], emitted=5),  # a restarted counter's replay
              tier("offline", "pv", 0, "p1", [[0, 39], [45, 99]], 95, [(0, 0, 94)]),  # 40..44 lost
              tier("offline", "pv", 0, "p2", [[0, 49]], 60, [(1, 0, 59)])]  # 10 duplicates
    rows = {r.tier: r for r in reconcile(events, now_ms=10**9, grace_ms=0)}
    live, offline = rows["live"], rows["offline"]
    assert (live.expected, live.received, live.distinct, live.missing, live.duplicates, live.status) == \
        (150, 150, 150, 0, 0, "complete")
    assert (offline.received, offline.distinct, offline.missing, offline.duplicates) == (155, 145, 5, 10)
    assert offline.missing_sequences == {"p1": [[40, 44]]} and offline.status == "lost"
    assert offline.completeness == pytest.approx(100 * 145 / 150)


def test_reconcile_status_pending_then_duplicated():
    events = [produced("c", 0, "p", 0, 9), tier("t", "c", 0, "p", [[0, 9]], 12, [(0, 0, 11)])]
    assert reconcile(events, now_ms=30_000, grace_ms=60_000)[0].status == "pending"
    assert reconcile(events, now_ms=10**9, grace_ms=60_000)[0].status == "duplicated"
    missing_tier = reconcile([produced("c", 0, "p", 0, 9)], now_ms=10**9, grace_ms=0, tiers=["offline"])[0]
    assert (missing_tier.tier, missing_tier.missing, missing_tier.status) == ("offline", 10, "lost")


def test_service_config_parse_time_and_select():
    from audit.service import ServiceConfig, ServiceConfigError, parse_time, select

    cfg = ServiceConfig({"schema.registry.url": "http://127.0.0.1:1", "audit.cluster.live.bootstrap.servers": "a:1",
                         "audit.cluster.offline.bootstrap.servers": "b:2", "audit.tiers": "live, offline",
                         "listeners": "http://127.0.0.1:8099"})
    assert cfg.clusters == {"live": "a:1", "offline": "b:2"} and cfg.tiers == ["live", "offline"]
    assert (cfg.host, cfg.port, cfg.grace_ms) == ("127.0.0.1", 8099, 60000)
    for bad, message in (({"schema.registry.url": "x"}, "audit.cluster"),
                         ({"audit.cluster.a.bootstrap.servers": "a:1"}, "schema.registry.url"),
                         ({"audit.cluster.a.bootstrap.servers": "a:1", "schema.registry.url": "x", "typo": "1"},
                          "unknown config key 'typo'"),
                         ({"audit.cluster.a.bootstrap.servers": "a:1", "schema.registry.url": "x",
                           "audit.grace.ms": "soon"}, "integer")):
        with pytest.raises(ServiceConfigError, match=message):
            ServiceConfig(bad)
    assert parse_time("1700000000000", "from") == 1_700_000_000_000
    assert parse_time("2023-11-14T22:13:20Z", "from") == parse_time("2023-11-14T22:13:20", "from") == 1_700_000_000_000
    assert parse_time("", "to") is None
    with pytest.raises(ValueError, match="to must be"):
        parse_time("tomorrow", "to")
    rows = [{"topic": t, "tier": tr, "window_start": s, "window_end": s + 10} for t in ("a", "b")
            for tr in ("live", "offline") for s in (0, 10, 20)]
    assert len(select(rows, "a", None, None, None)) == 6
    assert {(r["window_start"], r["tier"]) for r in select(rows, "b", 5, 15, "live")} == {(0, "live"), (10, "live")}


def test_two_source_datacenters_each_tier_per_source_and_the_warehouse_against_the_sum():
    from audit.collector import AuditStore
    from audit.render import tier_order

    store = AuditStore()  # each producer's PRODUCED event read from its own datacenter's _audit
    store.add(produced("pv", 0, "east1", 0, 99), "live-east")
    store.add(produced("pv", 0, "west1", 0, 49), "live-west")
    for event in [tier("live-east", "pv", 0, "east1", [[0, 99]], 100, []),
                  tier("live-west", "pv", 0, "west1", [[0, 49]], 50, []),
                  tier("offline", "pv", 0, "east1", [[0, 99]], 100, []),
                  tier("offline", "pv", 0, "west1", [[0, 29]], 30, []),  # live-west's 30..49 not mirrored yet
                  tier("warehouse", "pv", 0, "east1", [[0, 99]], 100, []),
                  tier("warehouse", "pv", 0, "west1", [[0, 29]], 30, [])]:
        store.add(event, "offline")
    rows = {r.tier: r for r in reconcile(store.events(), now_ms=10**9, grace_ms=0)}
    assert (rows["live-east"].expected, rows["live-east"].status) == (100, "complete")  # its own producers only
    assert (rows["live-west"].expected, rows["live-west"].status) == (50, "complete")
    assert (rows["offline"].expected, rows["offline"].missing, rows["offline"].status) == (150, 20, "lost")
    assert (rows["offline/live-east"].expected, rows["offline/live-east"].status) == (100, "complete")
    west = rows["offline/live-west"]
    assert (west.expected, west.received, west.missing, west.missing_sequences) == (50, 30, 20, {"west1": [[30, 49]]})
    assert (rows["warehouse"].expected, rows["warehouse"].received, rows["warehouse"].missing) == (150, 130, 20)
    order = tier_order([r.as_dict() for r in rows.values()], ["live-east", "live-west", "offline", "warehouse"])
    assert order == ["live-east", "live-west", "offline", "offline/live-east", "offline/live-west", "warehouse",
                     "warehouse/live-east", "warehouse/live-west"]


def test_one_source_datacenter_keeps_one_row_per_tier():
    events = [dict(produced("pv", 0, "p", 0, 9), origin="live"), tier("live", "pv", 0, "p", [[0, 9]], 10, []),
              tier("offline", "pv", 0, "p", [[0, 9]], 10, [])]
    assert sorted(r.tier for r in reconcile(events, now_ms=10**9, grace_ms=0)) == ["live", "offline"]


def test_store_keeps_the_latest_snapshot_and_counts_malformed():
    from audit.collector import AuditStore

    store = AuditStore()
    store.add(produced("t", 0, "p", 0, 9))
    store.add(produced("t", 0, "p", 0, 9))  # the same event read twice (from a replica, a replay): kept once
    store.add(tier("live", "t", 0, "p", [[0, 4]], 5, [], emitted=2))
    store.add(tier("live", "t", 0, "p", [[0, 9]], 10, [], emitted=3))
    store.add(tier("live", "t", 0, "p", [[0, 2]], 3, [], emitted=1))  # an older snapshot read late
    store.add(tier("live", "", 0, "__round__", [], 1, [], emitted=3))
    store.count_malformed("unknown_schema_id")
    events = store.events()
    assert len(events) == 2 and [e["count"] for e in events if e["kind"] == "TIER"] == [10]
    assert store.stats()["malformed_by_reason"] == {"unknown_schema_id": 1} and store.stats()["records_read"] == 7


def test_decoder_tells_malformed_from_registry_outage():
    import io
    import struct

    import fastavro
    from audit.collector import AuditDecoder, Malformed, Transient
    from audit.events import SCHEMA

    decoder = AuditDecoder("http://127.0.0.1:1")  # nothing listens: the registry is "down"
    decoder.writers[7] = fastavro.parse_schema(SCHEMA)
    event = {**tier("live", "t", 0, "p", [[0, 1]], 2, [(0, 5, 6)]), "host": "h", "first_seq": 0, "last_seq": 1,
             "bytes": 0}
    body = io.BytesIO()
    fastavro.schemaless_writer(body, fastavro.parse_schema(SCHEMA), event)
    assert decoder.decode(b"\x00" + struct.pack(">I", 7) + body.getvalue())["sequences"] == [[0, 1]]
    for value, reason in ((b"junk", "not_confluent_avro"), (None, "not_confluent_avro"),
                          (b"\x00" + struct.pack(">I", 7) + body.getvalue()[:3], "undecodable")):
        with pytest.raises(Malformed) as exc:
            decoder.decode(value)
        assert exc.value.reason == reason
    with pytest.raises(Transient):  # an unknown id while the registry is unreachable: retried, not malformed
        decoder.decode(b"\x00" + struct.pack(">I", 8) + body.getvalue())


def test_render_puts_tiers_side_by_side_with_a_plot():
    from audit.render import completeness_series, render_page

    rows = [r.as_dict() for r in reconcile([produced("t", 0, "p", 0, 9), tier("offline", "t", 0, "p", [[0, 8]], 9, []),
                                            tier("live", "t", 0, "p", [[0, 9]], 10, [])], 10**9, 0)]
    page = render_page(rows, ["live", "offline"])
    assert page.index("<th colspan=6>live</th>") < page.index("<th colspan=6>offline</th>")
    assert "data:image/png;base64," in page and ">lost<" in page and "p: 9" in page
    assert completeness_series(rows, ["live", "offline"]) == {"live": [(0, 100.0, False)],
                                                              "offline": [(0, 90.0, False)]}
    assert "<html" not in render_page(rows, standalone=False)


def test_pending_windows_are_hollow_markers_off_the_line_and_list_no_missing_sequences():
    """A warehouse window not loaded yet reads 0% while pending: drawn as a hollow marker with a legend entry,
    not on the tier's line, and its gaps are not listed (they may still arrive)."""
    from audit.render import PENDING_LABEL, completeness_figure, completeness_series, render_page

    now = 10**9
    events = [produced("t", 0, "p", 0, 9), tier("live", "t", 0, "p", [[0, 9]], 10, []),
              produced("t", now - 1000, "p", 10, 19), tier("live", "t", now - 1000, "p", [[10, 12]], 3, [])]
    rows = [r.as_dict() for r in reconcile(events, now, 60_000)]
    assert sorted(r["status"] for r in rows) == ["complete", "pending"]
    series = completeness_series(rows, ["live"])["live"]
    assert [p for _, _, p in series] == [False, True]
    fig = completeness_figure(rows, ["live"])
    ax = fig.axes[0]
    hollow = [line for line in ax.lines if line.get_gid() == "pending"]
    assert len(hollow) == 1 and hollow[0].get_markerfacecolor() == "none" and len(hollow[0].get_xdata()) == 1
    tier_line = next(line for line in ax.lines if line.get_label() == "live")
    assert len(tier_line.get_xdata()) == 1  # only the closed window is on the line
    assert PENDING_LABEL in [t.get_text() for t in ax.get_legend().get_texts()]
    page = render_page(rows, ["live"])
    assert "Missing sequences" not in page and "<div class='scroll'>" in page


def test_load_metrics_come_from_the_published_manifests(tmp_path):
    import json as _json

    from prometheus_client import generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    from audit.load_metrics import families, read_manifests
    from telemetry.exposition import registry_for

    manifests = tmp_path / "_manifests"
    manifests.mkdir()
    for load_id, rows in ((1, {"page-views": 10, "clicks": 5}), (2, {"page-views": 7})):
        (manifests / f"load-{load_id}.json").write_text(_json.dumps({
            "load_id": load_id, "rows": rows, "bytes": {t: n * 100 for t, n in rows.items()},
            "started_at": 1000.0 * load_id, "finished_at": 1000.0 * load_id + 12.5}))
    (manifests / "load-3.json.tmp").write_text("{")  # being written: not a manifest yet
    text = generate_latest(registry_for(lambda: families(read_manifests(tmp_path)))).decode()
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for f in text_string_to_metric_families(text) for s in f.samples}
    assert samples[("logbus_load_runs_total", ())] == 2
    assert samples[("logbus_load_rows_total", (("topic", "page-views"),))] == 17
    assert samples[("logbus_load_bytes_total", (("topic", "clicks"),))] == 500
    assert samples[("logbus_load_last_rows", (("topic", "page-views"),))] == 7
    assert samples[("logbus_load_last_duration_seconds", ())] == 12.5
    assert samples[("logbus_load_last_success_timestamp_seconds", ())] == 2012.5
