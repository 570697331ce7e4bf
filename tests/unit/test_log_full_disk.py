"""A disk that refuses writes (ENOSPC, EIO) never leaves a partial write behind and never stops the broker.

Every write site of the broker is driven into a refused write by a fake: ``os.writev`` of the segment writing half
of its bytes and then failing (a torn append), ``os.open`` failing for the files of a new segment, ``os.fsync``
failing, and ``open()`` of a ``*.tmp`` file whose first write stores half of its bytes and then fails (checkpoint
files replaced whole). Each test checks that the files and the in-memory state are exactly as before the refused
write, and that the same write succeeds once the disk takes it again.
"""

import asyncio
import errno
import logging
import os
import time
import types

import pytest
from broker.cluster import fetcher as fetcher_module
from broker.cluster.partition import Partition
from broker.groups.coordinator import GroupCoordinator
from broker.log import segment as segment_module
from broker.log.cleaner import LogCleaner, clean_segment
from broker.log.epoch_cache import EpochCache
from broker.log.log import LogConfig, PartitionLog
from broker.log.manager import LogManager, read_checkpoint, write_checkpoint
from broker.protocol import records
from broker.protocol.messages import ErrorCode
from kafka.record.default_records import DefaultRecordBatchBuilder

pytestmark = [pytest.mark.unit, pytest.mark.timeout(30)]

REAL_OPEN = open
REAL_OS_OPEN = os.open
REAL_WRITEV = os.writev


def enospc() -> OSError:
    return OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def refusing(code: int):
    """A stand-in for an ``os`` call that the disk refuses with ``code``."""
    def refuse(*args, **kwargs):
        raise OSError(code, os.strerror(code))
    return refuse


def idempotent_batch(values: list[bytes], sequence: int, producer_id: int = 7, keys=None) -> bytes:
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False,
                                        producer_id=producer_id, producer_epoch=0, base_sequence=sequence,
                                        batch_size=1 << 20)
    for i, value in enumerate(values):
        builder.append(i, timestamp=1_700_000_000_000 + sequence + i, key=keys[i] if keys else None, value=value,
                       headers=[])
    return bytes(builder.build())


def make(directory, **config) -> PartitionLog:
    return PartitionLog(str(directory), "t", 0, LogConfig(**config))


def append(plog: PartitionLog, data: bytes) -> int:
    return plog.append(data, records.validate(data, 1 << 20))


def served(plog: PartitionLog) -> list[int]:
    """Offsets of every record the log serves, each batch's CRC checked."""
    out, offset = [], plog.log_start_offset
    while (region := plog.read(offset, 1 << 20, committed_only=False)) is not None:
        data, pos = region.read(), 0
        while pos + records.HEADER_SIZE <= len(data):
            header = records.read_header(data, pos)
            if pos + header.size > len(data):
                break
            assert records.crc_ok(data, pos, header.size)
            out.extend(range(header.base_offset, header.next_offset))
            offset, pos = header.next_offset, pos + header.size
    return out


def state(plog: PartitionLog) -> dict:
    """Everything an append may change: files, offsets, indexes, producer and epoch state."""
    return {
        "files": {name: os.path.getsize(os.path.join(plog.dir, name)) for name in sorted(os.listdir(plog.dir))
                  if name != "leader-epoch-checkpoint"},
        "epochs on disk": EpochCache(plog.dir).entries,
        "segments": [(s.base_offset, s.size, s.next_offset, len(s.offset_index), len(s.time_index),
                      s.max_timestamp) for s in plog.segments],
        "offsets": (plog.log_start_offset, plog.high_watermark, plog.log_end_offset, plog.recovery_point),
        "producers": {pid: (p.epoch, list(p.batches)) for pid, p in plog.producers._producers.items()},
        "epochs": list(plog.epochs.entries),
    }


