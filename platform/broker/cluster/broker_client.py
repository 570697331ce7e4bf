"""A request/response connection from this broker to another one, on the inter-broker listener (transaction
markers; the replica fetcher keeps its own connection). One request at a time; any error closes the connection
and the next call reconnects."""

from __future__ import annotations

import asyncio
import struct

from broker.network.connect import open_broker_connection, renewal_due
from broker.protocol import codec


class BrokerClient:
    def __init__(self, broker, node_id: int, client_id: str):
        self.broker, self.node_id, self.client_id = broker, node_id, client_id
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._correlation = 0
        self._lock = asyncio.Lock()

    def _address(self) -> tuple[str, int] | None:
        info = self.broker.cluster.metadata.brokers.get(self.node_id)
        if info is None:
            return None
        host, port = info.endpoint(self.broker.config.inter_broker_listener)
        return (info.host, info.port) if host is None else (host, port)

    async def call(self, api_key: int, version: int, body, timeout: float):
        """Send one request and return its decoded response. Raises OSError / TimeoutError / ConnectionError."""
        async with self._lock:
            try:
                async with asyncio.timeout(timeout):
                    if self._writer is not None and renewal_due(self._writer):  # KIP-368: a new session
                        self.close()
                    if self._writer is None:
                        address = self._address()
                        if address is None:
                            raise ConnectionError(f"broker {self.node_id} is not registered")
                        self._reader, self._writer = await open_broker_connection(
                            self.broker.config, *address, self.client_id)
                    self._correlation += 1
                    self._writer.write(codec.encode_request(api_key, version, self._correlation, self.client_id,
                                                            body))
                    await self._writer.drain()
                    size = struct.unpack(">i", await self._reader.readexactly(4))[0]
                    payload = await self._reader.readexactly(size)
                correlation, response = codec.decode_response(api_key, version, payload)
                if correlation != self._correlation:
                    raise ConnectionError("correlation id mismatch")
                return response
            except BaseException:
                self.close()
                raise

    def close(self) -> None:
        if self._writer is not None:
            self._writer.transport.abort()
        self._reader = self._writer = None
