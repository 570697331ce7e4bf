"""The fuzzer's broker: started with known records and topics, restarted after a fatal case (collect mode)."""

from __future__ import annotations

import subprocess
import time

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kio.index import load_request_schema

import fuzzing
from rawclient import RawClient, request_module

from .canary import Canary
from .config import BROKER_SETTINGS, CANARY_TOPIC, KNOWN_RECORDS, PROTECTED
from .probe import Probe


class BrokerLifecycle:
    """Part of :class:`~fuzz_harness.fuzzer.Fuzzer`: the broker process, its topics and known records."""

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

    def kill9_keeping_canary(self) -> None:
        """The canary's acknowledged records kept for the read-back, then the broker's memory sampled and kill -9."""
        if self.canary is not None:
            self.canary_written.update(self.canary.written)
            self.canary.close()
            self.canary = None
        self.probe.sample_rss()
        self.broker.kill9()

    def restart(self, reason: str) -> None:
        """Collect mode: kill -9 whatever is left and start again (the same log dir; a fresh one if need be)."""
        self.probe.flush_inflight()
        self.probe.paused.set()
        self.kill9_keeping_canary()
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


def _kio_knows(api_key: int, version: int) -> bool:
    try:
        load_request_schema(api_key, version)
        return True
    except Exception:  # noqa: BLE001
        return False
