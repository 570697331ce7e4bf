"""The mirror's batch stream when a source partition's position is out of range: it moves where
``auto.offset.reset`` says, with the watermarks of the answer, or of ListOffsets when the answer carries -1 (as
Kafka's does; logbus brokers fill them in)."""

from __future__ import annotations

from types import SimpleNamespace as NS

import pytest
from broker.protocol.messages import ErrorCode
from fake_pool import FakePool
from mirror.batch_stream import BatchStream

pytestmark = [pytest.mark.unit, pytest.mark.timeout(30)]


def stream(reset: str | None, answer_low: int, answer_high: int, asked: list):
    conf = {} if reset is None else {"auto.offset.reset": reset}
    s = BatchStream(NS(source_name="live", consumer_config=conf), 0, NS(next=lambda: 0.0))
    s.source = FakePool(lambda t, p: NS(partition_index=p.partition, error_code=int(ErrorCode.offset_out_of_range),
                                        log_start_offset=answer_low, high_watermark=answer_high,
                                        last_stable_offset=-1, aborted_transactions=None, records=None))
    s.consumer = NS(get_watermark_offsets=lambda tp, timeout: asked.append((tp.topic, tp.partition)) or (40, 90))
    s.positions = {("t", 0): 5}
    s.source_leader = {("t", 0): 1}
    return s


@pytest.mark.parametrize("reset, low, high, moved, lists", [
    (None, -1, -1, 40, True),  # the mirror's default: earliest
    ("latest", -1, -1, 90, True),
    ("earliest", 30, 80, 30, False),  # the answer's own watermarks: no ListOffsets
    ("largest", 30, 80, 80, False),
])
def test_an_out_of_range_position_moves_where_auto_offset_reset_says(reset, low, high, moved, lists):
    asked: list = []
    s = stream(reset, low, high, asked)
    assert s._receive_fetches(s._send_fetches(s.positions)) == {}
    assert s.positions == {("t", 0): moved}
    assert asked == ([("t", 0)] if lists else [])
