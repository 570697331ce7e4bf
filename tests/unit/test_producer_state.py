import pytest
from broker.log.producer_state import (
    DuplicateSequence,
    InvalidProducerEpoch,
    OutOfOrderSequence,
    ProducerStateManager,
)

pytestmark = [pytest.mark.unit, pytest.mark.timeout(10)]


def test_duplicates_gaps_and_epochs():
    state = ProducerStateManager()
    state.check(7, 0, 0, 4)
    state.update(7, 0, 0, 4, base_offset=100)
    with pytest.raises(DuplicateSequence) as dup:
        state.check(7, 0, 0, 4)
    assert (dup.value.base_offset, dup.value.last_offset) == (100, 104)  # acks=all waits for all of it
    with pytest.raises(OutOfOrderSequence):
        state.check(7, 0, 9, 9)
    state.check(7, 0, 5, 5)
    with pytest.raises(OutOfOrderSequence):
        state.check(7, 1, 3, 3)  # a new epoch starts at sequence 0
    state.update(7, 1, 0, 0, 200)
    with pytest.raises(InvalidProducerEpoch):
        state.check(7, 0, 5, 5)  # the old epoch is fenced
    state.check(-1, -1, -1, -1)  # non-idempotent batches are never checked


def test_a_producer_new_to_a_partition_cannot_start_past_a_sequence_refused_here():
    """A gap at a producer's start: librdkafka's first request to a new topic's partition refused
    (NOT_LEADER_OR_FOLLOWER) while its next, sequence 2, was taken; librdkafka then counted the first records as
    delivered (a later sequence acknowledged implies the earlier ones were) and they were lost. Where the broker
    refused an earlier sequence a moment ago (``refused_seq``) it is refused; otherwise any first sequence is
    taken, as in Kafka (retention may have deleted the producer's batches; its topic may have been created again)."""
    state = ProducerStateManager()
    with pytest.raises(OutOfOrderSequence, match="sequence 0 was refused here: its first batch cannot start at 2"):
        state.check(7, 0, 2, 2, refused_seq=0)
    state.check(7, 0, 2, 2)  # nothing refused: taken, as Kafka does
    state.check(7, 0, 0, 1, refused_seq=0)  # the refused batch itself, again
    state.update(7, 0, 0, 1, base_offset=0)
    state.check(7, 0, 2, 2, refused_seq=0)  # known now: its next sequence
    with pytest.raises(OutOfOrderSequence):
        state.check(8, 0, 5, 5, transactional=True, refused_seq=3)
    state.check(-1, -1, -1, -1, refused_seq=0)  # non-idempotent batches are never checked


def test_the_partition_log_refuses_a_first_batch_past_a_refused_sequence_and_nothing_else(tmp_path):
    from broker.log.log import LogConfig, PartitionLog
    from broker.protocol import records
    from kafka.record.default_records import DefaultRecordBatchBuilder

    def batch(pid: int, first_seq: int, count: int) -> bytes:
        b = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False, producer_id=pid,
                                      producer_epoch=0, base_sequence=first_seq, batch_size=1 << 20)
        for i in range(count):
            b.append(i, timestamp=1_700_000_000_000 + i, key=b"k%d" % i, value=b"v%d" % i, headers=[])
        return bytes(b.build())

    def append(plog, data, refused_seq=-1):
        return plog.append(data, records.validate(data, 1 << 20), refused_seq)

    plog = PartitionLog(str(tmp_path / "plain"), "t", 0, LogConfig())
    with pytest.raises(OutOfOrderSequence):
        append(plog, batch(42, 2, 1), refused_seq=0)
    assert plog.log_end_offset == 0  # nothing written
    assert append(plog, batch(42, 0, 2), refused_seq=0) == 0 and append(plog, batch(42, 2, 1), refused_seq=0) == 2
    assert append(plog, batch(43, 7, 1)) == 3  # no refusal: a first batch at any sequence, as in Kafka


def test_refusals_are_remembered_per_producer_and_epoch_bounded_and_forgotten():
    from broker.log.refused_sequences import RefusedSequences
    from kafka.record.default_records import DefaultRecordBatchBuilder

    def batch(pid: int, epoch: int, first_seq: int) -> memoryview:
        b = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False, producer_id=pid,
                                      producer_epoch=epoch, base_sequence=first_seq, batch_size=1 << 20)
        b.append(0, timestamp=1_700_000_000_000, key=None, value=b"v", headers=[])
        return memoryview(bytes(b.build()))

    refused = RefusedSequences(capacity=2, ttl_s=60)
    assert not refused
    refused.refused("t", 0, batch(-1, -1, -1))  # not idempotent: nothing to remember
    refused.refused("t", 0, b"short")
    refused.refused("t", 0, None)
    assert not refused
    refused.refused("t", 0, batch(7, 1, 4))
    refused.refused("t", 0, batch(7, 1, 2))  # the lowest is kept
    refused.refused("t", 0, batch(7, 1, 6))
    assert refused.lowest("t", 0, 7, 1) == 2 and refused.lowest("t", 0, 7, 0) == -1 and refused.lowest("t", 1, 7, 1) == -1
    refused.taken("t", 0, 7, 1)
    assert refused.lowest("t", 0, 7, 1) == -1 and not refused
    for pid in (1, 2, 3):  # at most two kept: the oldest goes
        refused.refused("t", 0, batch(pid, 0, 0))
    assert [refused.lowest("t", 0, pid, 0) for pid in (1, 2, 3)] == [-1, 0, 0]
    refused.ttl_s = 0
    assert refused.lowest("t", 0, 2, 0) == -1  # too old: forgotten


def test_active_producers_are_described_and_survive_a_snapshot(tmp_path):
    """DescribeProducers' rows: last sequence of the last batch, timestamp of the last batch or marker,
    coordinator epoch of the last marker, first offset of the open transaction; kept by the snapshot (an older snapshot's producers read -1)."""
    state = ProducerStateManager()
    state.update(3, 0, 0, 9, base_offset=0, timestamp=1_000)
    state.update(9, 2, 0, 4, base_offset=10, transactional=True, timestamp=2_000)
    state.update(9, 2, 5, 5, base_offset=15, transactional=True, timestamp=2_500)
    assert state.active_producers() == [(3, 0, 9, 1_000, -1, -1), (9, 2, 5, 2_500, -1, 10)]
    state.apply_marker(9, 2, coordinator_epoch=4, offset=16, timestamp=3_000)
    assert state.active_producers()[1] == (9, 2, 5, 3_000, 4, -1)  # a marker's time is the producer's last, too
    path = str(tmp_path / "producer.snapshot")
    state.snapshot(path, 17)
    loaded, offset = ProducerStateManager.load_snapshot(path)
    assert offset == 17 and loaded.active_producers() == state.active_producers()
    older = (tmp_path / "producer.snapshot").read_text().replace(', "last_timestamp": 1000', "")
    (tmp_path / "older.snapshot").write_text(older)
    assert ProducerStateManager.load_snapshot(str(tmp_path / "older.snapshot"))[0].active_producers()[0] == (
        3, 0, 9, -1, -1, -1)
