"""One request must never kill a broker or keep it from starting again (issue 24): regression tests against a
real broker process for the request-level findings (#1, #3, #6) and start-up after any stop (#2, #4).

Batch-level findings (#2's validation, #4, #5) are in test_hostile_batches.py; the fuzz run in test_fuzz.py.
"""

import datetime
import os
import socket
import struct
import subprocess
import threading
import time
import uuid

import crc32c
import pytest
from rawclient import RawClient, batch, request_module
from support import read_topic

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

HUGE = "ffffffff0f"
FLEX_HEADER = "{key:04x}{version:04x}00000001ffff00"
REPRODUCERS = {  # (api, version) -> body bytes after the header: one huge compact count, as in the issue
    (3, 12): "0001" + "78" + "00" + HUGE,  # the 21 bytes: client id "x", no tags, topics = 2^32 - 2
    (11, 7): "0267" + "00002710" * 2 + "01" + "00" + "09" + b"consumer".hex() + HUGE,
    (19, 5): HUGE,
    (16, 4): HUGE,
    (9, 6): "0267" + HUGE,
    (23, 4): "ffffffff" + HUGE,
}


def frame(key: int, version: int, body_hex: str) -> bytes:
    if (key, version) == (3, 12):
        payload = bytes.fromhex("0003000c00000001" + body_hex)
    else:
        payload = bytes.fromhex(FLEX_HEADER.format(key=key, version=version) + body_hex)
    return struct.pack(">i", len(payload)) + payload


def closed_by_broker(broker, data: bytes, timeout: float = 10) -> bool:
    with socket.create_connection((broker.host, broker.port), timeout=timeout) as sock:
        sock.sendall(data)
        try:
            return sock.recv(1) == b""
        except ConnectionResetError:
            return True


def produce(client, topic, values, partition=0, version=7):
    m = request_module(0, version)
    body = m.ProduceRequest(transactional_id=None, acks=1, timeout=datetime.timedelta(seconds=5), topic_data=(
        m.TopicProduceData(name=topic, partition_data=(m.PartitionProduceData(index=partition,
                                                                              records=batch(values)),)),))
    resp = client.request(0, version, body).responses[0].partition_responses[0]
    return resp.error_code.value, resp.base_offset


def create_topic(client, name, partitions, version=5):
    m = request_module(19, version)
    body = m.CreateTopicsRequest(topics=(m.CreatableTopic(name=name, num_partitions=partitions, replication_factor=1,
                                                          assignments=(), configs=()),),
                                 timeout=datetime.timedelta(seconds=30), validate_only=False)
    result = client.request(19, version, body).topics[0]
    return result.error_code.value, result.error_message


def metadata_partition_errors(client, topic):
    m = request_module(3, 9)
    body = m.MetadataRequest(topics=(m.MetadataRequestTopic(name=topic),), allow_auto_topic_creation=False,
                             include_cluster_authorized_operations=False, include_topic_authorized_operations=False)
    return [p.error_code.value for p in client.request(3, 9, body).topics[0].partitions]


def serves(broker) -> bool:
    """A second client can still produce and read back."""
    topic = f"alive-{uuid.uuid4().hex[:6]}"
    client = RawClient(broker.host, broker.port)
    try:
        create_topic(client, topic, 1)
        assert produce(client, topic, [b"still here"]) == (0, 0)
    finally:
        client.close()
    return [m.value() for m in read_topic(broker.bootstrap, topic)] == [b"still here"]


class LatencyProbe:
    """Metadata round trips every 10 ms from another connection; ``worst`` is the longest one seen (s)."""

    def __init__(self, broker):
        self.client = RawClient(broker.host, broker.port, timeout=30)
        self.worst = 0.0
        self.answers: list[float] = []  # when each round trip ended (time.monotonic())
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        m = request_module(3, 1)
        while not self._stop.is_set():
            started = time.monotonic()
            self.client.request(3, 1, m.MetadataRequest(topics=()))
            ended = time.monotonic()
            self.answers.append(ended)
            self.worst = max(self.worst, ended - started)
            time.sleep(0.01)

    def answered_between(self, start: float, end: float) -> int:
        return sum(1 for t in self.answers if start < t < end)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join(10)
        self.client.close()


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


@pytest.mark.parametrize("api", sorted(REPRODUCERS), ids=lambda a: f"api{a[0]}v{a[1]}")
def test_a_huge_collection_count_closes_only_that_connection(broker, api):
    assert closed_by_broker(broker, frame(*api, REPRODUCERS[api]))
    assert broker.alive(), broker.log_text()[-3000:]
    assert "tried to allocate a collection of size 4294967294" in broker.log_text()
    assert serves(broker)


