"""A minimal Kafka wire client for tests that must send what real clients never send (bad CRCs, garbage).

Requests are encoded and responses decoded with kio's generated types, independently of the broker's code.
"""

from __future__ import annotations

import io
import socket
import struct
import sys

from kio.index import load_request_schema, load_response_schema
from kio.serial import entity_reader, entity_writer


def batch(values: list[bytes], base_timestamp: int = 1_700_000_000_000) -> bytes:
    """A magic-2 record batch encoded by kafka-python's builder (an outside encoder)."""
    from kafka.record.default_records import DefaultRecordBatchBuilder

    builder = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False, producer_id=-1,
                                        producer_epoch=-1, base_sequence=-1, batch_size=1 << 20)
    for i, value in enumerate(values):
        builder.append(i, timestamp=base_timestamp + i, key=None, value=value, headers=[])
    return bytes(builder.build())


class RawClient:
    def __init__(self, host: str, port: int, timeout: float = 10.0):
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.correlation = 0

    def close(self) -> None:
        self.sock.close()

    def send_bytes(self, data: bytes) -> None:
        self.sock.sendall(data)

    def recv_frame(self) -> bytes:
        size = struct.unpack(">i", self._recv_exact(4))[0]
        return self._recv_exact(size)

    def _recv_exact(self, n: int) -> bytes:
        chunks = bytearray()
        while len(chunks) < n:
            chunk = self.sock.recv(n - len(chunks))
            if not chunk:
                raise ConnectionError("closed by broker")
            chunks += chunk
        return bytes(chunks)

    def request(self, api_key: int, version: int, body, header_version: int | None = None):
        """Send one request; return the decoded response body."""
        req_type = load_request_schema(api_key, version)
        flexible = req_type.__flexible__
        self.correlation += 1
        header = struct.pack(">hhih", api_key, version, self.correlation, 4) + b"test"
        if flexible:
            header += b"\x00"
        buf = io.BytesIO()
        entity_writer(req_type)(buf, body)
        payload = header + buf.getvalue()
        self.send_bytes(struct.pack(">i", len(payload)) + payload)
        return self.read_response(api_key, version)

    def read_response(self, api_key: int, version: int):
        frame = self.recv_frame()
        correlation = struct.unpack_from(">i", frame, 0)[0]
        assert correlation == self.correlation
        resp_type = load_response_schema(api_key, version)
        pos = 4 + (1 if resp_type.__flexible__ and api_key != 18 else 0)
        body, _ = entity_reader(resp_type)(frame, pos)
        return body


def request_module(api_key: int, version: int):
    return sys.modules[load_request_schema(api_key, version).__module__]
