"""The audit counter's whole-batch reader (audit.batch_reader + audit.bulk) against a real broker process, judged
by the counter's librdkafka path on the same topic: audited records from an idempotent producer in several
codecs, a committed and an aborted transaction, spread over three partitions; the broker restarted while the
batch reader counts. Both readers must reach the same counts, sequence runs, hosts and per-topic totals, and
neither counts an aborted record."""

from __future__ import annotations

import threading
import time

import pytest
from audit.counter import TierCounter
from audit.events import HOST_HEADER, PRODUCER_HEADER, SEQUENCE_HEADER, TIME_HEADER
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from logbus.retry import Backoff
from support import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]
WINDOW_MS = 1000
NOWHERE = "http://127.0.0.1:9"  # the registry: never reached (no round is emitted here)


def audited(producer_id: str, seq: int, now: int) -> list[tuple[str, bytes]]:
    return [(PRODUCER_HEADER, producer_id.encode()), (SEQUENCE_HEADER, b"%d" % seq),
            (TIME_HEADER, b"%d" % (now + seq // 50)), (HOST_HEADER, b"host-" + producer_id.encode())]


def produce_plain(bootstrap: str, topic: str, first: int, count: int, now: int, partitions: int = 3) -> None:
    for k, codec in enumerate(("lz4", "none", "zstd")):
        p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "compression.type": codec,
                      "linger.ms": 5})
        for seq in range(first + k, first + count, 3):
            p.produce(topic, b"v" * 100, partition=seq % partitions, headers=audited("plain", seq, now))
        assert p.flush(30) == 0


def produce_transactions(bootstrap: str, topic: str, now: int) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": "batch-reader-test", "linger.ms": 5})
    p.init_transactions(30)
    p.begin_transaction()
    for seq in range(600):
        p.produce(topic, b"c", partition=seq % 3, headers=audited("txn", seq, now))
    p.commit_transaction(30)
    p.begin_transaction()
    for seq in range(600, 1000):
        p.produce(topic, b"a", partition=seq % 3, headers=audited("txn", seq, now))
    p.flush(30)
    p.abort_transaction(30)
    p.begin_transaction()
    p.produce(topic, b"c", partition=0, headers=audited("txn", 1000, now))
    p.commit_transaction(30)


class Counting:
    """A TierCounter counting in a thread (no rounds emitted) until stopped."""

    def __init__(self, bootstrap: str, reader: str):
        self.counter = TierCounter("live", {"bootstrap.servers": bootstrap}, "pv.*", NOWHERE, window_ms=WINDOW_MS,
                                   emit_interval_ms=10**12, reader=reader)
        assert self.counter.batches == (reader == "batches")
        self.stopping = False
        self.failures: list[Exception] = []
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stopping:  # as TierCounter.run, without the rounds: a failure starts the loop again
            try:
                self.counter._count_until(lambda: self.stopping, Backoff(0.1, 1.0))
            except Exception as exc:  # noqa: BLE001 - e.g. metadata unanswered while the broker restarts
                self.failures.append(exc)
                time.sleep(0.5)

    def counted(self) -> int:
        return sum(self.counter.counted.values())

    def stop(self) -> dict:
        self.stopping = True
        self.thread.join(30)
        assert not self.thread.is_alive()
        return {k: (v["count"], v["seqs"].as_list(), v["host"]) for k, v in self.counter.counts.items()}


def test_batches_count_what_librdkafka_counts_through_transactions_codecs_and_a_broker_restart(fresh_broker):
    b = fresh_broker(num_partitions=3).start()
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    admin.create_topics([NewTopic("pv", 3, 1)])["pv"].result(10)
    now = int(time.time() * 1000)
    produce_plain(b.bootstrap, "pv", 0, 3000, now)
    produce_transactions(b.bootstrap, "pv", now)
    batches = Counting(b.bootstrap, "batches")
    wait_until(lambda: batches.counted() == 3000 + 601, timeout=60, what="the batch reader's first part")
    b.stop()
    b.start()  # the same port: the reader's connections break, it reads the metadata again and goes on
    produce_plain(b.bootstrap, "pv", 3000, 2000, now)
    wait_until(lambda: batches.counted() == 5000 + 601, timeout=90, what="the batch reader after the restart")
    # a new topic joins: the Fetch sent ahead asked for the old partitions only and is dropped
    admin.create_topics([NewTopic("pv2", 1, 1)])["pv2"].result(10)
    produce_plain(b.bootstrap, "pv2", 0, 300, now, partitions=1)
    wait_until(lambda: batches.counted() == 5300 + 601, timeout=60, what="the batch reader on the new topic")
    records = Counting(b.bootstrap, "records")
    wait_until(lambda: records.counted() == 5300 + 601, timeout=60, what="librdkafka's records")
    time.sleep(1)  # nothing more arrives on either path (an aborted record counted late would show)
    got, want = batches.stop(), records.stop()
    assert got == want
    assert {k[2] for k in got} == {"plain", "txn"} and {k[0] for k in got} == {"pv", "pv2"}
    txn = sorted(r for k, v in got.items() if k[2] == "txn" for r in v[1])
    assert batches.counter.counted == {"pv": 5601, "pv2": 300}
    assert txn[0][0] == 0 and txn[-1][1] == 1000 and sum(v[0] for k, v in got.items() if k[2] == "txn") == 601
    assert all(not (600 <= first <= 999 or 600 <= last <= 999) for first, last in txn)  # aborted: not counted
    # every partition ends with plain records: both stop right after the last one
    assert batches.counter.positions == records.counter.positions
    assert not records.failures


def test_a_secured_or_unusual_consumer_setting_keeps_librdkafka():
    base = {"bootstrap.servers": "127.0.0.1:9"}
    assert TierCounter("live", base, "pv", NOWHERE).batches
    assert not TierCounter("live", {**base, "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
                                    "sasl.username": "u", "sasl.password": "p"}, "pv", NOWHERE).batches
    assert not TierCounter("live", {**base, "isolation.level": "read_uncommitted"}, "pv", NOWHERE).batches
    assert not TierCounter("live", {**base, "socket.keepalive.enable": "true"}, "pv", NOWHERE).batches
    with pytest.raises(ValueError, match="PLAINTEXT"):
        TierCounter("live", {**base, "security.protocol": "SSL"}, "pv", NOWHERE, reader="batches")
