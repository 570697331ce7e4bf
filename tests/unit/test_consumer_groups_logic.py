"""The pure parts of ``logbus consumer-groups`` (datetimes, topic specs, reset targets, the --describe rows) and the
group coordinator's DeleteGroups / ListGroups rules over a real standalone offsets file (the broker is a fake)."""

from __future__ import annotations

import asyncio
import datetime
import json
from types import SimpleNamespace

import pytest
from broker.groups.coordinator import GroupCoordinator, coordinator_for
from broker.groups.group import Member
from broker.groups.stores import FileOffsetStore
from broker.protocol.messages import ErrorCode
from logbus.admin import AdminError
from logbus.consumer_groups import offset_rows, parse_datetime, parse_topics, reset_targets, table

pytestmark = [pytest.mark.unit, pytest.mark.timeout(30)]


def utc_ms(*args) -> int:
    return int(datetime.datetime(*args, tzinfo=datetime.timezone.utc).timestamp() * 1000)


@pytest.mark.parametrize("text, expected", [
    ("2024-03-01T12:30:45.123", utc_ms(2024, 3, 1, 12, 30, 45, 123000)),  # no zone: UTC, as Kafka
    ("2024-03-01T12:30:45.123Z", utc_ms(2024, 3, 1, 12, 30, 45, 123000)),
    ("2024-03-01T12:30:45.5", utc_ms(2024, 3, 1, 12, 30, 45, 500000)),
    ("2024-03-01T12:30:45", utc_ms(2024, 3, 1, 12, 30, 45)),
    ("2024-03-01T14:30:45.000+02:00", utc_ms(2024, 3, 1, 12, 30, 45)),
    ("2024-03-01T07:00:45.000-0530", utc_ms(2024, 3, 1, 12, 30, 45)),
])
def test_parse_datetime(text, expected):
    assert parse_datetime(text) == expected


@pytest.mark.parametrize("text", ["yesterday", "2024-03-01", "2024-03-01 12:30:45.000", "2024-13-01T00:00:00.000",
                                  "2024-03-01T12:30:45.1234", ""])
def test_parse_datetime_refuses(text):
    with pytest.raises(AdminError, match="--to-datetime"):
        parse_datetime(text)


def test_parse_topics():
    assert parse_topics(["a", "b:2,0,2", "c:1"]) == [("a", None), ("b", [0, 2]), ("c", [1])]
    for bad in (":1", "a:x", "a:1,,2"):
        with pytest.raises(AdminError):
            parse_topics([bad])


A0, A1, A2 = ("a", 0), ("a", 1), ("a", 2)
EARLIEST = {A0: 5, A1: 0, A2: 0}
LATEST = {A0: 50, A1: 20, A2: 0}
COMMITTED = {A0: 10, A1: 18}


@pytest.mark.parametrize("how, value, expected", [
    ("to_earliest", True, {A0: 5, A1: 0, A2: 0}),
    ("to_latest", True, {A0: 50, A1: 20, A2: 0}),
    ("to_current", True, {A0: 10, A1: 18, A2: 0}),  # no committed offset: the log end
    ("to_offset", 12, {A0: 12, A1: 12, A2: 0}),  # clamped into [earliest, latest]
    ("to_offset", 0, {A0: 5, A1: 0, A2: 0}),
])
def test_reset_targets(how, value, expected):
    assert reset_targets(how, value, [A0, A1, A2], COMMITTED, EARLIEST, LATEST) == expected


def test_shift_by_is_clamped_and_needs_a_committed_offset():
    assert reset_targets("shift_by", -7, [A0, A1], COMMITTED, EARLIEST, LATEST) == {A0: 5, A1: 11}
    assert reset_targets("shift_by", 5, [A0, A1], COMMITTED, EARLIEST, LATEST) == {A0: 15, A1: 20}
    with pytest.raises(AdminError, match="Cannot shift offset for partition a-2 since there is no current committed"):
        reset_targets("shift_by", 1, [A0, A2], COMMITTED, EARLIEST, LATEST)


def test_to_datetime_falls_back_to_the_log_end():
    found = {A0: 7, A1: -1}  # A1: no record that recent; A2: not answered
    assert reset_targets("to_datetime", None, [A0, A1, A2], {}, EARLIEST, LATEST, found) == {A0: 7, A1: 20, A2: 0}


