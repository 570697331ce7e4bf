"""Fuzzing a real broker process: it must survive every request, keep serving, and keep what it acknowledged.

One standalone broker (free port, data under tmp_path) gets, in order:

1. 2,000 records produced with confluent-kafka (``acks=all``; topics ``keep-plain``, ``keep-gzip``,
   ``keep-zstd``); what was acknowledged is remembered.
2. Seed cases (``fuzzing.seed_cases``): hand-written hostile frames that broke the broker before (a compact
   array count of 2^32-2, a consumer subscription that loops, compression bombs, ...).
3. Generated cases (hypothesis): for every (api key, version) the broker advertises in ApiVersions, a valid
   request built from kio's request dataclass, encoded with kio, then usually mutated (lengths, counts,
   varints, tagged fields, truncation, trailing garbage, the frame size, byte flips, and the record batches of
   Produce field by field). About a third stay valid (or only gain an unknown tagged field, which KIP-482 says
   to skip): those must get a response, not a closed connection.

After every case: the broker process is alive; the fuzzing connection got a well-formed response frame (size
prefix consistent, its correlation id, decodable by kio, nothing partial after it) or was closed, within 10 s
(15 s for the APIs that may wait: Fetch, JoinGroup, SyncGroup); a second connection, open across cases,
produces a record and fetches it back at the offset it was given. When a Produce whose only mutations are in
its record batches is answered, each partition's error must fit the batch (``fuzzing.batch_problems``: error 0
only for batches Kafka's validator would keep). All along a latency probe (another connection) does
ApiVersions/Metadata round trips every 20 ms and keeps the longest, and the broker's RSS is sampled. At the
end the broker gets ``kill -9`` and is started again on the same log dir: every record acknowledged before (and
every record of the second connection) must read back with the same offset, key and value. Tracebacks in the
broker log (a handler's TypeError, say: the connection is closed, which is allowed) are counted and listed in
the summary, not failed on.

Settings (environment variables):

- ``LOGBUS_FUZZ_EXAMPLES``: generated cases (default 3000, drawn over every advertised API key and version:
  about 12 ms each, so about a minute for the whole file on a 2-core machine; bench/fuzz_run.py runs 20,000).
  Setting it also lifts the default time budget: e.g. ``LOGBUS_FUZZ_EXAMPLES=50000`` for a longer local run.
- ``LOGBUS_FUZZ_SECONDS``: time budget of the generated cases (default 45 s without LOGBUS_FUZZ_EXAMPLES,
  none with it): on a slower machine the cases left when it runs out are skipped and counted, so the run stays
  bounded; the cases are the same on every run, only where the run stops may differ.
- ``LOGBUS_FUZZ_SEED``: a hypothesis seed (default: derandomized, the same cases on every run).
- ``LOGBUS_FUZZ_SEEDS=0``: skip the seed cases (to explore past a known failure).
- ``LOGBUS_FUZZ_REPORT``: write the summary JSON there (it is printed too: run pytest with ``-s``).
- ``LOGBUS_FUZZ_COLLECT=1``: diagnostic mode. A case that kills or hangs the broker is recorded and the broker
  restarted (on the same log dir; on a fresh one if it cannot start), so one run collects every distinct
  failure; the summary lists each kind once with its shortest frame. The test still fails if any were found.
  Without it the run stops at the first dead or hung broker and the failure shows the frame that did it.

A longer run, e.g.: ``bench/fuzz_run.py --examples 20000`` (see there), or
``LOGBUS_FUZZ_EXAMPLES=20000 LOGBUS_FUZZ_REPORT=bench/results/fuzz.json .venv/bin/python -m pytest
tests/integration/test_fuzz.py -s``.
"""

from __future__ import annotations

import collections
import datetime
import io
import json
import os
import re
import select
import socket
import struct
import subprocess
import threading
import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from hypothesis import HealthCheck, Phase, given, seed, settings
from hypothesis import strategies as st
from kio.index import load_request_schema
from kio.schema.index import api_key_map
from kio.serial import entity_writer

import fuzzing
from rawclient import RawClient, request_module

