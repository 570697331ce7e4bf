"""Blocking Kafka connections for the mirror's whole-batch path: one socket per broker, requests encoded and
responses decoded with the broker's own codec (:mod:`broker.protocol.codec`, kio). PLAINTEXT only: the mirror
uses the record path (librdkafka) for secured clusters.

Several requests may be outstanding on different connections at once (send to every leader, then receive from
each), which is how one stream fetches from, or produces to, several brokers in parallel.
"""

from __future__ import annotations

import datetime
import socket
import struct

from broker.protocol import codec

_SIZE = struct.Struct(">i")
MAX_RESPONSE_BYTES = 256 << 20
_IOV_MAX = 512  # buffers per sendmsg, under the kernel's 1024
FETCH, FETCH_VERSION = 1, 12


class Connection:
    def __init__(self, host: str, port: int, client_id: str, timeout_s: float = 30.0):
        """Raises OSError when the broker cannot be reached."""
        self.address = f"{host}:{port}"
        self.client_id = client_id
        self.sock = socket.create_connection((host, port), timeout=timeout_s)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.correlation = 0
        self.pending: list[tuple[int, int, int]] = []  # (api key, version, correlation) sent, not yet received

    def send(self, api_key: int, version: int, body) -> None:
        self.correlation += 1
        self.sock.sendall(codec.encode_request(api_key, version, self.correlation, self.client_id, body))
        self.pending.append((api_key, version, self.correlation))

    def send_parts(self, api_key: int, version: int, frame) -> None:
        """Send a frame made by hand: ``frame(correlation id, client id)`` gives its buffers (size prefix
        included), which go out with ``sendmsg``, uncopied."""
        self.correlation += 1
        _send_all(self.sock, frame(self.correlation, self.client_id))
        self.pending.append((api_key, version, self.correlation))

    def receive(self):
        """The decoded response to the oldest request sent. Raises OSError / ConnectionError."""
        api_key, version, correlation = self.pending.pop(0)
        size = _SIZE.unpack(self._read(4))[0]
        if not 0 < size <= MAX_RESPONSE_BYTES:
            raise ConnectionError(f"{self.address}: response of {size} bytes")
        got, response = codec.decode_response(api_key, version, self._read(size))
        if got != correlation:
            raise ConnectionError(f"{self.address}: correlation id {got}, expected {correlation}")
        return response

    def call(self, api_key: int, version: int, body):
        self.send(api_key, version, body)
        return self.receive()

    def _read(self, n: int) -> memoryview:
        buf = bytearray(n)
        view = memoryview(buf)
        got = 0
        while got < n:
            read = self.sock.recv_into(view[got:], n - got)
            if read == 0:
                raise ConnectionError(f"{self.address}: connection closed by the broker")
            got += read
        return memoryview(buf).toreadonly()

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass


def _send_all(sock: socket.socket, buffers: list) -> None:
    views = [memoryview(b).cast("B") for b in buffers if len(b)]
    while views:
        sent = sock.sendmsg(views[:_IOV_MAX])
        while sent:
            if sent >= len(views[0]):
                sent -= len(views.pop(0))
            else:
                views[0] = views[0][sent:]
                sent = 0


class Pool:
    """Connections by broker id, made on first use; addresses from the cluster's metadata."""

    def __init__(self, client_id: str):
        self.client_id = client_id
        self.addresses: dict[int, tuple[str, int]] = {}
        self.connections: dict[int, Connection] = {}

    def get(self, node: int) -> Connection:
        conn = self.connections.get(node)
        if conn is None:
            if node not in self.addresses:
                raise ConnectionError(f"broker {node} is not in the metadata")
            conn = self.connections[node] = Connection(*self.addresses[node], self.client_id)
        return conn

    def drop(self, node: int) -> None:
        conn = self.connections.pop(node, None)
        if conn is not None:
            conn.close()

    def close(self) -> None:
        for node in list(self.connections):
            self.drop(node)


def request_module(api_key: int, version: int):
    cls = codec.request_type(api_key, version)
    return cls, __import__(cls.__module__, fromlist=["x"])


def read_committed_fetches(positions: dict, leaders: dict, *, partition_bytes: int, wait_ms: int, min_bytes: int,
                           max_bytes: int) -> dict:
    """One ``read_committed`` Fetch (v12, no session) per leader of ``positions`` ({(topic, partition): offset};
    ``leaders``: {(topic, partition): broker id}, partitions without one left out): {leader: (request, {(topic,
    partition): offset asked})}."""
    cls, module = request_module(FETCH, FETCH_VERSION)
    by_leader: dict[int, dict[str, list]] = {}
    asked: dict[int, dict] = {}
    for key, position in positions.items():
        leader = leaders.get(key, -1)
        if leader < 0:
            continue
        asked.setdefault(leader, {})[key] = position
        by_leader.setdefault(leader, {}).setdefault(key[0], []).append(module.FetchPartition(
            partition=key[1], current_leader_epoch=-1, fetch_offset=position, last_fetched_epoch=-1,
            log_start_offset=-1, partition_max_bytes=partition_bytes))
    return {leader: (cls(replica_id=-1, max_wait=datetime.timedelta(milliseconds=wait_ms), min_bytes=min_bytes,
                         max_bytes=max_bytes, isolation_level=1, session_id=0, session_epoch=-1,
                         forgotten_topics_data=(), rack_id="",
                         topics=tuple(module.FetchTopic(topic=t, partitions=tuple(ps)) for t, ps in topics.items())),
                     asked[leader])
            for leader, topics in by_leader.items()}


def receive_each(pool: Pool, leaders, trouble):
    """Yield ``(leader, response)`` to the oldest request pending on each of ``leaders``' connections; a
    connection dropped meanwhile is skipped, one that fails goes to ``trouble(leader, exc)``."""
    for leader in leaders:
        conn = pool.connections.get(leader)
        if conn is None or not conn.pending:
            continue
        try:
            response = conn.receive()
        except (OSError, ConnectionError) as exc:
            trouble(leader, exc)
            continue
        yield leader, response
