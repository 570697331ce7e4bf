"""The latency probe: round trips on a connection of its own all along the run, and the broker's RSS."""

from __future__ import annotations

import socket
import struct
import threading
import time
from typing import TYPE_CHECKING

from rawclient import request_module

from .config import CANARY_TOPIC
from .wire import encode_frame, read_frame, rss_kb

if TYPE_CHECKING:
    from .fuzzer import Fuzzer


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
