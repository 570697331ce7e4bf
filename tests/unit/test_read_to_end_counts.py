"""The batch readers that read a partition up to a known end ask ``consume()`` for no more records than are left.

confluent-kafka's ``Consumer.consume(n, timeout)`` returns once it has ``n`` messages or once ``timeout`` has passed:
asked for 1,000 when 12 are left, it waits out the whole timeout at every partition's end. The loads' reconcile
step (``audit.collector.read_to_end``, once per partition of each audit cluster) and ``logbus mirror-translate``
(``mirror.checkpoints.read_checkpoints``, 5 s) paid that on every run. The fake consumer below counts the calls
that would have waited."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
from fake_messages import FakeMessage

pytestmark = [pytest.mark.unit, pytest.mark.timeout(30)]


class KeyedMessage(FakeMessage):
    def key(self):
        return json.dumps({"source": "live", "topic": "pv", "partition": self.offset() % 3}).encode()

    def value(self):
        return json.dumps({"source_offset": self.offset(), "target_offset": self.offset()}).encode()


class FakeConsumer:
    """One topic, ``ends[p]`` records in partition ``p``; ``waited`` counts calls that asked for more than were
    left (the real one sits out its timeout then)."""

    def __init__(self, ends: dict[int, int]):
        self.ends = ends
        self.partition = self.position = None
        self.waited = 0
        self.calls = 0

    def __call__(self, conf):  # stands in for the Consumer class too
        return self

    def list_topics(self, topic=None, timeout=None):
        parts = {p: None for p in self.ends}
        return SimpleNamespace(topics={"t": SimpleNamespace(partitions=parts, error=None)})

    def get_watermark_offsets(self, tp, timeout=None, cached=False):
        return 0, self.ends[tp.partition]

    def assign(self, tps):
        self.partition, self.position = tps[0].partition, 0

    def consume(self, num_messages=1, timeout=-1):
        self.calls += 1
        left = self.ends[self.partition] - self.position
        if num_messages > left:
            self.waited += 1
        got = [KeyedMessage("t", self.partition, o)
               for o in range(self.position, self.position + min(num_messages, left))]
        self.position += len(got)
        return got

    def close(self):
        pass


def test_read_to_end_asks_for_what_is_left(monkeypatch):
    from audit import collector

    fake = FakeConsumer({0: 2500, 1: 12, 2: 0})
    monkeypatch.setattr(collector, "Consumer", fake)
    got = [(m.partition(), m.offset()) for m in collector.read_to_end("b:9092", "t", "g")]
    assert got == [(0, o) for o in range(2500)] + [(1, o) for o in range(12)]
    assert fake.waited == 0 and fake.calls == 4  # 1000 + 1000 + 500, then 12


def test_read_checkpoints_asks_for_what_is_left(monkeypatch):
    from mirror import checkpoints

    fake = FakeConsumer({0: 1003})
    monkeypatch.setattr(checkpoints, "Consumer", fake)
    out = checkpoints.read_checkpoints("b:9092", "t", "live")
    assert out[("pv", 0)] == (1002, 1002) and len(out) == 3
    assert fake.waited == 0 and fake.calls == 2
