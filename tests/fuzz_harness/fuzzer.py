"""The fuzzer: one case at a time on a connection of its own, then the checks that every case must pass."""

from __future__ import annotations

import collections
import select
import socket
import struct
import time

import fuzzing
from rawclient import request_module

from .canary import Canary
from .config import ANSWER_BOUND_S, BROKER_SETTINGS, COLLECT, WAITING_BOUND_S
from .findings import Findings
from .lifecycle import BrokerLifecycle
from .probe import Probe
from .report import Report
from .wire import api_name, encode_frame, frame_hex, read_frame


class Fuzzer(BrokerLifecycle, Findings, Report):
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
