"""``AuditedProducer``: confluent-kafka's Producer with the paper's audit (§4), same API.

Extra config keys: ``audit.window.ms`` (60000), ``audit.host`` (the machine's name), ``schema.registry.url``
(required: the monitoring events are Avro) and the registry client's other ``schema.registry.*`` settings
(``settings.registry_client``); Kafka's Java security keys are translated (``settings.security``). Every record gets its generation time (as its timestamp and in
``logbus.audit.time``), the host, this producer's id and a per-(producer, topic) sequence number in headers.
For each topic and event-time window the producer counts messages, bytes and the sequence range, and publishes a
monitoring event to ``_audit`` when a later window starts, and for every open window on ``flush()``.
"""

from __future__ import annotations

import socket
import time
import uuid

from confluent_kafka import Producer
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from settings import registry_client
from settings.security import librdkafka_config

from audit.events import (
    AUDIT_TOPIC,
    HOST_HEADER,
    PRODUCER_HEADER,
    SCHEMA_STR,
    SEQUENCE_HEADER,
    TIME_HEADER,
    window_of,
)

AUDIT_KEYS = ("audit.window.ms", "audit.host", "schema.registry.url")


class _Window:
    __slots__ = ("start", "end", "count", "first_seq", "last_seq", "bytes")

    def __init__(self, start: int, end: int, seq: int):
        self.start, self.end, self.count, self.first_seq, self.last_seq, self.bytes = start, end, 0, seq, seq, 0


class AuditedProducer:
    def __init__(self, config: dict):
        config = dict(config)
        self.window_ms = int(config.pop("audit.window.ms", 60000))
        self.host = config.pop("audit.host", socket.gethostname())
        registry, config = registry_client.split(config)
        if not registry.get("schema.registry.url"):
            raise ValueError("AuditedProducer needs schema.registry.url (the monitoring events are Avro)")
        self.producer_id = uuid.uuid4().hex
        self._producer = Producer(librdkafka_config(config))  # Kafka's Java security keys work too
        self._serializer = AvroSerializer(registry_client.client(registry_client.registry_conf(registry)), SCHEMA_STR)
        self._sequences: dict[str, int] = {}
        self._host_header = (HOST_HEADER, self.host.encode())  # the same two headers on every record
        self._producer_header = (PRODUCER_HEADER, self.producer_id.encode())
        self._windows: dict[str, _Window] = {}

    def __len__(self) -> int:
        return len(self._producer)

    def __getattr__(self, name):  # everything else is the wrapped producer's (list_topics, purge, ...)
        return getattr(self._producer, name)

    def produce(self, topic: str, value=None, key=None, partition: int = -1, on_delivery=None, timestamp: int = 0,
                headers=None, **kwargs) -> None:
        now = timestamp or int(time.time() * 1000)
        seq = self._sequences.get(topic, 0)
        audit_headers = [self._host_header, self._producer_header, (SEQUENCE_HEADER, str(seq).encode()),
                         (TIME_HEADER, str(now).encode())]
        if headers:
            audit_headers = (list(headers.items()) if isinstance(headers, dict) else list(headers)) + audit_headers
        if partition is not None and partition >= 0:
            kwargs["partition"] = partition
        if on_delivery is not None:
            kwargs["on_delivery"] = on_delivery
        window = self._windows.get(topic)
        if window is not None and not window.start <= now < window.end:  # a record of another window
            self._publish(topic, window)  # may raise (a registry away): then nothing is sent or counted
            del self._windows[topic]
            window = None
        # raises BufferError like Producer: nothing counted then
        self._producer.produce(topic, value=value, key=key, timestamp=now, headers=audit_headers, **kwargs)
        self._sequences[topic] = seq + 1
        if window is None:
            start, end = window_of(now, self.window_ms)
            window = self._windows[topic] = _Window(start, end, seq)
        window.count += 1
        window.last_seq = seq
        window.bytes += len(value or b"")

    def register_schema(self) -> None:
        """Register the monitoring events' schema now (the serializer keeps its id): afterwards a registry
        outage no longer reaches :meth:`produce`."""
        self._serializer({"kind": "PRODUCED", "tier": "producer", "producer_id": self.producer_id, "host": self.host,
                          "topic": "", "window_start": 0, "window_end": 0, "count": 0, "first_seq": 0,
                          "last_seq": 0, "bytes": 0, "sequences": [], "source": [], "emitted_at": 0},
                         SerializationContext(AUDIT_TOPIC, MessageField.VALUE))

    def poll(self, timeout: float = 0) -> int:
        return self._producer.poll(timeout)

    def flush(self, timeout: float = -1) -> int:
        for topic, window in list(self._windows.items()):
            self._publish(topic, window)
        self._windows.clear()
        return self._producer.flush(timeout) if timeout is not None and timeout >= 0 else self._producer.flush()

    def close(self, timeout: float = 30) -> int:
        return self.flush(timeout)

    def _publish(self, topic: str, window: _Window) -> None:
        event = {"kind": "PRODUCED", "tier": "producer", "producer_id": self.producer_id, "host": self.host,
                 "topic": topic, "window_start": window.start, "window_end": window.end, "count": window.count,
                 "first_seq": window.first_seq, "last_seq": window.last_seq, "bytes": window.bytes,
                 "sequences": [], "source": [], "emitted_at": int(time.time() * 1000)}
        data = self._serializer(event, SerializationContext(AUDIT_TOPIC, MessageField.VALUE))
        while True:
            try:
                self._producer.produce(AUDIT_TOPIC, data, f"{topic}|{window.start}|{self.producer_id}".encode())
                return
            except BufferError:
                self._producer.poll(0.05)
