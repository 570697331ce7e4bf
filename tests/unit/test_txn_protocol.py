"""Transactions, the pure parts: markers read back by an outside decoder (kafka-python), __transaction_state
records against hand-built Kafka layouts, Kafka's partition placement and the coordinator's state machine."""

import struct

import pytest
from broker.protocol import control
from broker.protocol.batch_builder import build_batch, encode_record
from broker.protocol.messages import ErrorCode
from broker.protocol.records import InvalidRecord, validate
from broker.protocol.txn_log import (
    TxnRecord,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
    java_hash,
    partition_for,
)
from broker.txn import metadata as m
from kafka.record.default_records import DefaultRecordBatch

pytestmark = [pytest.mark.unit, pytest.mark.timeout(30)]


@pytest.mark.parametrize("commit", [True, False])
def test_marker_is_a_control_batch_kafka_python_reads(commit):
    batch = control.marker_batch(producer_id=4242, producer_epoch=7, commit=commit, coordinator_epoch=3,
                                 timestamp_ms=1_700_000_000_123)
    summary = validate(batch, 1 << 20)  # framing and CRC-32C
    assert summary.control and summary.records == 1
    outside = DefaultRecordBatch(batch)
    assert outside.validate_crc()
    assert outside.is_control_batch and outside.is_transactional
    assert (outside.producer_id, outside.producer_epoch, outside.base_sequence) == (4242, 7, -1)
    (record,) = list(outside)
    assert record.key == struct.pack(">hh", 0, 1 if commit else 0)
    assert record.value == struct.pack(">hi", 0, 3)
    assert control.read_marker(batch) == (control.COMMIT if commit else control.ABORT, 3)


def test_read_marker_refuses_what_is_not_a_marker():
    plain = build_batch([encode_record(0, b"k", b"v")], timestamp_ms=1, attributes=control.CONTROL)
    with pytest.raises(InvalidRecord):
        control.read_marker(plain)
    bad_type = build_batch([encode_record(0, struct.pack(">hh", 0, 9), struct.pack(">hi", 0, 1))], timestamp_ms=1,
                           attributes=control.CONTROL)
    with pytest.raises(InvalidRecord):
        control.read_marker(bad_type)


def test_built_records_decode_with_kafka_python():
    records = [encode_record(i, f"k{i}".encode(), None if i == 2 else b"v" * (i * 100),
                             headers=(("h", b"x"),)) for i in range(3)]
    batch = build_batch(records, timestamp_ms=5, producer_id=9, producer_epoch=1, base_sequence=0)
    got = list(DefaultRecordBatch(batch))
    assert [r.key for r in got] == [b"k0", b"k1", b"k2"]
    assert [r.value for r in got] == [b"", b"v" * 100, None]
    assert [r.offset for r in got] == [0, 1, 2] and got[1].headers == [("h", b"x")]


def test_transaction_log_records_match_kafkas_layout():
    key = encode_key("app-1")
    assert key == struct.pack(">hh", 0, 5) + b"app-1" and decode_key(key) == "app-1"
    rec = TxnRecord(producer_id=77, producer_epoch=2, timeout_ms=60000, status=1,
                    partitions={"b": [3], "a": [1, 0]}, last_update_ms=1000, start_ms=900)
    expected = (struct.pack(">hqhib", 0, 77, 2, 60000, 1) + struct.pack(">i", 2)
                + struct.pack(">h", 1) + b"a" + struct.pack(">iii", 2, 0, 1)
                + struct.pack(">h", 1) + b"b" + struct.pack(">ii", 1, 3) + struct.pack(">qq", 1000, 900))
    assert encode_value(rec) == expected
    assert decode_value(expected) == TxnRecord(77, 2, 60000, 1, {"a": [0, 1], "b": [3]}, 1000, 900)
    empty = TxnRecord(77, 3, 60000, 0, {}, 5, -1)
    assert encode_value(empty)[17:21] == struct.pack(">i", -1)  # Empty: a null partitions array
    assert decode_value(encode_value(empty)) == empty
    with pytest.raises(InvalidRecord):
        decode_value(expected[:-3])


def test_partition_for_is_kafkas():
    assert java_hash("hello") == 99162322  # "hello".hashCode() in Java
    assert java_hash("") == 0
    assert java_hash("polygenelubricants") == -2147483648  # Integer.MIN_VALUE: Utils.abs gives 0
    assert partition_for("polygenelubricants", 50) == 0
    assert partition_for("hello", 50) == 99162322 % 50
    assert java_hash("\U0001F600") == 0xD83D * 31 + 0xDE00  # a surrogate pair: two UTF-16 units