def test_a_null_array_where_the_schema_forbids_one_is_refused_without_a_traceback(broker):
    before = broker.log_text().count("Traceback")
    m = request_module(0, 3)  # Produce v3: transactional_id null, acks 1, timeout, topic_data = null
    payload = struct.pack(">hhih", 0, 3, 1, -1) + struct.pack(">hhii", -1, 1, 5000, -1)
    assert m is not None and closed_by_broker(broker, struct.pack(">i", len(payload)) + payload)
    payload = struct.pack(">hhih", 9, 5, 2, -1) + struct.pack(">h", 1) + b"g" + struct.pack(">i", 0)  # OffsetFetch
    with socket.create_connection((broker.host, broker.port), timeout=10) as sock:  # v5: topics [] is fine
        sock.sendall(struct.pack(">i", len(payload)) + payload)
        assert sock.recv(4)
    assert broker.log_text().count("Traceback") == before
    assert "topic_data: null or negative array" in broker.log_text()


def test_a_million_partitions_is_a_policy_violation_and_big_creations_do_not_stall_others(fresh_broker):
    broker = fresh_broker().start()
    client = RawClient(broker.host, broker.port, timeout=60)
    started = time.monotonic()
    error, message = create_topic(client, "huge", 1_000_000)
    assert error == 44 and "max.broker.partitions" in message  # POLICY_VIOLATION
    assert time.monotonic() - started < 5
    assert create_topic(client, "none", 0)[0] == 37  # INVALID_PARTITIONS
    with LatencyProbe(broker) as probe:
        began = time.monotonic()
        assert create_topic(client, "big", 2000) == (0, None)
        took = time.monotonic() - began
    print(f"2,000 partitions created in {took * 1000:.0f} ms; longest Metadata round trip meanwhile "
          f"{probe.worst * 1000:.0f} ms")
    # it yields between small batches: others wait a fraction of the creation, not all of it. A creation done in one
    # loop pass would hold every Metadata answer for all of it (worst ~ took, one answer at most meanwhile). On a
    # loaded machine (CI beside other suites) the probe's own round trips were seen at 1.35 s of a 3.69 s creation
    # and 1.71 s of 2.61 s while the loop did yield: three quarters of the creation is the bound, and answers must
    # have come while it ran.
    assert probe.worst < max(1.0, took * 0.75), (probe.worst, took)
    assert took < 0.5 or probe.answered_between(began, began + took) >= 2, (probe.answers[-20:], began, took)
    assert broker.alive() and serves(broker)
    broker.kill9()
    broker.start()
    assert serves(broker)
    client.close()


def test_a_configured_partition_cap_is_enforced(fresh_broker):
    broker = fresh_broker(max_broker_partitions=50).start()
    client = RawClient(broker.host, broker.port)
    assert create_topic(client, "a", 40)[0] == 0
    assert create_topic(client, "b", 11)[0] == 44
    assert create_topic(client, "b", 10)[0] == 0
    client.close()


def test_memory_of_huge_unfinished_frames_is_bounded_and_given_back(fresh_broker):
    """Four connections each send 90 MB of a 100 MB frame: queued.max.request.bytes (200 MB) holds two at a
    time, small requests are still served meanwhile, and the memory goes back when they close."""
    broker = fresh_broker().start()
    time.sleep(1)
    base = rss_mb(broker.proc.pid)
    sockets, threads = [], []

    def send(sock):
        try:
            sock.sendall(struct.pack(">i", 100_000_000))
            chunk = b"\0" * (1 << 20)
            for _ in range(90):
                sock.sendall(chunk)
        except OSError:
            pass  # the two that wait for the pool time out here

    for _ in range(4):
        sock = socket.create_connection((broker.host, broker.port), timeout=10)
        sockets.append(sock)
        threads.append(threading.Thread(target=send, args=(sock,), daemon=True))
        threads[-1].start()
    with LatencyProbe(broker) as probe:
        time.sleep(6)
    during = rss_mb(broker.proc.pid)
    for sock in sockets:
        sock.close()
    for thread in threads:
        thread.join(20)
    time.sleep(3)
    after = rss_mb(broker.proc.pid)
    print(f"RSS: base {base:.0f} MB, with 4 x 90 MB unfinished frames {during:.0f} MB, after {after:.0f} MB; "
          f"small requests meanwhile: worst {probe.worst * 1000:.0f} ms")
    assert during - base < 200 + 40  # two frames of 90 MB at most, plus buffers
    assert after - base < 30
    assert probe.worst < 1.0
    assert broker.alive() and serves(broker)


def stretched(data: bytes, base_offset: int, last_offset_delta: int) -> bytes:
    out = bytearray(data)
    struct.pack_into(">q", out, 0, base_offset)
    struct.pack_into(">i", out, 23, last_offset_delta)
    struct.pack_into(">I", out, 17, crc32c.crc32c(bytes(out[21:])))
    return bytes(out)


