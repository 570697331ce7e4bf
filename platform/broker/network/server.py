"""The Kafka listener: asyncio, one task per connection, requests handled and answered strictly in order.

Like Kafka's processors, a connection is served one request at a time (a long-polling Fetch delays the next
response on that connection, never other connections); pipelined requests wait in the socket buffer.
A frame over ``socket.request.max.bytes``, an unknown API key, an unsupported version or a request that does
not decode is logged and closes that connection only. Produce with ``acks=0`` is not answered.
File regions in a response go out with ``loop.sendfile`` (zero copy) when large enough to be worth it.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import os

from broker.handlers import APIS, NO_RESPONSE, RawResponse
from broker.handlers.api_versions import unsupported_version_response
from broker.protocol import codec
from broker.protocol.codec import MalformedRequest

log = logging.getLogger(__name__)

SENDFILE_MIN_BYTES = 64 * 1024  # below this a pread + write is cheaper than draining for sendfile


class KafkaListener:
    def __init__(self, broker, host: str, port: int, max_request_bytes: int):
        self.broker = broker
        self.host = host
        self.port = port
        self.max_request_bytes = max_request_bytes
        self._server: asyncio.base_events.Server | None = None
        self._connections: set[asyncio.Task] = set()

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, self.host, self.port, limit=1 << 20,
                                                  reuse_address=True)
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._connections):
            task.cancel()
        if self._connections:
            await asyncio.gather(*self._connections, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        self._connections.add(task)
        peer = writer.get_extra_info("peername")
        try:
            while True:
                head = await reader.readexactly(4)
                size = int.from_bytes(head, "big", signed=True)
                if size < 0 or size > self.max_request_bytes:
                    log.warning("closing connection from %s: request frame of %d bytes exceeds "
                                "socket.request.max.bytes=%d", peer, size, self.max_request_bytes)
                    return
                payload = await reader.readexactly(size)
                parts = await self.dispatch(payload)
                if parts is not None:
                    await self._write(writer, parts)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        except MalformedRequest as exc:
            log.warning("closing connection from %s: %s", peer, exc)
        except asyncio.CancelledError:
            pass
        except Exception:
            log.exception("closing connection from %s after an internal error", peer)
        finally:
            self._connections.discard(task)
            writer.close()

    async def dispatch(self, payload: bytes) -> list | None:
        header = codec.read_header(payload)
        api = APIS.get(header.api_key)
        if api is None:
            raise MalformedRequest(f"unknown api key {header.api_key}")
        if not api.supports(header.api_version):
            if header.api_key == codec.API_VERSIONS_KEY:
                return [codec.encode_response(header.api_key, 0, header.correlation_id,
                                              unsupported_version_response())]
            raise MalformedRequest(f"{api.name} v{header.api_version} is not supported "
                                   f"(v{api.min_version}-{api.max_version})")
        request = codec.decode_body(header, payload)
        result = api.handler(self.broker, header, request)
        if inspect.isawaitable(result):
            result = await result
        if result is NO_RESPONSE:
            return None
        if isinstance(result, RawResponse):
            return result.parts
        return [codec.encode_response(header.api_key, header.api_version, header.correlation_id, result)]

    async def _write(self, writer: asyncio.StreamWriter, parts: list) -> None:
        loop = asyncio.get_running_loop()
        for part in parts:
            if isinstance(part, (bytes, bytearray)):
                writer.write(part)
            elif part.size < SENDFILE_MIN_BYTES:
                writer.write(part.read())
            else:
                await writer.drain()
                with os.fdopen(part.fd, "rb", buffering=0, closefd=False) as file:
                    sent = await loop.sendfile(writer.transport, file, part.position, part.size)
                if sent != part.size:  # the file shrank under us: the frame is now wrong, so drop the link
                    raise ConnectionError("short sendfile")
        await writer.drain()
