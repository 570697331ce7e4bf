"""Frames on the wire (encode, read, show as hex), API names, and a process's RSS."""

from __future__ import annotations

import io
import re
import socket
import struct
from pathlib import Path

from kio.index import load_request_schema
from kio.schema.index import api_key_map
from kio.serial import entity_writer


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