_EXAMPLES_SET = "LOGBUS_FUZZ_EXAMPLES" in os.environ
EXAMPLES = int(os.environ.get("LOGBUS_FUZZ_EXAMPLES", "3000"))
SECONDS = float(os.environ.get("LOGBUS_FUZZ_SECONDS", "0" if _EXAMPLES_SET else "45")) or None
SEED = os.environ.get("LOGBUS_FUZZ_SEED")
COLLECT = os.environ.get("LOGBUS_FUZZ_COLLECT") == "1"
SEEDS = os.environ.get("LOGBUS_FUZZ_SEEDS", "1") != "0"
REPORT = os.environ.get("LOGBUS_FUZZ_REPORT")
ANSWER_BOUND_S = 10.0  # a fuzzed request is answered or its connection closed within this
WAITING_BOUND_S = 15.0  # ... for Fetch, JoinGroup and SyncGroup, which may wait by design
STALL_BOUND_MS = 2000.0  # the longest round trip the latency probe may see
KNOWN_RECORDS = 2000
PROTECTED = {"keep-plain": ("none", 2), "keep-gzip": ("gzip", 2), "keep-zstd": ("zstd", 1)}
CANARY_TOPIC = "canary"
BROKER_SETTINGS = {"num_partitions": 1, "group_initial_rebalance_delay_ms": 0, "log_cleaner_backoff_ms": 1000}

_budget = (SECONDS if SECONDS else EXAMPLES * 0.3) + (1800 if COLLECT else 0)
pytestmark = [pytest.mark.integration, pytest.mark.timeout(int(_budget + 420))]


def api_name(key: int) -> str:
    return f"{api_key_map.get(key, '?')}({key})"


def frame_hex(frame: bytes, limit: int = 4096) -> str:
    if len(frame) <= limit:
        return frame.hex()
    return f"{frame[:limit].hex()}... ({len(frame)} bytes in all)"


def encode_frame(api_key: int, version: int, correlation_id: int, body) -> bytes:
    cls = load_request_schema(api_key, version)
    payload = struct.pack(">hhih", api_key, version, correlation_id, 5) + b"probe"
    if cls.__flexible__:
        payload += b"\x00"
    buf = io.BytesIO()
    entity_writer(cls)(buf, body)
    payload += buf.getvalue()
    return struct.pack(">i", len(payload)) + payload


def read_frame(sock: socket.socket) -> bytes:
    def exact(n: int) -> bytes:
        out = bytearray()
        while len(out) < n:
            chunk = sock.recv(n - len(out))
            if not chunk:
                raise ConnectionError("closed by the broker")
            out += chunk
        return bytes(out)

    return exact(struct.unpack(">i", exact(4))[0])


def rss_kb(pid: int) -> tuple[int, int]:
    """(VmRSS, VmHWM) of ``pid`` in kB; zeros when it is gone."""
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0, 0
    values = dict(re.findall(r"^(VmRSS|VmHWM):\s+(\d+) kB", text, re.M))
    return int(values.get("VmRSS", 0)), int(values.get("VmHWM", 0))


class Probe(threading.Thread):
    """ApiVersions / Metadata round trips every 20 ms on a connection of its own; the longest one is the stall.

    Also samples the broker's RSS. ``paused`` while the broker is being restarted.
    """

    def __init__(self, fuzzer: "Fuzzer"):
        super().__init__(daemon=True, name="fuzz-latency-probe")
        self.fuzzer = fuzzer
        self.stop_flag = threading.Event()
        self.paused = threading.Event()
        self.sock: socket.socket | None = None
        self.requests = self.errors = 0
        self.longest_ms = 0.0
        self.longest_at = ""
        self.peak_rss_kb = 0
        self.inflight: float | None = None  # start of the round trip under way
        api_versions = request_module(18, 3).ApiVersionsRequest(client_software_name="logbus-probe",
                                                                client_software_version="1.0")
        m = request_module(3, 4)
        metadata = m.MetadataRequest(topics=(m.MetadataRequestTopic(name=CANARY_TOPIC),),
                                     allow_auto_topic_creation=False)
        self.frames = [encode_frame(18, 3, 1, api_versions), encode_frame(3, 4, 2, metadata)]

    def sample_rss(self) -> None:
        proc = self.fuzzer.broker.proc
        if proc is not None:
            rss, hwm = rss_kb(proc.pid)
            self.peak_rss_kb = max(self.peak_rss_kb, rss, hwm)

    def run(self) -> None:
        i = 0
        while not self.stop_flag.is_set():
            i += 1
            if i % 10 == 0:
                self.sample_rss()
            if self.paused.is_set():
                self._drop()
                time.sleep(0.05)
                continue
            frame = self.frames[i % 2]
            try:
                if self.sock is None:
                    self.sock = socket.create_connection((self.fuzzer.broker.host, self.fuzzer.broker.port), 5)
                    self.sock.settimeout(120)
                self.inflight = start = time.monotonic()
                self.sock.sendall(frame)
                response = read_frame(self.sock)
                assert struct.unpack_from(">i", response)[0] == i % 2 + 1
                self.inflight = None
                self._record(start)
            except (OSError, AssertionError, struct.error):
                if not self.paused.is_set() and not self.stop_flag.is_set():
                    self.errors += 1
                    self.flush_inflight()  # a round trip that ended in a reset still waited this long
                self.inflight = None
                self._drop()
                time.sleep(0.1)
                continue
            time.sleep(0.02)

    def flush_inflight(self) -> None:
        """Count the round trip under way as it stands (before the broker is killed under it)."""
        start = self.inflight
        if start is not None:
            self.inflight = None
            self._record(start)

    def _record(self, start: float) -> None:
        self.requests += 1
        elapsed = (time.monotonic() - start) * 1000
        if elapsed > self.longest_ms:
            self.longest_ms = elapsed
            self.longest_at = self.fuzzer.current

    def _drop(self) -> None:
        if self.sock is not None:
            try:
                self.sock.close()
            except OSError:
                pass
            self.sock = None

    def stop(self) -> None:
        self.stop_flag.set()
        sock = self.sock
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        self.join(10)


