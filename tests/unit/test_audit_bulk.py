"""The audit counter's batch path (:mod:`audit.bulk`, :func:`broker.protocol.control.committed_batches`) against
the per-message rule: the same records, encoded as Kafka batches with transaction markers and aborted
transactions among them, give the same counts, sequence runs, hosts and positions."""

from __future__ import annotations

import random

import pytest
from audit import bulk
from audit.bulk import LONG_MAX, LONG_MIN
from audit.events import PRODUCER_HEADER, SEQUENCE_HEADER, TIME_HEADER
from broker.protocol import kernels
from broker.protocol.batch_builder import build_batch, encode_record
from broker.protocol.control import TRANSACTIONAL, committed_batches, marker_batch
from broker.protocol.record_reader import STORED_BATCH_CAP, records_body
from fake_messages import FakeMessage as Message
from test_audit_counting import audit_headers, counter, reference

pytestmark = [pytest.mark.unit, pytest.mark.timeout(120)]


def random_headers(rng, i, window):
    seqs = [b"%d" % i] * 6 + [b"%d" % rng.randrange(3000), b"-%d" % i, b" 7", b"+8", b"1_0", b"9" * 19, b"9" * 25,
                              b"", b"\xd9\xa1"]
    headers = audit_headers(rng, [b"p1", b"p2", b"\xffp", b"p" * 300, b"p1\0"], seqs, window,
                            [b"h1", b"h2", None, b"\xff"]) or []
    if rng.random() < 0.03:  # a time at the edges of int64, where a window's start or end would leave it
        edge = rng.choice([LONG_MIN, LONG_MIN + window - 1, LONG_MIN + window, LONG_MAX - window,
                           LONG_MAX - window + 1, LONG_MAX])
        headers.append((TIME_HEADER, b"%d" % edge))
    return headers


def partition_log(rng, topic, partition, n, window, first_seq):
    """(the log's bytes, the messages a read_committed consumer sees, its end offset, its aborted transactions as
    (producer, first offset, abort marker offset)): plain batches, committed and aborted transactions (markers
    included) of random sizes."""
    data, seen, offset, i, aborted = bytearray(), [], 0, first_seq, []
    while i < first_seq + n:
        size = rng.randrange(1, 400)
        kind = rng.random()
        records, messages = [], []
        for d in range(size):
            headers = random_headers(rng, i, window)
            records.append(encode_record(d, None, b"v", 0, tuple((k.decode() if isinstance(k, bytes) else k, v)
                                                                  for k, v in headers)))
            messages.append(Message(topic, partition, offset + d, headers=headers))
            i += 1
        pid = 1000 + rng.randrange(3)
        if kind < 0.7:
            data += build_batch(records, timestamp_ms=0, base_offset=offset)
            seen += messages
        else:
            data += build_batch(records, timestamp_ms=0, base_offset=offset, attributes=TRANSACTIONAL,
                                producer_id=pid, producer_epoch=0)
            commit = kind < 0.85
            marker = bytearray(marker_batch(pid, 0, commit, 0, 0))
            marker[0:8] = (offset + size).to_bytes(8, "big")  # base offset (not covered by the CRC)
            data += marker
            if commit:
                seen += messages
            else:
                aborted.append((pid, offset, offset + size))  # producer, first offset, its abort marker
            size += 1
        offset += size
    return bytes(data), seen, offset, aborted


