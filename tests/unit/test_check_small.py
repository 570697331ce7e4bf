"""The produce path's one-pass check of a small uncompressed batch (``validation.check_small``) against the
general path (``validation.validate``): on every input it either declines (None), or returns the same summary,
or raises the same error. Inputs: valid batches and random corruptions of records, headers and framing."""

import random
import struct

import crc32c
import pytest
from test_batch_validation import CAP, batch_of, good_records, make_batch, record

from broker.protocol import records, validation

pytestmark = [pytest.mark.unit, pytest.mark.timeout(120)]


def outcome(check, *args):
    try:
        return "ok", check(*args)
    except records.InvalidBatch as exc:
        return type(exc), str(exc)


def agree(data: bytes, cap: int = CAP, compacted: bool = False) -> bool:
    """Asserts the two paths agree on ``data``; True when the one-pass check decided (did not decline)."""
    small = outcome(validation.check_small, data, cap, compacted)
    if small == ("ok", None):
        return False
    assert small == outcome(validation.validate, data, cap, compacted)
    return True


def refresh_crc(data: bytearray) -> bytes:
    struct.pack_into(">I", data, 17, crc32c.crc32c(bytes(data[21:])))
    return bytes(data)


def test_valid_small_batches_are_decided_in_one_pass_with_the_general_summary():
    for n in (1, 2, 15):
        for key in (b"k", None):
            data = batch_of(good_records(n, key=key, headers=[(b"h", b"v")]))
            assert agree(data) and agree(data, compacted=True)
            if key is None:  # keyless on a compacted topic: the same error as the general path (agree)
                with pytest.raises(records.InvalidRecord):
                    validation.check_small(data, CAP, True)
    summary = validation.check_small(batch_of(good_records(3)), CAP, False)
    assert (summary.batches, summary.records, summary.offset_count) == (1, 3, 3)


def test_what_it_does_not_take_is_declined():
    declined = [
        batch_of(good_records(16)),  # the compiled check's size
        batch_of(good_records(3), codec=1),  # compressed
        batch_of(good_records(2)) + batch_of(good_records(2)),  # two batches
        make_batch(b"".join(good_records(2)), 2, attributes=0x20),  # a control batch
        batch_of(good_records(3))[:-1],  # framing
        make_batch(b"".join(good_records(3)), 3, last_offset_delta=5),  # count and last offset delta differ
        batch_of([record(0, value=b"v" * 40_000)]),  # over the inline budget
    ]
    bad_crc = bytearray(batch_of(good_records(2)))
    bad_crc[-1] ^= 0xFF
    declined.append(bytes(bad_crc))
    for data in declined:
        assert validation.check_small(data, CAP, False) is None
        agree(data)
    assert validation.check_small(batch_of(good_records(3)), 40, False) is None  # over message.max.bytes


def test_random_corruptions_agree_with_the_general_path():
    rng = random.Random(18)
    decided = 0
    for _ in range(4000):
        n = rng.randint(1, 15)
        data = bytearray(batch_of(good_records(n, headers=[(b"h", b"value")] if rng.random() < 0.5 else ())))
        for _ in range(rng.randint(1, 3)):
            # records (after byte 61) most of the time; sometimes the header, before or after the CRC
            at = rng.randrange(61, len(data)) if rng.random() < 0.8 else rng.randrange(0, 61)
            data[at] = rng.randrange(256)
        data = refresh_crc(data) if rng.random() < 0.9 else bytes(data)
        decided += agree(data, compacted=rng.random() < 0.3)
    assert decided > 1000  # the one-pass check took (and so was compared on) a good share of them


def test_single_records_of_every_shape_and_corruption_agree():
    """The unbatched producer's batches (one record) take a shortcut past the walk; it must never accept what
    the walk refuses."""
    rng = random.Random(27)
    shapes = [dict(key=None), dict(key=b"k"), dict(key=b"k" * 70), dict(value=None), dict(value=b"v" * 200),
              dict(value=b"v" * 9000), dict(headers=[(b"h", b"v")]), dict(ts_delta=-1), dict(ts_delta=70_000)]
    for shape in shapes:
        data = batch_of([record(0, **shape)])
        assert agree(data) and agree(data, compacted=True)
    for _ in range(6000):
        data = bytearray(batch_of([record(0, **rng.choice(shapes))]))
        for _ in range(rng.randint(1, 2)):
            at = rng.randrange(61, min(len(data), 61 + 12)) if rng.random() < 0.7 else rng.randrange(61, len(data))
            data[at] = rng.choice([0x00, 0x01, 0x02, 0x7f, 0x80, 0xff, rng.randrange(256)])
        agree(refresh_crc(data), compacted=rng.random() < 0.3)