def torn_writev(fd, parts):
    """The disk takes half of the bytes, then refuses the rest."""
    data = b"".join(bytes(p) for p in parts)
    os.write(fd, data[: len(data) // 2])
    raise enospc()


class HalfWrittenFile:
    """A file whose first write stores half of its bytes and then fails, as on a disk filling up."""

    def __init__(self, path, mode):
        self._file = REAL_OPEN(path, mode)

    def write(self, data):
        self._file.write(data[: len(data) // 2])
        self._file.flush()
        raise enospc()

    def __getattr__(self, name):
        return getattr(self._file, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._file.close()


def refuse_temp_files(monkeypatch, suffix: str = ".tmp") -> None:
    """``open()`` of a file named ``*<suffix>`` for writing gives a HalfWrittenFile."""

    def fake_open(path, mode="r", *args, **kwargs):
        if str(path).endswith(suffix) and ("w" in mode or "a" in mode):
            return HalfWrittenFile(path, mode)
        return REAL_OPEN(path, mode, *args, **kwargs)

    monkeypatch.setattr("builtins.open", fake_open)


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


# ---- leader appends ---------------------------------------------------------------------------------------------
def test_a_torn_append_leaves_segment_indexes_offsets_and_producer_state_as_before(tmp_path, monkeypatch):
    plog = make(tmp_path / "t-0", index_interval_bytes=1)
    for seq in range(3):
        assert append(plog, idempotent_batch([b"x" * 200, b"y" * 200], 2 * seq)) == 2 * seq
    before = state(plog)
    monkeypatch.setattr(segment_module.os, "writev", torn_writev)
    with pytest.raises(OSError) as refused:
        append(plog, idempotent_batch([b"z" * 5000], 6))
    assert refused.value.errno == errno.ENOSPC
    assert state(plog) == before
    monkeypatch.undo()
    assert append(plog, idempotent_batch([b"z" * 5000], 6)) == 6  # the producer's retry: not a duplicate
    assert served(plog) == list(range(7))
    plog.close()
    reopened = PartitionLog(plog.dir, "t", 0, LogConfig(), clean_shutdown=False)  # recovery checks every CRC
    assert reopened.log_end_offset == 7 and served(reopened) == list(range(7))


def test_a_tail_that_cannot_be_cut_back_refuses_appends_until_it_is_cut(tmp_path, monkeypatch):
    plog = make(tmp_path / "t-0")
    append(plog, idempotent_batch([b"a" * 300], 0))
    good_size = plog.active.size
    monkeypatch.setattr(segment_module.os, "writev", torn_writev)
    monkeypatch.setattr(segment_module.os, "ftruncate", refusing(errno.EIO))
    with pytest.raises(OSError):
        append(plog, idempotent_batch([b"b" * 300], 1))
    monkeypatch.setattr(segment_module.os, "writev", REAL_WRITEV)
    with pytest.raises(OSError):  # the torn bytes are still there: nothing may be written after them
        append(plog, idempotent_batch([b"b" * 300], 1))
    with pytest.raises(OSError):  # nor may a clean shutdown vouch for this file
        plog.flush()
    assert served(plog) == [0] and plog.log_end_offset == 1  # the torn bytes are never served
    monkeypatch.undo()
    assert append(plog, idempotent_batch([b"b" * 300], 1)) == 1
    assert os.path.getsize(plog.active.path) == plog.active.size > good_size
    assert served(plog) == [0, 1]
    plog.flush()
    plog.close()
    assert served(PartitionLog(plog.dir, "t", 0, LogConfig(), clean_shutdown=True)) == [0, 1]


@pytest.mark.parametrize("refused", [".index", ".timeindex", "producer.snapshot"])
def test_a_roll_refused_by_the_disk_keeps_the_old_segment_active(tmp_path, monkeypatch, refused):
    plog = make(tmp_path / "t-0", segment_bytes=1000)
    append(plog, idempotent_batch([b"a" * 600], 0))
    before, fds = state(plog), open_fds()
    if refused == "producer.snapshot":
        refuse_temp_files(monkeypatch)
    else:
        def fake_open(path, flags, mode=0o777, **kw):
            if path.endswith(f"{1:020d}{refused}"):
                raise enospc()
            return REAL_OS_OPEN(path, flags, mode, **kw)
        monkeypatch.setattr(os, "open", fake_open)
    with pytest.raises(OSError):
        append(plog, idempotent_batch([b"b" * 600], 1))  # does not fit: rolls first
    assert state(plog) == before and open_fds() == fds
    monkeypatch.undo()
    assert append(plog, idempotent_batch([b"b" * 600], 1)) == 1
    assert [s.base_offset for s in plog.segments] == [0, 1] and served(plog) == [0, 1]


def test_an_append_whose_flush_the_disk_refuses_is_rolled_back(tmp_path, monkeypatch):
    plog = make(tmp_path / "t-0", flush_interval_messages=1, index_interval_bytes=1)
    append(plog, idempotent_batch([b"a"], 0))
    before = state(plog)
    monkeypatch.setattr(os, "fsync", refusing(errno.EIO))
    with pytest.raises(OSError):
        append(plog, idempotent_batch([b"b"], 1))  # flush.messages=1: not acknowledged unless on disk
    assert state(plog) == before
    monkeypatch.undo()
    assert append(plog, idempotent_batch([b"b"], 1)) == 1 and plog.recovery_point == 2


# ---- files replaced whole ----------------------------------------------------------------------------------------
def _checkpoint(directory):
    path = os.path.join(directory, "recovery-point-offset-checkpoint")
    write_checkpoint(path, {("t", 0): 1})
    return path, lambda: write_checkpoint(path, {("t", 0): 2, ("u", 0): 5})


def _epochs(directory):
    cache = EpochCache(str(directory))
    cache.assign(1, 0)
    cache.assign(2, 10)
    return cache.path, lambda: cache.truncate_from_end(5)


def _producers(directory):
    plog = make(directory / "t-0")
    append(plog, idempotent_batch([b"a"], 0))
    plog.snapshot_producers()
    append(plog, idempotent_batch([b"b"], 1))
    return plog._snapshot_path, plog.snapshot_producers


@pytest.mark.parametrize("writer", [_checkpoint, _epochs, _producers])
def test_a_file_replaced_whole_is_kept_as_it_was_when_the_disk_refuses_the_new_one(tmp_path, monkeypatch, writer):
    path, rewrite = writer(tmp_path)
    old = open(path).read()
    refuse_temp_files(monkeypatch)
    try:
        rewrite()
    except OSError:
        pass
    monkeypatch.undo()
    assert open(path).read() == old
    leftovers = [n for n in os.listdir(os.path.dirname(path)) if n.endswith(".tmp")]
    assert leftovers == []  # a half-written temp file would hold the space the disk lacks


def test_background_checkpoints_on_a_full_disk_report_once_and_retry(tmp_path, monkeypatch, caplog):
    manager = LogManager([str(tmp_path)], lambda topic: LogConfig(flush_ms=0))
    for p in range(3):
        append(manager.create("t", p), idempotent_batch([b"v"], 0, producer_id=p))
    refuse_temp_files(monkeypatch)
    monkeypatch.setattr(os, "fsync", refusing(errno.ENOSPC))
    caplog.set_level(logging.INFO)
    manager.checkpoint()
    manager.flush_due()
    errors = len([r for r in caplog.records if r.levelno >= logging.ERROR])
    for _ in range(5):  # the periodic tasks keep running: nothing raises, the log is not flooded
        manager.checkpoint()
        manager.flush_due()
    assert errors >= 1 and len([r for r in caplog.records if r.levelno >= logging.ERROR]) == errors
    assert not os.path.exists(tmp_path / "recovery-point-offset-checkpoint")
    monkeypatch.undo()
    manager.flush_due()
    manager.checkpoint()
    assert read_checkpoint(str(tmp_path / "recovery-point-offset-checkpoint")) == {("t", p): 1 for p in range(3)}
    assert any(r.levelno == logging.INFO and "again" in r.getMessage() for r in caplog.records)


# ---- replication ---------------------------------------------------------------------------------------------------
def leader_bytes(tmp_path) -> bytes:
    """Two batches as a leader in leader epoch 3 stored them (offsets 0-2)."""
    leader = make(tmp_path / "leader" / "t-0")
    leader.leader_epoch = 3
    append(leader, idempotent_batch([b"a", b"b"], 0))
    append(leader, idempotent_batch([b"c"], 2))
    return leader.read(0, 1 << 20).read()


def test_a_follower_append_refused_by_the_disk_backs_off_and_retries_from_the_same_offset(tmp_path, monkeypatch):
    follower = make(tmp_path / "follower" / "t-0")
    follower.replicated = True
    config = {"replica.fetch.backoff.ms": 1000}
    manager = types.SimpleNamespace(broker=types.SimpleNamespace(node_id=2, config=config))
    fetcher = fetcher_module.LeaderFetcher(manager, 1)
    followed = fetcher_module.Followed(types.SimpleNamespace(topic="t", index=0, log=follower), False)
    fetched = types.SimpleNamespace(error_code=0, records=leader_bytes(tmp_path), high_watermark=3,
                                    log_start_offset=0)
    before = state(follower)
    monkeypatch.setattr(segment_module.os, "writev", torn_writev)
    started = time.monotonic()
    fetcher._apply(followed, fetched)  # must not raise: that would end the fetch loop's round for every partition
    assert state(follower) == before  # no torn batch, no leader epoch for data it does not have
    assert started < followed.retry_at <= time.monotonic() + 1.0 and not followed.needs_truncation
    monkeypatch.undo()
    fetcher._apply(followed, fetched)
    assert follower.log_end_offset == 3 and follower.high_watermark == 3 and follower.epochs.entries == [(3, 0)]
    assert served(follower) == [0, 1, 2]


def test_a_replica_elected_leader_on_a_full_disk_leads_and_writes_once_space_returns(tmp_path, monkeypatch):
    plog = make(tmp_path / "t-0")
    part = Partition("t", 0, plog, broker_id=1)
    part.become_follower(2, 4, (1, 2), [1, 2], 0, 0)
    refuse_temp_files(monkeypatch)
    part.become_leader(5, (1, 2), [1, 2], 1, 0)  # the leader-epoch checkpoint cannot be written
    assert part.is_leader and set(part.followers) == {2} and plog.epochs.latest_epoch == 5
    with pytest.raises(OSError):  # no batch of epoch 5 before the file knows epoch 5
        append(plog, idempotent_batch([b"a"], 0))
    monkeypatch.undo()
    assert append(plog, idempotent_batch([b"a"], 0)) == 0
    assert EpochCache(plog.dir).entries == [(5, 0)]


# ---- compaction and consumer offsets ----------------------------------------------------------------------------
def test_compaction_on_a_full_disk_leaves_no_partial_segment_and_the_cleaner_carries_on(tmp_path, monkeypatch,
                                                                                         caplog):
    manager = LogManager([str(tmp_path)], lambda topic: LogConfig(segment_bytes=300, cleanup_policy="compact"))
    plog = manager.create("c", 0)
    for seq in range(8):
        append(plog, idempotent_batch([b"v" * 100], seq, keys=[b"same-key"]))
    plog.high_watermark = plog.log_end_offset
    topic = types.SimpleNamespace(configs={"cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0.01"})
    broker = types.SimpleNamespace(log_dirs=[str(tmp_path)], logs=manager, topics=types.SimpleNamespace(
        get=lambda name: topic), config={"log.cleanup.policy": "compact", "log.cleaner.min.cleanable.ratio": 0.5,
                                         "log.cleaner.delete.retention.ms": 0,
                                         "log.cleaner.min.compaction.lag.ms": 0,
                                         "log.cleaner.max.compaction.lag.ms": 2**63 - 1})
    cleaner = LogCleaner(broker)
    before = state(plog)
    refuse_temp_files(monkeypatch, ".cleaned")
    assert asyncio.run(cleaner.run_once()) is False  # refused: no exception for the background loop to log
    assert state(plog) == before
    assert [n for n in os.listdir(plog.dir) if n.endswith((".cleaned", ".swap"))] == []
    assert any(r.levelno >= logging.ERROR for r in caplog.records)
    monkeypatch.undo()
    assert asyncio.run(cleaner.run_once()) is True  # space is back: the next round cleans
    assert served(plog) == [6, 7]  # the latest value of the key (6) and the active segment


def test_a_segment_rewrite_refused_by_the_disk_removes_its_partial_file(tmp_path, monkeypatch):
    plog = make(tmp_path / "c-0")
    append(plog, idempotent_batch([b"v" * 100], 0, keys=[b"k"]))
    refuse_temp_files(monkeypatch, ".cleaned")
    with pytest.raises(OSError):
        clean_segment(plog.active.path, plog.active.size, {}, 0)
    assert not os.path.exists(plog.active.path + ".cleaned")


def test_an_offset_commit_refused_by_the_disk_is_answered_with_an_error_and_changes_nothing(tmp_path, monkeypatch):
    broker = types.SimpleNamespace(cluster=None, log_dirs=[str(tmp_path)], node_id=0,
                                   config={"group.initial.rebalance.delay.ms": 0,
                                           "group.consumer.session.timeout.ms": 45000})

    async def scenario():
        coordinator = GroupCoordinator(broker)
        await coordinator.start()
        try:
            assert await coordinator.commit("g", "", -1, {("t", 0): (5, "")}) == ErrorCode.none
            refuse_temp_files(monkeypatch)
            refused = await coordinator.commit("g", "", -1, {("t", 0): (9, "")})
            monkeypatch.undo()
            assert refused == ErrorCode.not_coordinator  # Kafka's answer to a storage error: retriable
            assert await coordinator.fetch_offsets("g", [("t", 0)]) == (ErrorCode.none, {("t", 0): (5, "")})
            assert coordinator.store.offsets["g"] == {("t", 0): (5, "")}
            assert await coordinator.commit("g", "", -1, {("t", 0): (9, "")}) == ErrorCode.none
        finally:
            await coordinator.stop()

    asyncio.run(scenario())
    assert [n for n in os.listdir(tmp_path) if n.endswith(".tmp")] == []