class Canary:
    """The second client: one connection kept across cases; produce a record, fetch it back at its offset."""

    def __init__(self, broker):
        self.client = RawClient(broker.host, broker.port, timeout=ANSWER_BOUND_S)
        self.produce = request_module(0, 7)
        self.fetch = request_module(1, 11)
        self.written: dict[int, bytes] = {}
        self.next_offset: int | None = None
        self.checks = 0
        self.longest_ms = 0.0

    def close(self) -> None:
        self.client.close()

    def check(self) -> None:
        """Raises AssertionError or OSError when the broker does not serve the second client properly."""
        start = time.monotonic()
        value = f"canary-{uuid.uuid4().hex}".encode()
        m = self.produce
        request = m.ProduceRequest(transactional_id=None, acks=1, timeout=datetime.timedelta(seconds=5),
                                   topic_data=(m.TopicProduceData(name=CANARY_TOPIC, partition_data=(
                                       m.PartitionProduceData(index=0, records=fuzzing.build_batch(
                                           [(None, value, ())])),)),))
        part = self.client.request(0, 7, request).responses[0].partition_responses[0]
        assert part.error_code.value == 0, f"canary produce: error {part.error_code!r}"
        if self.next_offset is not None:
            assert part.base_offset == self.next_offset, (
                f"canary produce: offset {part.base_offset}, expected {self.next_offset}")
        self.written[part.base_offset] = value
        self.next_offset = part.base_offset + 1
        f = self.fetch
        fetch = f.FetchRequest(replica_id=-1, max_wait=datetime.timedelta(0), min_bytes=0, max_bytes=1 << 20,
                               isolation_level=0, session_id=0, session_epoch=-1, rack_id="", forgotten_topics_data=(),
                               topics=(f.FetchTopic(topic=CANARY_TOPIC, partitions=(f.FetchPartition(
                                   partition=0, current_leader_epoch=-1, fetch_offset=part.base_offset,
                                   log_start_offset=-1, partition_max_bytes=1 << 20),)),))
        got = self.client.request(1, 11, fetch).responses[0].partitions[0]
        assert got.error_code.value == 0, f"canary fetch: error {got.error_code!r}"
        records = got.records or b""
        assert len(records) >= 61 and struct.unpack_from(">q", records)[0] == part.base_offset, (
            f"canary fetch at {part.base_offset}: batch {records[:12].hex()}")
        assert value in records, "canary fetch: the record just produced is not there"
        self.checks += 1
        self.longest_ms = max(self.longest_ms, (time.monotonic() - start) * 1000)