def _meta(state=m.State.EMPTY, epoch=0, pid=100, partitions=None):
    meta = m.TxnMetadata("t", pid, epoch, 60000, state=state, partitions=partitions or {}, start_ms=10)
    return meta


def test_init_producer_transitions():
    new = m.init_producer(None, 60000, now_ms=5)
    assert new.new_producer_id and new.record.status == m.State.EMPTY and new.record.producer_epoch == 0
    bump = m.init_producer(_meta(m.State.COMPLETE_COMMIT, epoch=4), 30000, now_ms=5)
    assert (bump.record.producer_epoch, bump.record.timeout_ms, bump.record.status) == (5, 30000, m.State.EMPTY)
    fence = m.init_producer(_meta(m.State.ONGOING, epoch=4, partitions={"x": {0}}), 60000, now_ms=5)
    assert fence.fence and fence.error == ErrorCode.concurrent_transactions
    assert m.init_producer(_meta(m.State.PREPARE_COMMIT), 60000, 5).error == ErrorCode.concurrent_transactions
    exhausted = m.init_producer(_meta(epoch=m.MAX_EPOCH - 2), 60000, 5)
    assert exhausted.new_producer_id and exhausted.record.producer_epoch == 0
    assert m.init_producer(_meta(epoch=3), 60000, 5, given_pid=100, given_epoch=2).error == ErrorCode.producer_fenced
    assert m.check_timeout(0, 900000) == ErrorCode.invalid_transaction_timeout
    assert m.check_timeout(900001, 900000) == ErrorCode.invalid_transaction_timeout
    rec = m.fence_record(_meta(m.State.ONGOING, epoch=4, partitions={"x": {0}}), 9)
    assert (rec.producer_epoch, rec.status, rec.partitions) == (5, m.State.PREPARE_ABORT, {"x": [0]})


def test_add_partitions_and_end_txn():
    meta = _meta(m.State.EMPTY, epoch=1)
    assert m.add_partitions(None, 100, 1, {"a": {0}}, 5)[0] == ErrorCode.invalid_producer_id_mapping
    assert m.add_partitions(meta, 101, 1, {"a": {0}}, 5)[0] == ErrorCode.invalid_producer_id_mapping
    assert m.add_partitions(meta, 100, 0, {"a": {0}}, 5)[0] == ErrorCode.producer_fenced
    error, rec = m.add_partitions(meta, 100, 1, {"a": {0, 1}}, now_ms=50)
    assert error == ErrorCode.none and rec.status == m.State.ONGOING and rec.start_ms == 50
    meta.apply(rec)
    assert m.add_partitions(meta, 100, 1, {"a": {1}}, 60) == (ErrorCode.none, None)  # nothing new: no write
    error, rec = m.add_partitions(meta, 100, 1, {"b": {2}}, 70)
    assert rec.partitions == {"a": [0, 1], "b": [2]} and rec.start_ms == 50
    meta.apply(rec)
    assert m.end_txn(meta, 100, 0, True, 80)[0] == ErrorCode.producer_fenced
    error, rec = m.end_txn(meta, 100, 1, True, 80)
    assert error == ErrorCode.none and rec.status == m.State.PREPARE_COMMIT
    meta.apply(rec)
    assert m.end_txn(meta, 100, 1, True, 81) == (ErrorCode.concurrent_transactions, None)  # retry while preparing
    assert m.add_partitions(meta, 100, 1, {"a": {0}}, 81)[0] == ErrorCode.concurrent_transactions
    meta.apply(m.complete_record(meta, 90))
    assert meta.state == m.State.COMPLETE_COMMIT and meta.partitions == {}
    assert m.end_txn(meta, 100, 1, True, 91) == (ErrorCode.none, None)  # a retry of the same result
    assert m.end_txn(meta, 100, 1, False, 91) == (ErrorCode.invalid_txn_state, None)
    assert m.end_txn(_meta(m.State.EMPTY, epoch=1), 100, 1, True, 91) == (ErrorCode.invalid_txn_state, None)
    meta.pending = True
    assert m.end_txn(meta, 100, 1, True, 91) == (ErrorCode.concurrent_transactions, None)


def test_timeouts_and_expiry():
    meta = _meta(m.State.ONGOING, partitions={"a": {0}})
    assert not m.timed_out(meta, 10 + 60000) and m.timed_out(meta, 10 + 60001)
    meta.pending = True
    assert not m.timed_out(meta, 10**9)
    done = _meta(m.State.COMPLETE_ABORT)
    done.last_update_ms = 100
    assert m.expired(done, 100 + 1001, 1000) and not m.expired(done, 100 + 1000, 1000)
    assert not m.expired(_meta(m.State.ONGOING), 10**12, 1000)
