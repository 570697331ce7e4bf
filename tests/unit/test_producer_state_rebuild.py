"""Idempotent producers' state rebuilt after a truncation or a restart matches the log that is left: a retry of a
batch the log holds is a duplicate, a batch the log does not hold is not. Each case failed before the fix: the
state was rebuilt from the active segment only when the snapshot was past the log end, and a truncation left that
snapshot on disk, where it passed for one of the regrown log."""

import os

import pytest
from broker.log.log import PRODUCER_SNAPSHOT, LogConfig, PartitionLog
from broker.log.producer_state import DuplicateSequence, OutOfOrderSequence
from broker.protocol import records
from test_log import idempotent_batch, make

pytestmark = [pytest.mark.unit, pytest.mark.timeout(30)]


def put(plog, pid: int, seq: int, count: int) -> int:
    data = idempotent_batch(pid, seq, count)
    return plog.append(data, records.validate(data, 1 << 20))


def restarted(plog) -> PartitionLog:
    plog.close()
    return PartitionLog(plog.dir, "t", 0, LogConfig(), clean_shutdown=False)  # kill -9, then a restart


def test_a_truncation_below_the_snapshot_keeps_the_producers_of_older_segments(tmp_path):
    plog = make(tmp_path)
    put(plog, 42, 0, 3)  # offsets 0-2: producer 42's only batch, in the first segment
    plog.roll()  # snapshot at 3
    put(plog, 7, 0, 3)
    plog.roll()  # snapshot at 6
    put(plog, 7, 3, 3)
    plog.truncate_to(5)  # a follower's truncation below the snapshot
    with pytest.raises(DuplicateSequence) as dup:  # 42's batch is still in the log: its retry is not appended
        put(plog, 42, 0, 3)
    assert dup.value.base_offset == 0
    assert not os.path.exists(os.path.join(plog.dir, PRODUCER_SNAPSHOT))  # the snapshot past the log end is gone


def test_a_snapshot_of_a_truncated_tail_does_not_describe_the_regrown_log(tmp_path):
    plog = make(tmp_path)
    put(plog, 42, 0, 2)  # offsets 0-1
    put(plog, 42, 2, 2)  # offsets 2-3: an old leader's tail, never committed
    plog.snapshot_producers()  # at 4: 42's last sequence is 3
    plog.truncate_to(2)
    put(plog, 9, 0, 2)  # the new leader's records take offsets 2-4
    put(plog, 9, 2, 1)
    reopened = restarted(plog)
    with pytest.raises(OutOfOrderSequence):  # 42's sequences 2-3 are not in the log: not reported as stored
        reopened.producers.check(42, 0, 4, 5)
    reopened.producers.check(42, 0, 2, 3)  # they are the next ones expected


def test_a_snapshot_of_a_truncated_tail_does_not_let_a_stored_batch_in_again(tmp_path):
    plog = make(tmp_path)
    put(plog, 42, 0, 2)  # offsets 0-1
    put(plog, 9, 0, 2)  # offsets 2-3: a tail that is truncated
    plog.snapshot_producers()  # at 4: 42's last batch is sequences 0-1
    plog.truncate_to(2)
    put(plog, 42, 2, 2)  # the leader's log: 42's sequences 2-3 at offsets 2-3
    put(plog, 9, 0, 1)  # offset 4: the log end passes the old snapshot's offset
    reopened = restarted(plog)
    with pytest.raises(DuplicateSequence) as dup:
        put(reopened, 42, 2, 2)
    assert dup.value.base_offset == 2 and reopened.log_end_offset == 5
