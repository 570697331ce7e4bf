"""The second client: it must be served properly after every case."""

from __future__ import annotations

import datetime
import struct
import time
import uuid

import fuzzing
from rawclient import RawClient, request_module

from .config import ANSWER_BOUND_S, CANARY_TOPIC


class Canary:
    """The second client: one connection kept across cases; produce a record, fetch it back at its offset."""

    def __init__(self, broker):
        self.client = RawClient(broker.host, broker.port, timeout=ANSWER_BOUND_S)
        self.produce = request_module(0, 7)
        self.fetch = request_module(1, 11)
        self.written: dict[int, bytes] = {}
        self.next_offset: int | None = None
        self.checks = 0
        self.longest_ms = 0.0

    def close(self) -> None:
        self.client.close()

    def check(self) -> None:
        """Raises AssertionError or OSError when the broker does not serve the second client properly."""
        start = time.monotonic()
        value = f"canary-{uuid.uuid4().hex}".encode()
        m = self.produce
        request = m.ProduceRequest(transactional_id=None, acks=1, timeout=datetime.timedelta(seconds=5),
                                   topic_data=(m.TopicProduceData(name=CANARY_TOPIC, partition_data=(
                                       m.PartitionProduceData(index=0, records=fuzzing.build_batch(
                                           [(None, value, ())])),)),))
        part = self.client.request(0, 7, request).responses[0].partition_responses[0]
        assert part.error_code.value == 0, f"canary produce: error {part.error_code!r}"
        if self.next_offset is not None:
            assert part.base_offset == self.next_offset, (
                f"canary produce: offset {part.base_offset}, expected {self.next_offset}")
        self.written[part.base_offset] = value
        self.next_offset = part.base_offset + 1
        f = self.fetch
        fetch = f.FetchRequest(replica_id=-1, max_wait=datetime.timedelta(0), min_bytes=0, max_bytes=1 << 20,
                               isolation_level=0, session_id=0, session_epoch=-1, rack_id="", forgotten_topics_data=(),
                               topics=(f.FetchTopic(topic=CANARY_TOPIC, partitions=(f.FetchPartition(
                                   partition=0, current_leader_epoch=-1, fetch_offset=part.base_offset,
                                   log_start_offset=-1, partition_max_bytes=1 << 20),)),))
        got = self.client.request(1, 11, fetch).responses[0].partitions[0]
        assert got.error_code.value == 0, f"canary fetch: error {got.error_code!r}"
        records = got.records or b""
        assert len(records) >= 61 and struct.unpack_from(">q", records)[0] == part.base_offset, (
            f"canary fetch at {part.base_offset}: batch {records[:12].hex()}")
        assert value in records, "canary fetch: the record just produced is not there"
        self.checks += 1
        self.longest_ms = max(self.longest_ms, (time.monotonic() - start) * 1000)