def test_start_up_after_kill_9_with_an_overflowing_segment_and_an_unloadable_partition(fresh_broker):
    """Finding #2's aftermath: a segment holding offsets 2^31 past its base (as old main accepted) made
    recovery raise and the broker stay down. Plus one partition whose files cannot be opened at all."""
    broker = fresh_broker().start()
    client = RawClient(broker.host, broker.port)
    for name in ("keep", "over", "broken"):
        assert create_topic(client, name, 1)[0] == 0
        assert produce(client, name, [b"first", b"second"]) == (0, 0)
    client.close()
    broker.kill9()
    over = broker.log_dir / "over-0" / "00000000000000000000.log"
    with open(over, "ab") as f:
        f.write(stretched(batch([b"wide"]), 2, 2**31 - 1))
        f.write(stretched(batch([b"after"]), 2**31 + 2, 0))
    broken = broker.log_dir / "broken-0" / "00000000000000000000.log"
    broken.unlink()
    broken.mkdir()  # the segment cannot be opened: that partition goes offline, the rest serve
    broker.start()
    client = RawClient(broker.host, broker.port)
    assert produce(client, "over", [b"next"]) == (0, 2**31 + 3)
    assert produce(client, "keep", [b"third"]) == (0, 2)
    assert produce(client, "broken", [b"x"])[0] == 56  # KAFKA_STORAGE_ERROR
    assert metadata_partition_errors(client, "broken") == [56]
    assert metadata_partition_errors(client, "keep") == [0]
    client.close()
    assert [m.value() for m in read_topic(broker.bootstrap, "keep")] == [b"first", b"second", b"third"]
    assert "partition broken-0 is OFFLINE" in broker.log_text()


@pytest.fixture
def small_disk(tmp_path):
    """An 8 MiB tmpfs (root only: CI runs as root); unmounted at the end."""
    path = tmp_path / "disk"
    path.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(path)],
                                           capture_output=True).returncode != 0:
        pytest.skip("mounting a small tmpfs needs root")
    yield path
    subprocess.run(["umount", "-l", str(path)], check=False)


def test_a_full_disk_refuses_writes_with_a_kafka_error_and_start_up_still_succeeds(fresh_broker, small_disk):
    broker = fresh_broker(log_dirs=str(small_disk / "logs"), log_segment_bytes=1 << 20)
    broker.start()
    client = RawClient(broker.host, broker.port)
    assert create_topic(client, "fill", 1)[0] == 0
    filler = small_disk / "filler"
    filler.write_bytes(b"\0" * (1 << 20))  # space to give back later
    acknowledged, errors = [], []
    value = os.urandom(50_000)
    for i in range(400):
        error, base = produce(client, "fill", [value + str(i).encode()])
        if error == 0:
            acknowledged.append((base, i))
        else:
            errors.append(error)
            if len(errors) >= 5:
                break
    assert acknowledged and set(errors) == {56}, errors  # KAFKA_STORAGE_ERROR, connection kept
    assert broker.alive()
    filler.unlink()  # space returns: writes resume
    error, base = produce(client, "fill", [value + b"again"])
    assert error == 0 and base == acknowledged[-1][0] + 1
    acknowledged.append((base, "again"))
    client.close()
    with open(small_disk / "filler", "wb", buffering=0) as f:  # fill the disk again, then crash: start-up on a full disk
        try:
            while True:
                f.write(b"\0" * 65536)
        except OSError:
            pass
    broker.kill9()
    broker.start()
    got = read_topic(broker.bootstrap, "fill")
    assert [m.offset() for m in got] == [base for base, _ in acknowledged]
    assert [m.value() for m in got] == [value + (str(i).encode() if i != "again" else b"again")
                                        for _, i in acknowledged]


FUZZ_FINDINGS = {  # found by tests/integration/test_fuzz.py on the code before issue 24 (hex of whole frames)
    # JoinGroup v0: a consumer subscription claiming 2^31-1 topics, one of length -2: parsed on the event loop
    "join_group_subscription": "00000035000b0000000000010001780001670000177000000008636f6e73756d657200000001000572"
                               "616e67650000000800007ffffffffffe",
    # Metadata v11 asking for an unknown topic id (null name): the response could not be encoded
    "metadata_unknown_topic_id": "000000220003000b0000000100017800020102030405060708090a0b0c0d0e0f100000000000",
    # IncrementalAlterConfigs SET min.cleanable.dirty.ratio = null: TypeError in the config check
    "alter_configs_null_value": "00000034002c00010000000100017800020205667a2d30021a6d696e2e636c65616e61626c652e6469"
                                "7274792e726174696f000000000000",
    # Metadata v12 with an unknown tagged field: must be skipped (KIP-482), not refused
    "unknown_tagged_field": "000000120003000c0000000100017800000000010500",
}


@pytest.mark.parametrize("finding", sorted(FUZZ_FINDINGS))
def test_fuzz_findings_are_answered_without_stalls_or_tracebacks(broker, finding):
    client = RawClient(broker.host, broker.port)
    create_topic(client, "fz-0", 1)
    client.close()
    before = broker.log_text().count("Traceback")
    with LatencyProbe(broker) as probe, socket.create_connection((broker.host, broker.port), timeout=15) as sock:
        sock.sendall(bytes.fromhex(FUZZ_FINDINGS[finding]))
        head = sock.recv(4)
    assert len(head) == 4  # answered, not closed
    assert probe.worst < 1.0
    assert broker.log_text().count("Traceback") == before
    assert broker.alive() and serves(broker)
