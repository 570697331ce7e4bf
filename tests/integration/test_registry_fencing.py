"""Fencing a registry leader that lost the election without knowing it (``kafkastore.transactional.id``): each
write of the leader is a transaction of that id, and a newly elected leader's ``init_transactions`` fences the
earlier one. First the store alone, deterministic: two stores with the same id, the second takes it, the first's
next write is refused and never applied. Then two registry processes: the leader is paused (SIGSTOP) past its
session, the other takes over and registers, the paused one resumes with a registration already waiting for it:
it either forwards it or is refused by the fence, and no id is ever handed out twice."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import threading
import time
import uuid

import pytest
import requests
from support import RegistryProcess, free_port, wait_until

from schema_registry.core import RegistryError
from schema_registry.store import KafkaStore

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]


def test_a_store_fenced_by_a_newer_leader_writes_nothing(broker):
    topic = f"_schemas-{uuid.uuid4().hex[:6]}"
    applied: dict[str, list] = {"a": [], "b": []}

    async def scenario():
        stores = {}
        for name in ("a", "b"):
            store = KafkaStore(broker.bootstrap, topic, 10000, 1, True, transactional_id="registry-fence-test")
            store.apply = lambda key, value, name=name: applied[name].append(key["n"])
            await store.start()
            stores[name] = store
        a, b = stores["a"], stores["b"]
        try:
            await a.catch_up()  # a is elected: takes the id
            await a.write({"n": 1}, {"v": 1})
            await b.catch_up()  # b is elected while a does not know yet: a is fenced
            with pytest.raises(RegistryError) as refused:
                await a.write({"n": 2}, {"v": 2})
            assert refused.value.code == 50001 and "not the leader any more" in refused.value.message
            await b.write({"n": 3}, {"v": 3})
            with pytest.raises(RegistryError, match="not the leader"):  # and stays fenced
                await a.write({"n": 4}, {"v": 4})
            await b.wait_applied(b.applied)
            await a.wait_applied(b.applied)
        finally:
            for store in stores.values():
                await store.stop()

    asyncio.run(scenario())
    assert applied["a"] == applied["b"] == [1, 3]  # the refused writes were never applied anywhere


def schema(i: int) -> str:
    return json.dumps({"type": "record", "name": f"Fenced{i}", "fields": [{"name": "n", "type": "long"}]})


def _status(url: str) -> dict:
    return requests.get(f"{url}/status", timeout=10).json()


def test_a_paused_leader_that_resumes_cannot_hand_out_an_id_twice(tmp_path, fresh_broker):
    broker = fresh_broker(group_initial_rebalance_delay_ms=0).start()
    pair = [RegistryProcess(tmp_path / f"r{i}", broker.bootstrap, kafkastore_topic_replication_factor="1",
                            kafkastore_transactional_id="registry-leader",
                            metrics_listener=f"http://127.0.0.1:{free_port()}").start() for i in (1, 2)]
    try:
        a, b = pair
        wait_until(lambda: {_status(a.url).get("leader"), _status(b.url).get("leader")} - {None}
                   and _status(a.url).get("leader") == _status(b.url).get("leader"), 30, interval=0.5,
                   what="one leader")
        leader = a if _status(a.url)["is_leader"] else b
        other = b if leader is a else a
        subject = "fenced-value"
        requests.put(f"{leader.url}/config/{subject}", json={"compatibility": "NONE"}, timeout=30)
        first = requests.post(f"{leader.url}/subjects/{subject}/versions", json={"schema": schema(1)}, timeout=30)
        assert first.status_code == 200, first.text

        os.kill(leader.proc.pid, signal.SIGSTOP)  # paused past its session (10 s): the other is elected
        try:
            wait_until(lambda: _status(other.url)["is_leader"], 60, interval=0.5, what="the other instance leading")
            second = requests.post(f"{other.url}/subjects/{subject}/versions", json={"schema": schema(2)},
                                   timeout=30)
            assert second.status_code == 200, second.text
            answers: list = []
            waiting = threading.Thread(target=lambda: answers.append(requests.post(
                f"{leader.url}/subjects/{subject}/versions", json={"schema": schema(3)}, timeout=60)))
            waiting.start()  # sent to the paused leader: read when it resumes, maybe before it hears of the vote
            time.sleep(1)
        finally:
            os.kill(leader.proc.pid, signal.SIGCONT)
        waiting.join(90)
        third = answers[0]
        # forwarded to the new leader (200), or refused by the fence (50001) / no leader yet (50004): never a write
        # of its own with an id the new leader also gave
        assert third.status_code == 200 or third.json()["error_code"] in (50001, 50003, 50004), third.text
        ids = [first.json()["id"], second.json()["id"]] + ([third.json()["id"]] if third.status_code == 200 else [])
        assert len(set(ids)) == len(ids), ids
        for url in (a.url, b.url):  # both instances agree on every id
            wait_until(lambda url=url: all(requests.get(f"{url}/schemas/ids/{i}", timeout=10).status_code == 200
                                           for i in ids), 30, what="every id readable")
            texts = [json.loads(requests.get(f"{url}/schemas/ids/{i}", timeout=10).json()["schema"])["name"]
                     for i in ids]
            assert len(set(texts)) == len(ids), texts
        versions = requests.get(f"{other.url}/subjects/{subject}/versions", timeout=10).json()
        assert versions == list(range(1, len(ids) + 1)), versions
    finally:
        for r in pair:
            r.stop()