@pytest.mark.parametrize("jit", [True, False])
@pytest.mark.parametrize("seed", range(12))
def test_batches_count_what_the_records_path_counts(seed, jit, monkeypatch):
    if not jit:
        monkeypatch.setattr(kernels, "ENABLED", False)
    rng = random.Random(seed)
    window = rng.choice([1000, 5000, 60000])
    c, seen = counter(window), []
    first_seq = 0
    for topic, partition in (("a", 0), ("a", 1), ("b", 0)):
        data, messages, end, aborted = partition_log(rng, topic, partition, rng.randrange(1, 1500), window, first_seq)
        first_seq += 5000
        # where counting starts: the log's start, or an offset a round of the record path left inside a batch
        position = rng.choice([0, rng.randrange(end)])
        if position:
            c.positions[(topic, partition)] = position
        seen += [m for m in messages if m.offset() >= position]
        pos = _byte_position(data, position)
        while position < end:  # fetches of random sizes, cut mid-batch
            # the aborted transactions a broker reports: those not closed before the fetch offset
            reported = [(p, first) for p, first, marker in aborted if marker >= position]
            cut = data[pos: pos + rng.randrange(1, 60000)]
            batches, after = committed_batches(cut, position, reported)
            if after == position:
                cut = data[pos:]  # a batch larger than the cut: fetch all of it
                batches, after = committed_batches(cut, position, reported)
            consumed = sum(h.size for h, _ in batches)
            c._count_batches(topic, partition, [(h, records_body(b, h, STORED_BATCH_CAP)) for h, b in batches], after)
            pos = _byte_position(data, after)
            assert consumed <= len(cut)
            position = after
        assert c.positions[(topic, partition)] == end
    want, _ = reference(seen, window)
    got = {k: (v["count"], v["seqs"].as_list(), v["end"], v["host"]) for k, v in c.counts.items()}
    assert want and sum(v[0] for v in want.values()) > len(seen) // 3
    assert got == want
    assert c.dirty == set(want)
    assert sum(c.counted.values()) == sum(v[0] for v in want.values())


def _byte_position(data: bytes, offset: int) -> int:
    from broker.protocol.records import read_header

    pos = 0
    while pos < len(data):
        h = read_header(data, pos)
        if h.next_offset > offset:
            return pos
        pos += h.size
    return pos


def test_the_records_path_does_not_audit_integers_beyond_int64():
    c = counter(1000)
    big = [(PRODUCER_HEADER, b"p"), (SEQUENCE_HEADER, b"9" * 20), (TIME_HEADER, b"5")]
    c._count([Message("t", 0, 0, headers=big), Message("t", 0, 1, headers=[*big[:1], (SEQUENCE_HEADER, b"3"),
                                                                             big[2]])])
    assert {k: v["count"] for k, v in c.counts.items()} == {("t", 0, "p"): 1}


def test_runs_in_bulk_are_the_runs_of_the_values():
    import numpy as np
    from audit.ranges import runs

    rng = random.Random(3)
    for _ in range(50):
        values = [rng.randrange(-20, 200) for _ in range(rng.randrange(0, 80))]
        assert bulk.runs(np.array(values, dtype=np.int64)) == runs(values)


def test_an_aborted_transaction_ends_at_its_producers_abort_marker():
    plain = build_batch([encode_record(0, None, b"a")], timestamp_ms=0, base_offset=0)
    txn = build_batch([encode_record(0, None, b"b"), encode_record(1, None, b"c")], timestamp_ms=0, base_offset=1,
                      attributes=TRANSACTIONAL, producer_id=7, producer_epoch=0)
    abort = bytearray(marker_batch(7, 0, False, 0, 0))
    abort[0:8] = (3).to_bytes(8, "big")
    again = build_batch([encode_record(0, None, b"d")], timestamp_ms=0, base_offset=4, attributes=TRANSACTIONAL,
                        producer_id=7, producer_epoch=0)
    data = plain + txn + bytes(abort) + again
    batches, after = committed_batches(data, 0, [(7, 1)])
    assert [h.base_offset for h, _ in batches] == [0, 4] and after == 5
    batches, after = committed_batches(data, 2, [(7, 1)])  # a fetch from inside the aborted transaction
    assert [h.base_offset for h, _ in batches] == [4] and after == 5
    batches, after = committed_batches(data[:-3], 5, [])  # only a cut-off batch after the position
    assert batches == [] and after == 5