class Fuzzer:
    def __init__(self, make_broker):
        self.make_broker = make_broker
        self.broker = make_broker(**BROKER_SETTINGS)
        self.acked: dict[tuple[str, int], dict[int, tuple[bytes, bytes]]] = {}
        self.canary: Canary | None = None
        self.canary_written: dict[int, bytes] = {}
        self.probe: Probe | None = None
        self.advertised: dict[int, tuple[int, int]] = {}
        self.current = "setup"
        self.recent: collections.deque = collections.deque(maxlen=3)
        self.stopped = False
        self.deadline: float | None = None
        self.counts = collections.Counter()
        self.per_api: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
        self.findings: dict[str, dict] = {}  # fatal problems by signature
        self.internal_errors: dict[str, dict] = {}  # tracebacks in the broker log by signature
        self.log_pos = self.incarnation_pos = 0
        self.restarts: list[dict] = []
        self.canary_longest_ms = 0.0
        self.api_versions_v0 = encode_frame(18, 0, 99, request_module(18, 0).ApiVersionsRequest())
        self.slowest: list[tuple[float, str]] = []  # (ms, case): the cases that took longest to answer
        self.slow: list[dict] = []  # waiting APIs not answered within the bound (a long poll asked for?)
        self.produce_verdicts: collections.Counter = collections.Counter()  # (batch valid?, error) of Produce
        self.started = time.monotonic()

    # ---- broker lifecycle ------------------------------------------------------------------------------------
    def start_broker(self) -> None:
        """Start the broker process; log positions move to where its output begins."""
        try:
            self.log_pos = self.incarnation_pos = self.broker.output.stat().st_size
        except OSError:
            self.log_pos = self.incarnation_pos = 0
        self.broker.start()

    def broker_dead(self, wait: float = 0.0) -> bool:
        proc = self.broker.proc
        if proc is None:
            return True
        if wait:
            try:
                proc.wait(wait)
            except subprocess.TimeoutExpired:
                pass
        return proc.poll() is not None

    def start(self) -> None:
        self.start_broker()
        self.setup_topics()
        self.produce_known_records()
        self.advertised = self.read_api_versions()
        self.canary = Canary(self.broker)
        self.canary.check()
        self.probe = Probe(self)
        self.probe.start()

    def setup_topics(self) -> None:
        admin = AdminClient({"bootstrap.servers": self.broker.bootstrap})
        topics = [NewTopic(name, parts, 1) for name, (_codec, parts) in PROTECTED.items()]
        topics.append(NewTopic(CANARY_TOPIC, 1, 1))
        for name, parts in fuzzing.POOL_TOPICS.items():
            config = {}
            if name == fuzzing.COMPACTED_TOPIC:
                config = {"cleanup.policy": "compact", "segment.bytes": "65536", "min.cleanable.dirty.ratio": "0.01"}
            topics.append(NewTopic(name, parts, 1, config=config))
        for name, future in admin.create_topics(topics).items():
            future.result(20)

    def produce_known_records(self) -> None:
        acked = self.acked
        acked.clear()
        errors = []

        def delivered(err, msg):
            if err is not None:
                errors.append(err)
            else:
                acked.setdefault((msg.topic(), msg.partition()), {})[msg.offset()] = (msg.key(), msg.value())

        names = list(PROTECTED)
        for t, name in enumerate(names):
            codec = PROTECTED[name][0]
            producer = Producer({"bootstrap.servers": self.broker.bootstrap, "acks": "all", "linger.ms": 5,
                                 "compression.type": codec, "enable.idempotence": False})
            for i in range(t, KNOWN_RECORDS, len(names)):
                value = f"value-{i}-".encode() + bytes([i % 251]) * (i % 97)
                producer.produce(name, value=value, key=f"key-{i}".encode(), on_delivery=delivered)
            assert producer.flush(30) == 0
        assert not errors, errors[:3]
        assert sum(len(v) for v in acked.values()) == KNOWN_RECORDS

    def read_api_versions(self) -> dict[int, tuple[int, int]]:
        client = RawClient(self.broker.host, self.broker.port)
        try:
            body = request_module(18, 3).ApiVersionsRequest(client_software_name="logbus-fuzz",
                                                            client_software_version="1.0")
            response = client.request(18, 3, body)
        finally:
            client.close()
        assert response.error_code.value == 0
        out = {}
        for entry in response.api_keys:
            versions = [v for v in range(entry.min_version, entry.max_version + 1) if _kio_knows(entry.api_key, v)]
            if versions:
                out[int(entry.api_key)] = (min(versions), max(versions))
        return out

    def restart(self, reason: str) -> None:
        """Collect mode: kill -9 whatever is left and start again (the same log dir; a fresh one if need be)."""
        self.probe.flush_inflight()
        self.probe.paused.set()
        if self.canary is not None:
            self.canary_written.update(self.canary.written)
            self.canary.close()
            self.canary = None
        self.probe.sample_rss()
        self.broker.kill9()
        began = time.monotonic()
        entry = {"after": reason, "case": self.current}
        try:
            self.start_broker()
            self.canary = Canary(self.broker)
            self.canary.check()
            entry["fresh_dir"] = False
        except Exception as exc:  # noqa: BLE001 - any failure to come back is itself a finding
            self.record_fatal("does not restart", f"restart after {reason}: {type(exc).__name__}: {exc}",
                              self.recent[-1] if self.recent else b"", self.current)
            self.broker.kill9()
            self.broker = self.make_broker(**BROKER_SETTINGS)
            self.canary_written = {}
            self.start_broker()
            self.setup_topics()
            self.produce_known_records()
            self.canary = Canary(self.broker)
            self.canary.check()
            entry["fresh_dir"] = True
        entry["seconds"] = round(time.monotonic() - began, 1)
        self.restarts.append(entry)
        self.log_pos = self.broker.output.stat().st_size  # what the restart logged is no case's doing
        self.probe.paused.clear()

    # ---- one case --------------------------------------------------------------------------------------------
    def run_case(self, case: fuzzing.Case, origin: str) -> None:
        frame = case.frame()
        self.current = f"{origin} #{self.counts['cases'] + 1}: {case.describe()}"
        self.recent.append(frame)
        self.counts["cases"] += 1
        self.counts[origin] += 1
        self.counts["valid" if case.valid else "mutated"] += 1
        stats = self.per_api[api_name(case.api_key)]
        stats["cases"] += 1
        stats["valid" if case.valid else "mutated"] += 1
        began = time.monotonic()
        outcome, detail, response = self.exchange(case, frame)
        elapsed = (time.monotonic() - began) * 1000
        if len(self.slowest) < 8 or elapsed > self.slowest[-1][0]:
            self.slowest = sorted(self.slowest + [(round(elapsed, 1), self.current)], reverse=True)[:8]
        stats[outcome] += 1
        self.counts[outcome] += 1
        logged = self.scan_log(frame)
        if self.broker_dead():
            return self.died(frame)
        if outcome == "slow" and len(self.slow) < 20:
            self.slow.append({"case": self.current, "frame_hex": frame_hex(frame, 1024)})
        if outcome == "hang":
            self.counts["hangs"] += 1
            self.record_fatal("no answer", detail, frame, self.current)
            return self.after_fatal("hang")
        if outcome == "answered" and case.api_key == 0:
            self.check_produce(case, response, frame)
        if outcome in ("malformed", "unanswered"):
            if logged:  # what the broker logged for it tells one cause from another
                detail += f" (broker log: {logged[0]})"
            self.record_fatal(outcome, detail, frame, self.current)
            if outcome == "unanswered" and not self.accepts_connections():
                self.record_fatal("broker unresponsive", "a new connection gets no answer to ApiVersions within "
                                  f"5 s (broker log: {logged[0] if logged else '-'})", frame, self.current)
                return self.after_fatal("broker unresponsive")
        try:
            self.canary.check()
            self.counts["second client checks"] += 1
            self.canary_longest_ms = max(self.canary_longest_ms, self.canary.longest_ms)
        except (AssertionError, OSError, struct.error, ConnectionError) as exc:
            self.counts["second client failures"] += 1
            if self.broker_dead(wait=5):  # an abort may take a moment (a backtrace is printed)
                self.scan_log(frame)
                return self.died(frame)
            kind = "broker unresponsive" if isinstance(exc, TimeoutError) else "second client failed"
            self.record_fatal(kind, f"second client: {type(exc).__name__}: {exc}", frame, self.current)
            return self.after_fatal(kind)

    def died(self, frame: bytes) -> None:
        self.counts["crashes"] += 1
        rc = self.broker.proc.returncode if self.broker.proc is not None else None
        self.record_fatal("broker died", f"exit code {rc}: {self.death_line()}", frame, self.current)
        self.after_fatal("broker died")

    def check_produce(self, case: fuzzing.Case, response, frame: bytes) -> None:
        """A Produce answered: each partition's error must fit the batch sent (invalid ones refused, valid kept)."""
        sent = fuzzing.produced_records(case)
        if not sent or response is None:
            return
        for topic in response.responses:
            for part in topic.partition_responses:
                data = sent.get((topic.name, part.index), b"?")
                if data == b"?":
                    continue
                error = part.error_code.value
                null_keys: list = []
                problems = fuzzing.batch_problems(data, null_keys)
                self.counts["produce verdicts checked"] += 1
                self.produce_verdicts[f"{'invalid' if problems else 'valid'} batch -> error {error}"] += 1
                if error == 0 and problems:
                    self.counts["invalid batches accepted"] += 1
                    self.record_fatal("accepted an invalid batch", f"error 0 for a batch with: {problems[0]}",
                                      frame, self.current)
                elif error in (2, 87) and not problems and not (error == 87 and null_keys):
                    # (a compacted topic refuses null keys: fz-compact, or any topic a case made compacted)
                    message = getattr(part, "error_message", None)
                    self.record_fatal("refused a valid batch", f"error {part.error_code!r} ({message})", frame,
                                      self.current)

    def accepts_connections(self) -> bool:
        """Whether a new connection gets an answer to ApiVersions v0 within 5 s."""
        try:
            with socket.create_connection((self.broker.host, self.broker.port), timeout=5) as sock:
                sock.settimeout(5)
                sock.sendall(self.api_versions_v0)
                return struct.unpack_from(">i", read_frame(sock))[0] == 99
        except (OSError, struct.error):
            return False

    def after_fatal(self, reason: str) -> None:
        if COLLECT:
            self.restart(reason)
        else:
            self.stopped = True

    def exchange(self, case: fuzzing.Case, frame: bytes) -> tuple[str, str, object]:
        """Send one case on a new connection, half-close, read until EOF. (outcome, detail, decoded response)."""
        header = fuzzing.effective_header(frame)
        waits = header is not None and header[0] in fuzzing.WAITING_APIS
        bound = WAITING_BOUND_S if waits else ANSWER_BOUND_S
        try:
            sock = socket.create_connection((self.broker.host, self.broker.port), timeout=5)
        except OSError as exc:
            return "refused", f"connect: {exc}", None
        data = bytearray()
        eof = False
        try:
            try:
                sock.sendall(frame)
                sock.shutdown(socket.SHUT_WR)
            except OSError:
                pass  # the broker may close before reading everything (an oversized frame)
            deadline = time.monotonic() + bound
            sock.setblocking(False)
            while True:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                ready, _, _ = select.select([sock], [], [], min(remaining, 0.5))
                if not ready:
                    continue
                try:
                    chunk = sock.recv(1 << 20)
                except BlockingIOError:
                    continue
                except OSError:
                    eof = True
                    break
                if not chunk:
                    eof = True
                    break
                data += chunk
        finally:
            sock.close()
        frames, leftover = fuzzing.split_frames(bytes(data))
        if frames:
            first = frames[0]
            if header is None or len(first) < 4 or struct.unpack_from(">i", first)[0] != header[2]:
                got = struct.unpack_from(">i", first)[0] if len(first) >= 4 else None
                return "malformed", f"response correlation id {got}, request's {header and header[2]}", None
            try:
                body = fuzzing.decode_response(header[0], header[1], first, self.advertised)
            except Exception as exc:  # noqa: BLE001 - kio raises many kinds
                return ("malformed", f"response does not decode: {type(exc).__name__}: {exc}; {first[:64].hex()}",
                        None)
            if eof and leftover:
                return "malformed", f"{len(leftover)} bytes of a partial frame after the response", None
            return "answered", "", body
        if eof and leftover:
            return "malformed", f"partial response frame: {bytes(leftover[:64]).hex()}", None
        if not eof:
            if waits:
                return "slow", "", None  # a long poll or rebalance the request asked for
            return "hang", f"neither answered nor closed within {bound:.0f} s", None
        if case.expects_answer():
            return "unanswered", ("a valid request" + (" with an unknown tagged field" if case.conforming else "")
                                  + " got its connection closed without a response"), None
        return "closed", "", None

    # ---- the broker log --------------------------------------------------------------------------------------
    def scan_log(self, frame: bytes) -> list[str]:
        """Tracebacks the broker logged since the last case: internal errors (counted, not fatal).

        Returns their signatures."""
        found: list[str] = []
        try:
            with open(self.broker.output, "rb") as f:
                f.seek(self.log_pos)
                new = f.read()
        except OSError:
            return found
        self.log_pos += len(new)
        text = new.decode(errors="replace")
        for block in re.findall(r"Traceback \(most recent call last\):\n(?:[ \t].*\n)+\S.*", text):
            lines = block.splitlines()
            where = [ln.strip() for ln in lines if ln.strip().startswith("File ") and "/platform/" in ln]
            last = lines[-1].strip()
            signature = _normalize(f"{last[:160]} at {where[-1].split('/platform/')[-1] if where else '?'}")
            self.counts["internal errors"] += 1
            if signature not in found:
                found.append(signature)
            entry = self.internal_errors.get(signature)
            if entry is None or len(frame) < entry["frame_len"]:
                self.internal_errors[signature] = {
                    "signature": signature, "count": (entry or {}).get("count", 0), "case": self.current,
                    "frame_hex": frame_hex(frame, 2048), "frame_len": len(frame),
                    "traceback": "\n".join(lines[-8:])}
            self.internal_errors[signature]["count"] += 1
        return found

    def death_line(self) -> str:
        """The line of this process's output that says why it died (and the native frame, for an abort)."""
        try:
            with open(self.broker.output, "rb") as f:
                f.seek(self.incarnation_pos)
                lines = [ln for ln in f.read().decode(errors="replace").splitlines() if ln.strip()]
        except OSError:
            lines = []
        for i, line in enumerate(lines):
            if re.search(r"memory allocation of|panicked at|Fatal Python error|Segmentation fault", line):
                frames = [ln.split(":", 1)[1].strip() for ln in lines[i + 1:i + 40]
                          if re.match(r"\s*\d+: ", ln) and not re.search(r"\d+: (std|core|alloc|__rust|rust_)", ln)]
                message = line.strip() if "panicked" not in line else " ".join(
                    ln.strip() for ln in lines[i:i + 2])
                return (message + (f" in {frames[0]}" if frames else ""))[:300]
        interesting = [ln for ln in lines[-40:] if re.search(
            r"Error|error|Killed|abort|Too many open files|Exception", ln)]
        return (interesting or lines or ["(empty log)"])[-1].strip()[:300]

    def log_tail(self, lines: int = 40) -> str:
        return "\n".join(self.broker.log_text().splitlines()[-lines:])

    def record_fatal(self, kind: str, detail: str, frame: bytes, case: str) -> None:
        signature = _normalize(f"{kind}: {detail}")[:300]
        entry = self.findings.get(signature)
        if entry is None or len(frame) < entry["frame_len"]:
            self.findings[signature] = {
                "kind": kind, "signature": signature, "detail": detail, "case": case,
                "count": (entry or {}).get("count", 0), "frame_hex": frame_hex(frame), "frame_len": len(frame),
                "previous_frame_hex": frame_hex(self.recent[-2], 256) if len(self.recent) > 1 else None,
                "log_tail": self.log_tail()}
        self.findings[signature]["count"] += 1

    # ---- the end ---------------------------------------------------------------------------------------------
    def verify_after_kill9(self) -> dict:
        """kill -9, start on the same log dir, read back every acknowledged record."""
        self.probe.flush_inflight()
        self.probe.stop()
        if self.canary is not None:
            self.canary_written.update(self.canary.written)
            self.canary.close()
            self.canary = None
        self.probe.sample_rss()
        self.broker.kill9()
        began = time.monotonic()
        result = {"started": False, "records_checked": 0, "canary_checked": 0}
        try:
            self.start_broker()
        except Exception as exc:  # noqa: BLE001
            result["error"] = f"the broker does not start on its log dir after kill -9: {exc}"
            return result
        result["started"] = True
        result["start_seconds"] = round(time.monotonic() - began, 1)
        expected = dict(self.acked)
        expected[(CANARY_TOPIC, 0)] = {off: (None, value) for off, value in self.canary_written.items()}
        consumer = Consumer({"bootstrap.servers": self.broker.bootstrap, "group.id": f"verify-{uuid.uuid4().hex}",
                             "enable.auto.commit": False, "auto.offset.reset": "earliest"})
        problems = []
        try:
            for (topic, partition), records in sorted(expected.items()):
                if not records:
                    continue
                last = max(records)
                consumer.assign([TopicPartition(topic, partition, min(records))])
                seen = {}
                deadline = time.monotonic() + 30
                while time.monotonic() < deadline and (not seen or max(seen) < last):
                    for m in consumer.consume(1000, timeout=1):
                        if m.error():
                            problems.append(f"{topic}/{partition}: {m.error()}")
                            break
                        seen[m.offset()] = (m.key(), m.value())
                for offset, (key, value) in sorted(records.items()):
                    got = seen.get(offset)
                    if got is None or (key is not None and got[0] != key) or got[1] != value:
                        problems.append(f"{topic}/{partition} offset {offset}: expected {(key, value)!r}, "
                                        f"read {got!r}")
                    else:
                        result["canary_checked" if topic == CANARY_TOPIC else "records_checked"] += 1
        finally:
            consumer.close()
        result["problems"] = problems[:20]
        result["problem_count"] = len(problems)
        return result

    def summary(self, verify: dict) -> dict:
        probe = self.probe
        return {
            "settings": {"max_examples": EXAMPLES, "seconds_budget": SECONDS, "seed": SEED or "derandomized",
                         "collect": COLLECT, "answer_bound_s": ANSWER_BOUND_S, "stall_bound_ms": STALL_BOUND_MS},
            "duration_s": round(time.monotonic() - self.started, 1),
            "cases": self.counts["cases"],
            "seed_cases": self.counts["seed"],
            "generated_cases": self.counts["generated"],
            "skipped": self.counts["skipped"],  # the time budget ran out, or (not COLLECT) a fatal finding
            "valid_cases": self.counts["valid"],
            "mutated_cases": self.counts["mutated"],
            "outcomes": {k: self.counts[k] for k in ("answered", "closed", "slow", "hang", "malformed",
                                                     "unanswered", "refused")},
            "crashes": self.counts["crashes"],
            "hangs": self.counts["hangs"],
            "second_client_failures": self.counts["second client failures"],
            "produce_verdicts_checked": self.counts["produce verdicts checked"],
            "invalid_batches_accepted": self.counts["invalid batches accepted"],
            "produce_verdicts": dict(self.produce_verdicts),
            "fatal_findings": len(self.findings),
            "internal_errors": self.counts["internal errors"],
            "longest_stall_ms": round(probe.longest_ms, 1) if probe else None,
            "longest_stall_during": probe.longest_at if probe else None,
            "probe_round_trips": probe.requests if probe else 0,
            "probe_errors": probe.errors if probe else 0,
            "second_client_checks": self.counts["second client checks"],
            "second_client_longest_ms": round(self.canary_longest_ms, 1),
            "peak_rss_mb": round(probe.peak_rss_kb / 1024, 1) if probe else None,
            "advertised": {api_name(k): list(v) for k, v in sorted(self.advertised.items())},
            "per_api": {k: dict(v) for k, v in sorted(self.per_api.items())},
            "restarts": self.restarts,
            "slow_cases": self.slow,
            "slowest_cases_ms": self.slowest,
            "after_kill9": verify,
            "findings": [{k: v for k, v in f.items() if k != "frame_len"} for f in self.findings.values()],
            "internal_error_kinds": [{k: v for k, v in e.items() if k != "frame_len"}
                                     for e in sorted(self.internal_errors.values(), key=lambda e: -e["count"])],
        }


