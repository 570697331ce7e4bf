"""A partition log with transactions: transactional batches from an outside encoder (kafka-python), markers,
the last stable offset, the aborted-transaction index, restarts, truncation and retention."""

import pytest
from broker.log.log import LogConfig, PartitionLog
from broker.log.producer_state import CoordinatorFenced, InvalidProducerEpoch, InvalidTxnState
from broker.protocol import control, records
from kafka.record.default_records import DefaultRecordBatchBuilder

pytestmark = [pytest.mark.unit, pytest.mark.timeout(30)]


class Producer:
    def __init__(self, pid, epoch=0):
        self.pid, self.epoch, self.seq = pid, epoch, 0

    def batch(self, n=2, transactional=True):
        builder = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=transactional,
                                            producer_id=self.pid, producer_epoch=self.epoch, base_sequence=self.seq,
                                            batch_size=1 << 20)
        for i in range(n):
            builder.append(i, timestamp=1_700_000_000_000 + i, key=None, value=b"v%d" % i, headers=[])
        self.seq += n
        return bytes(builder.build())

    def send(self, plog, n=2, transactional=True):
        data = self.batch(n, transactional)
        return plog.append(data, records.validate(data, 1 << 20))


def make(path, **kw):
    return PartitionLog(str(path / "t-0"), "t", 0, LogConfig(**kw))


def test_open_transactions_hold_the_last_stable_offset(tmp_path):
    plog = make(tmp_path)
    a, b = Producer(1), Producer(2)
    Producer(3).send(plog, transactional=False)  # 0-1: not transactional, stable at once
    assert plog.last_stable_offset == 2
    a.send(plog)  # 2-3
    b.send(plog)  # 4-5
    assert plog.last_stable_offset == 2 and plog.high_watermark == 6
    assert plog.read(2, 1 << 20, upper=plog.last_stable_offset) is None  # read_committed waits
    assert plog.append_marker(1, 0, coordinator_epoch=0, commit=True, timestamp_ms=1) == 6
    assert plog.last_stable_offset == 4  # b is still open
    plog.append_marker(2, 0, 0, commit=False, timestamp_ms=1)
    assert plog.last_stable_offset == plog.high_watermark == 8
    assert [(t.producer_id, t.first_offset, t.last_offset) for t in plog.aborted_transactions(0, 8)] == [(2, 4, 7)]
    assert plog.aborted_transactions(8, 100) == [] and plog.aborted_transactions(0, 4) == []


def test_lso_waits_for_the_high_watermark_to_pass_the_marker(tmp_path):
    plog = make(tmp_path)
    plog.replicated = True  # cluster mode: the leader moves the high watermark
    Producer(1).send(plog)
    plog.append_marker(1, 0, 0, commit=True, timestamp_ms=1)
    plog.high_watermark = 2  # replicated up to the marker, not past it
    assert plog.last_stable_offset == 0
    plog.high_watermark = 3
    assert plog.last_stable_offset == 3


def test_producer_rules_in_transactions(tmp_path):
    plog = make(tmp_path)
    p = Producer(5, epoch=2)
    p.send(plog)
    data = p.batch(transactional=False)
    with pytest.raises(InvalidTxnState):
        plog.append(data, records.validate(data, 1 << 20))
    plog.append_marker(5, 2, coordinator_epoch=4, commit=True, timestamp_ms=1)
    with pytest.raises(CoordinatorFenced):
        plog.append_marker(5, 2, coordinator_epoch=3, commit=True, timestamp_ms=1)
    with pytest.raises(InvalidProducerEpoch):
        plog.append_marker(5, 1, coordinator_epoch=4, commit=True, timestamp_ms=1)
    plog.append_marker(5, 3, coordinator_epoch=4, commit=False, timestamp_ms=1)  # a fence: the epoch moves on
    old = Producer(5, epoch=2)
    old.seq = 2
    with pytest.raises(InvalidProducerEpoch):
        old.send(plog)
    client_marker = control.marker_batch(5, 3, True, 4, 1)
    with pytest.raises(records.InvalidRecord):
        plog.append(client_marker, records.validate(client_marker, 1 << 20))


