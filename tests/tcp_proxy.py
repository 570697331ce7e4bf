"""A TCP proxy the tests can cut and restore, to play a WAN link between datacenters."""

from __future__ import annotations

import asyncio
import threading


class TcpProxy:
    def __init__(self, listen_host: str, listen_port: int, target_host: str, target_port: int):
        self.listen = (listen_host, listen_port)
        self.target = (target_host, target_port)
        self.loop = asyncio.new_event_loop()
        self.server: asyncio.AbstractServer | None = None
        self.writers: set[asyncio.StreamWriter] = set()
        self.rate: float | None = None  # bytes/s each way of each connection (a slow WAN link); None: no limit
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def _run(self, coro, timeout: float = 10):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
                if self.rate:
                    await asyncio.sleep(len(data) / self.rate)
        except (ConnectionError, OSError):
            pass
        finally:
            writer.close()

    async def _handle(self, client_reader, client_writer) -> None:
        try:
            server_reader, server_writer = await asyncio.open_connection(*self.target)
        except OSError:
            client_writer.close()
            return
        self.writers |= {client_writer, server_writer}
        await asyncio.gather(self._pipe(client_reader, server_writer), self._pipe(server_reader, client_writer))
        self.writers -= {client_writer, server_writer}

    async def _start(self) -> None:
        self.server = await asyncio.start_server(self._handle, *self.listen, reuse_address=True)

    async def _cut(self) -> None:
        if self.server is not None:
            self.server.close()
            await self.server.wait_closed()
            self.server = None
        for writer in list(self.writers):
            writer.transport.abort()
        self.writers.clear()

    def start(self) -> "TcpProxy":
        self._run(self._start())
        return self

    def cut(self) -> None:
        """Drop every connection and refuse new ones (the WAN link is down)."""
        self._run(self._cut())

    def restore(self) -> None:
        self._run(self._start())

    def close(self) -> None:
        self._run(self._cut())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)