def test_offset_rows():
    members = [("m-1", "/10.0.0.1", "app", [A1, A0]), ("m-2", "/10.0.0.2", "app", [])]
    rows = offset_rows("g", members, {A0: 10, ("b", 3): 4}, {A0: 50, A1: 20, ("b", 3): 9})
    assert rows == [
        ["g", "a", "0", "10", "50", "40", "m-1", "/10.0.0.1", "app"],
        ["g", "a", "1", "-", "20", "-", "m-1", "/10.0.0.1", "app"],  # held, never committed
        ["g", "-", "-", "-", "-", "-", "m-2", "/10.0.0.2", "app"],  # a member without partitions
        ["g", "b", "3", "4", "9", "5", "-", "-", "-"],  # committed, held by nobody
    ]
    assert offset_rows("g", [], {A0: 3}, {}) == [["g", "a", "0", "3", "-", "-", "-", "-", "-"]]


def test_table_aligns_columns():
    assert table(["GROUP", "TOPIC", "X"], [["g", "a-long-topic", "1"]]).splitlines() == [
        "GROUP TOPIC        X", "g     a-long-topic 1"]


# ---- the coordinator's DeleteGroups and ListGroups ------------------------------------------------------------
class FakeBroker:
    def __init__(self, log_dir: str, cluster_brokers: list[int] | None = None, node_id: int = 0):
        self.config = {"group.initial.rebalance.delay.ms": 0, "group.min.session.timeout.ms": 100,
                       "group.max.session.timeout.ms": 300000, "group.consumer.session.timeout.ms": 45000}
        self.cluster = None
        if cluster_brokers is not None:
            self.cluster = SimpleNamespace(metadata=SimpleNamespace(brokers={b: None for b in cluster_brokers}))
        self.node_id = node_id
        self.log_dirs = [log_dir]


def coordinator(tmp_path, **kw) -> GroupCoordinator:
    c = GroupCoordinator(FakeBroker(str(tmp_path), **kw))
    c.store = FileOffsetStore(str(tmp_path))
    return c


def test_delete_an_empty_group_removes_its_offsets(tmp_path):
    async def go():
        c = coordinator(tmp_path)
        await c.commit("done", "", -1, {("a", 0): (5, "")})
        await c.commit("kept", "", -1, {("a", 0): (9, "")})
        assert sorted(g.group_id for g in await c.listed()) == ["done", "kept"]  # known by their offsets only
        assert {g.state for g in await c.listed()} == {"Empty"}
        assert await c.delete("done") == ErrorCode.none
        assert await c.fetch_offsets("done", None) == (ErrorCode.none, {})
        assert [g.group_id for g in await c.listed()] == ["kept"]
        assert await c.delete("done") == ErrorCode.group_id_not_found
        assert await c.delete("never") == ErrorCode.group_id_not_found
        assert await c.delete("") == ErrorCode.invalid_group_id
    asyncio.run(go())
    assert set(json.loads((tmp_path / "consumer-offsets.json").read_text())) == {"kept"}  # on disk too
    assert FileOffsetStore(str(tmp_path)).offsets.keys() == {"kept"}


def test_a_group_with_members_is_not_deleted(tmp_path):
    async def go():
        c = coordinator(tmp_path)
        group = c._group("busy")
        group.add_or_update(Member("m-1", None, "app", "/127.0.0.1", 10000, 10000, "consumer", [("range", b"")]))
        group.state = "Stable"
        assert await c.delete("busy") == ErrorCode.non_empty_group
        group.remove("m-1")
        group.state = "Empty"
        assert await c.delete("busy") == ErrorCode.none  # an empty group in memory, even without offsets
        assert "busy" not in c.groups
    asyncio.run(go())


def test_only_the_coordinator_deletes_or_lists_a_group(tmp_path):
    brokers = [0, 1, 2]
    group = next(g for g in (f"g{i}" for i in range(100)) if coordinator_for(g, brokers) != 0)

    async def go():
        c = coordinator(tmp_path, cluster_brokers=brokers, node_id=0)
        await c.store.commit(group, {("a", 0): (1, "")})  # offsets of a group another broker coordinates
        assert await c.delete(group) == ErrorCode.not_coordinator
        assert group not in [g.group_id for g in await c.listed()]
    asyncio.run(go())