@pytest.mark.parametrize("clean", [True, False])
def test_restart_rebuilds_open_transactions_and_the_index(tmp_path, clean):
    plog = make(tmp_path, segment_bytes=300)
    a, b = Producer(1), Producer(2)
    for _ in range(4):
        a.send(plog)
        b.send(plog)
        plog.append_marker(1, 0, 0, commit=False, timestamp_ms=1)
    b.send(plog)
    assert len(plog.segments) > 2
    lso, aborted = plog.last_stable_offset, plog.aborted_transactions(0, 10**9)
    assert len(aborted) == 4 and lso == 2  # b's transaction has been open since offset 2
    if clean:
        plog.snapshot_producers()
    else:
        import os
        os.unlink(plog.txn_index.path)  # a crash before the index reached the disk
        os.unlink(plog._snapshot_path)
    plog.close()
    again = make(tmp_path, segment_bytes=300)
    if clean:
        assert again.last_stable_offset == lso
        assert again.aborted_transactions(0, 10**9) == aborted
    else:  # rebuilt from the whole log (no snapshot): every aborted transaction is indexed again
        assert [(t.producer_id, t.first_offset, t.last_offset) for t in again.aborted_transactions(0, 10**9)] == [
            (t.producer_id, t.first_offset, t.last_offset) for t in aborted]
        assert again.last_stable_offset == lso
    again.append_marker(2, 0, 0, commit=True, timestamp_ms=1)
    assert again.last_stable_offset == again.log_end_offset


def test_follower_copies_track_markers_and_truncation_forgets_them(tmp_path):
    leader = make(tmp_path / "l")
    p = Producer(9)
    p.send(leader)
    leader.append_marker(9, 0, 0, commit=False, timestamp_ms=1)
    p.send(leader)
    region = leader.read(0, 1 << 20, committed_only=False)
    follower = make(tmp_path / "f")
    follower.append_as_follower(region.read())
    assert [(t.first_offset, t.last_offset) for t in follower.aborted_transactions(0, 100)] == [(0, 2)]
    assert follower.producers.open_transactions() == {9: 3}
    follower.truncate_to(2)
    assert follower.aborted_transactions(0, 100) == [] and follower.producers.open_transactions() == {9: 0}


def test_retention_drops_index_entries_below_the_log_start(tmp_path):
    plog = make(tmp_path, segment_bytes=200, retention_bytes=0)
    p = Producer(1)
    for _ in range(5):
        p.send(plog)
        plog.append_marker(1, 0, 0, commit=False, timestamp_ms=1)
    before = len(plog.aborted_transactions(0, 10**9))
    assert before == 5
    plog.apply_retention(now_ms=0, schedule_delete=lambda delay, fn: fn())
    left = plog.aborted_transactions(0, 10**9)
    assert len(left) < before and all(t.last_offset >= plog.log_start_offset for t in left)


def test_cleaner_keeps_markers_and_transactional_batches(tmp_path):
    from broker.log.cleaner import build_offset_map, clean_segment

    plog = make(tmp_path, segment_bytes=10**6)

    def keyed(key, value, pid=-1, epoch=-1, seq=-1, transactional=False):
        builder = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=transactional,
                                            producer_id=pid, producer_epoch=epoch, base_sequence=seq,
                                            batch_size=1 << 20)
        builder.append(0, timestamp=1_700_000_000_000, key=key, value=value, headers=[])
        data = bytes(builder.build())
        return plog.append(data, records.validate(data, 1 << 20))

    keyed(b"k", b"plain-1")                                        # 0: superseded by 5
    keyed(b"k", b"txn-committed", pid=1, epoch=0, seq=0, transactional=True)  # 1
    plog.append_marker(1, 0, 0, commit=True, timestamp_ms=1)       # 2
    keyed(b"k", b"txn-aborted", pid=2, epoch=0, seq=0, transactional=True)    # 3
    plog.append_marker(2, 0, 0, commit=False, timestamp_ms=1)      # 4
    keyed(b"k", b"plain-2")                                        # 5
    plog.append_marker(1, 0, 0, commit=True, timestamp_ms=1)       # 6: a second commit marker, same key bytes
    segment = plog.active
    latest = build_offset_map([(segment.path, segment.size)])
    assert list(latest.values()) == [5]  # markers and transactional records stay out of the map
    kept, dropped = clean_segment(segment.path, segment.size, latest, drop_tombstones_before_ms=0)
    assert (kept, dropped) == (1, 1)  # of the plain records plain-1 goes; the others are copied untouched
    from kafka.record.default_records import DefaultRecordBatch
    with open(segment.path + ".cleaned", "rb") as f:
        data = f.read()
    offsets, pos = [], 0
    while pos < len(data):
        header = records.read_header(data, pos)
        offsets.append((header.base_offset, DefaultRecordBatch(data[pos:pos + header.size]).is_control_batch))
        pos += header.size
    assert offsets == [(1, False), (2, True), (3, False), (4, True), (5, False), (6, True)]
