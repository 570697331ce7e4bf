"""What this broker refused of producers it did not know yet: per (topic, partition, producer id, epoch), the lowest
base sequence of an idempotent batch answered with a retriable error (not leader yet, unknown partition, too few
replicas, a disk that refused the write) in the last two minutes.

Kafka takes any first sequence from a producer a partition does not know (retention may have deleted its earlier
batches). With librdkafka that loses records: its first request to a partition refused (NOT_LEADER_OR_FOLLOWER
while a new topic's leadership settles) and its next one, a later sequence, taken as the producer's first batch,
librdkafka counts the refused records delivered (``rd_kafka_dr_implicit_ack``: a later sequence acknowledged implies
the earlier ones were) and never sends them again. So where this broker itself refused an earlier sequence of the
producer here, a first batch past it is OUT_OF_ORDER_SEQUENCE_NUMBER, which librdkafka, behind a failed request,
retries in order (it bumps its epoch and sends every unacknowledged record again from sequence 0). Everywhere else
the broker answers as Kafka does: a producer still running when its topic is deleted and created again continues
there (refused at the head of its line, OUT_OF_ORDER_SEQUENCE_NUMBER is fatal for librdkafka).

Bounded: at most ``capacity`` entries, each forgotten after ``ttl_s`` or once the producer's batch is taken."""

from __future__ import annotations

import time
from collections import OrderedDict

from broker.protocol import records


class RefusedSequences:
    def __init__(self, capacity: int = 10_000, ttl_s: float = 120.0) -> None:
        self._refused: OrderedDict[tuple, tuple[int, float]] = OrderedDict()  # key -> (lowest sequence, when)
        self.capacity, self.ttl_s = capacity, ttl_s

    def __bool__(self) -> bool:
        """Anything remembered (entries past their time are dropped first: oldest first, in insertion order)."""
        refused = self._refused
        if refused:
            expired = time.monotonic() - self.ttl_s
            while refused and next(iter(refused.values()))[1] < expired:
                refused.popitem(last=False)
        return bool(refused)

    def refused(self, topic: str, partition: int, data) -> None:
        """An idempotent batch's request (``data``: its records, unvalidated) was refused with a retriable error."""
        if data is None or type(data) is list:
            return
        try:
            header = records.read_header(data)
        except records.InvalidBatch:  # shorter than a batch header
            return
        if header.magic != 2 or header.producer_id < 0:
            return
        sequence = header.base_sequence
        key = (topic, partition, header.producer_id, header.producer_epoch)
        now = time.monotonic()
        known = self._refused.get(key)
        if known is None or sequence < known[0] or now - known[1] > self.ttl_s:
            self._refused[key] = (sequence, now)
            self._refused.move_to_end(key)
        while len(self._refused) > self.capacity:
            self._refused.popitem(last=False)

    def lowest(self, topic: str, partition: int, producer_id: int, epoch: int) -> int:
        """The lowest sequence of the producer refused here recently, or -1."""
        known = self._refused.get((topic, partition, producer_id, epoch))
        if known is None:
            return -1
        if time.monotonic() - known[1] > self.ttl_s:
            del self._refused[(topic, partition, producer_id, epoch)]
            return -1
        return known[0]

    def taken(self, topic: str, partition: int, producer_id: int, epoch: int) -> None:
        """A batch of the producer was appended: the partition knows it now."""
        self._refused.pop((topic, partition, producer_id, epoch), None)
