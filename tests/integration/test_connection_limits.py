"""max.connections, listener.name.<l>.max.connections and max.connections.per.ip on a real broker: a connection
over a limit is closed as soon as it is accepted, the broker and the connections within the limits keep working,
and a real client (confluent-kafka) gets through once a slot is free again."""

from __future__ import annotations

import socket
import struct

import pytest
from confluent_kafka import Producer
from support import BrokerProcess, free_port, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(90)]

API_VERSIONS_V0 = struct.pack(">ihhih", 10, 18, 0, 7, 0)  # size, api key 18, version 0, correlation 7, no client id


def connect(port: int, source: str = "127.0.0.1") -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=5, source_address=(source, 0))
    return sock


def answers(sock: socket.socket) -> bool:
    """True when an ApiVersions request gets its answer, False when the broker closed the connection."""
    try:
        sock.sendall(API_VERSIONS_V0)
        head = sock.recv(8)
    except (ConnectionResetError, BrokenPipeError):
        return False
    return len(head) == 8 and struct.unpack(">ii", head)[1] == 7


@pytest.fixture
def broker(tmp_path):
    b = BrokerProcess(tmp_path / "b", **{"max.connections.per.ip": 3,
                                         "max.connections.per.ip.overrides": "127.0.0.2:1"}).start()
    yield b
    b.stop()


def held_connection(port: int) -> socket.socket:
    """A connection the broker answers on. The start-up probe's (closed) connection may still be counted for a
    moment on a busy machine: a refused one is retried until the broker has seen that close."""
    def attempt():
        sock = connect(port)
        if answers(sock):
            return sock
        sock.close()
        return None

    return wait_until(attempt, 20, interval=0.2, what="a connection within the limit")


def test_per_ip_limit_closes_the_extra_connection_and_clients_get_in_once_one_is_free(broker):
    held = [held_connection(broker.port) for _ in range(3)]
    try:
        extra = connect(broker.port)
        assert not answers(extra)  # closed at once, not left hanging
        extra.close()
        other = connect(broker.port, "127.0.0.2")  # another address has its own count (override: 1)
        assert answers(other)
        second = connect(broker.port, "127.0.0.2")
        assert not answers(second)
        second.close()
        other.close()

        producer = Producer({"bootstrap.servers": broker.bootstrap, "reconnect.backoff.ms": 100,
                             "reconnect.backoff.max.ms": 500, "log_level": 0})
        delivered = []
        producer.produce("limited", b"v", on_delivery=lambda err, msg: delivered.append(err))
        producer.flush(3)
        assert not delivered  # every connection attempt from 127.0.0.1 is closed while the limit is held
    finally:
        for s in held:
            s.close()
    assert producer.flush(30) == 0 and [e is None for e in delivered] == [True]
    assert broker.alive()
    assert "max.connections.per.ip=3 reached for 127.0.0.1" in broker.log_text()


def test_broker_wide_limit_spares_the_inter_broker_listener(tmp_path):
    b = BrokerProcess(tmp_path / "b")
    external = free_port()
    b.settings.update({"listeners": f"INTERNAL://127.0.0.1:{b.port},EXTERNAL://127.0.0.1:{external}",
                       "listener.security.protocol.map": "INTERNAL:PLAINTEXT,EXTERNAL:PLAINTEXT",
                       "inter.broker.listener.name": "INTERNAL", "max.connections": 2,
                       "listener.name.internal.max.connections": 2})
    b.start()
    held = []
    try:
        held = [connect(external) for _ in range(2)]
        assert all(answers(s) for s in held)
        extra = connect(external)
        assert not answers(extra)
        extra.close()
        internal = [connect(b.port) for _ in range(2)]  # not counted against max.connections
        assert all(answers(s) for s in internal)
        third = connect(b.port)
        assert not answers(third)  # but the listener's own limit holds
        third.close()
        held += internal
        held.pop(0).close()  # a slot of max.connections frees up
        wait_until(lambda: answers(connect(external)), 10, what="a new EXTERNAL connection admitted")
        assert b.alive()
    finally:
        for s in held:
            s.close()
        b.stop()
