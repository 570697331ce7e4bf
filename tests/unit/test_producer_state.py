import pytest
from broker.log.producer_state import (
    DuplicateSequence,
    InvalidProducerEpoch,
    OutOfOrderSequence,
    ProducerStateManager,
    UnknownProducer,
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


def test_a_producer_new_to_a_partition_that_lost_nothing_starts_at_sequence_0():
    """A gap at a producer's start: librdkafka's first request to a new topic's partition refused
    (NOT_LEADER_OR_FOLLOWER) while its next, sequence 2, was taken; librdkafka then counted the first records as
    delivered (a later sequence acknowledged implies the earlier ones were) and they were lost. In a partition
    that lost nothing (``gapless``) it is refused; where retention or compaction may have deleted the producer's
    batches, any first sequence is taken, as in Kafka."""
    state = ProducerStateManager()
    with pytest.raises(UnknownProducer, match="starts at sequence 0, not 2"):
        state.check(7, 0, 2, 2, gapless=True)
    state.check(7, 0, 2, 2)  # the log may have lost its earlier batches: taken
    state.check(7, 0, 0, 1, gapless=True)
    state.update(7, 0, 0, 1, base_offset=0)
    state.check(7, 0, 2, 2, gapless=True)  # known now: its next sequence
    with pytest.raises(UnknownProducer):
        state.check(8, 0, 5, 5, transactional=True, gapless=True)
    state.check(-1, -1, -1, -1, gapless=True)  # non-idempotent batches are never checked


def test_the_partition_log_refuses_a_first_gap_unless_it_may_have_lost_batches(tmp_path):
    from broker.log.log import LogConfig, PartitionLog
    from broker.protocol import records
    from kafka.record.default_records import DefaultRecordBatchBuilder

    def batch(pid: int, first_seq: int, count: int) -> bytes:
        b = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False, producer_id=pid,
                                      producer_epoch=0, base_sequence=first_seq, batch_size=1 << 20)
        for i in range(count):
            b.append(i, timestamp=1_700_000_000_000 + i, key=b"k%d" % i, value=b"v%d" % i, headers=[])
        return bytes(b.build())

    def append(plog, data):
        return plog.append(data, records.validate(data, 1 << 20))

    plog = PartitionLog(str(tmp_path / "plain"), "t", 0, LogConfig())
    with pytest.raises(UnknownProducer):
        append(plog, batch(42, 2, 1))
    assert plog.log_end_offset == 0  # nothing written
    assert append(plog, batch(42, 0, 2)) == 0 and append(plog, batch(42, 2, 1)) == 2
    compacted = PartitionLog(str(tmp_path / "compacted"), "t", 0, LogConfig(cleanup_policy="compact"))
    assert append(compacted, batch(42, 2, 1)) == 0  # the cleaner may have removed the producer's batches
    trimmed = PartitionLog(str(tmp_path / "trimmed"), "t", 0, LogConfig())
    trimmed.reset_to(5)  # starts past 0 (a follower reset behind its leader's log start): batches may be gone
    assert append(trimmed, batch(42, 2, 1)) == 5