def _normalize(text: str) -> str:
    """A signature: numbers, hex and addresses replaced so that one kind of failure groups together."""
    text = re.sub(r"0x[0-9a-fA-F]+", "0x?", text)
    text = re.sub(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b", "<uuid>", text)
    text = re.sub(r"'[^']{0,80}'", "'…'", text)
    return re.sub(r"\d+", "N", text)


def _kio_knows(api_key: int, version: int) -> bool:
    try:
        load_request_schema(api_key, version)
        return True
    except Exception:  # noqa: BLE001
        return False


def _failure_message(fuzzer: Fuzzer) -> str:
    parts = []
    for f in fuzzer.findings.values():
        parts.append(f"[{f['kind']}] {f['detail']}\n  case: {f['case']}\n  seen {f['count']} time(s)\n"
                     f"  frame (hex): {f['frame_hex']}\n"
                     + (f"  the frame before it: {f['previous_frame_hex']}\n" if f["previous_frame_hex"] else "")
                     + "  broker log tail:\n    " + f["log_tail"].replace("\n", "\n    "))
    return "\n\n".join(parts)


class _Enough(Exception):
    """The time budget is spent, or (not COLLECT) a fatal finding stopped the run."""


def test_fuzz_broker(fresh_broker):
    fuzzer = Fuzzer(fresh_broker)
    fuzzer.start()
    try:
        for case in fuzzing.seed_cases() if SEEDS else ():
            if fuzzer.stopped:
                break
            fuzzer.run_case(case, "seed")

        fuzzer.deadline = time.monotonic() + SECONDS if SECONDS else None
        strategy = fuzzing.cases(fuzzer.advertised)

        @settings(max_examples=EXAMPLES, deadline=None, derandomize=SEED is None, database=None,
                  phases=[Phase.generate], suppress_health_check=list(HealthCheck), print_blob=False)
        @given(st.data())
        def generated(data):
            case = data.draw(strategy)  # always drawn: hypothesis refuses a case that draws less on a re-run
            if fuzzer.stopped or (fuzzer.deadline is not None and time.monotonic() > fuzzer.deadline):
                raise _Enough()  # ends the run at once (the same on hypothesis's re-run of this case)
            fuzzer.run_case(case, "generated")

        if SEED is not None:
            generated = seed(int(SEED))(generated)
        try:
            generated()
        except _Enough:
            pass
        verify = fuzzer.verify_after_kill9()
    except BaseException:
        if fuzzer.probe is not None:
            fuzzer.probe.stop()
        raise
    summary = fuzzer.summary(verify)
    text = json.dumps(summary, indent=2, default=str)
    if REPORT:
        Path(REPORT).parent.mkdir(parents=True, exist_ok=True)
        Path(REPORT).write_text(text + "\n")
    print("\n" + text)

    errors = []
    if fuzzer.findings:
        errors.append(f"{summary['crashes']} crash(es), {len(fuzzer.findings)} distinct finding(s) in "
                      f"{summary['cases']} cases:\n\n" + _failure_message(fuzzer))
    if not verify["started"]:
        errors.append(verify["error"])
    elif verify["problem_count"] or verify["records_checked"] != KNOWN_RECORDS:
        errors.append(f"after kill -9 and a restart, {verify['records_checked']} of {KNOWN_RECORDS} acknowledged "
                      f"records read back; {verify['problem_count']} problem(s): {verify['problems']}")
    if summary["longest_stall_ms"] >= STALL_BOUND_MS:
        errors.append(f"the latency probe waited {summary['longest_stall_ms']} ms for one round trip "
                      f"(bound {STALL_BOUND_MS:.0f} ms), during {summary['longest_stall_during']}")
    if errors:
        pytest.fail("\n\n".join(errors), pytrace=False)
    assert summary["crashes"] == 0
