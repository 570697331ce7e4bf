"""The broker's ZooKeeper session (kazoo), bridged to the event loop.

kazoo's calls block and its watch callbacks run on kazoo's own thread; the event loop never waits on either:
calls go through one worker thread (so they stay in order) and watch events are handed to the loop with
``call_soon_threadsafe``. ``zookeeper.connect`` may carry a chroot (``host:port/live``), created if missing.
When the session expires, kazoo starts a new one; ``on_new_session`` callbacks then re-create what was
ephemeral (the broker registration, the controller election).
"""

from __future__ import annotations

import asyncio
import logging
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any, Callable

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import (  # noqa: F401 (re-exported)
    BadVersionError,
    NodeExistsError,
    NoNodeError,
)
from kazoo.handlers.threading import KazooTimeoutError

log = logging.getLogger(__name__)


def split_chroot(connect: str) -> tuple[str, str]:
    hosts, slash, chroot = connect.partition("/")
    return hosts, ("/" + chroot.rstrip("/")) if slash and chroot.strip("/") else ""


class Zk:
    def __init__(self, connect: str, session_timeout_ms: int, connection_timeout_ms: int | None = None):
        self.connect = connect
        self.session_timeout = session_timeout_ms / 1000
        self.connection_timeout = (connection_timeout_ms or session_timeout_ms) / 1000
        self.client: KazooClient | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="zk")
        self._on_new_session: list[Callable[[], Any]] = []
        self._lost = False
        self._closing = False
        self._stopped_watches: set[str] = set()

    async def start(self) -> None:
        self.loop = asyncio.get_running_loop()
        hosts, chroot = split_chroot(self.connect)
        if chroot:
            try:
                await self.loop.run_in_executor(self._executor, self._ensure_chroot, hosts, chroot)
            except KazooTimeoutError:
                raise ConnectionError(f"cannot reach ZooKeeper at {hosts} within {self.connection_timeout:g}s "
                                      f"(zookeeper.connect={self.connect})") from None
        self.client = KazooClient(hosts=hosts + chroot, timeout=self.session_timeout)
        self.client.add_listener(self._state_listener)
        try:
            await self.loop.run_in_executor(self._executor,
                                            partial(self.client.start, timeout=self.connection_timeout))
        except KazooTimeoutError:
            raise ConnectionError(f"cannot reach ZooKeeper at {hosts} within {self.connection_timeout:g}s "
                                  f"(zookeeper.connect={self.connect})") from None

    def _ensure_chroot(self, hosts: str, chroot: str) -> None:
        bootstrap = KazooClient(hosts=hosts, timeout=self.session_timeout)
        bootstrap.start(timeout=self.connection_timeout)
        try:
            bootstrap.ensure_path(chroot)
        finally:
            bootstrap.stop()
            bootstrap.close()

    def _state_listener(self, state: str) -> None:  # kazoo's thread
        if state == KazooState.LOST and not self._closing:
            self._lost = True
            log.warning("ZooKeeper session lost")
        elif state == KazooState.CONNECTED and self._lost:
            self._lost = False
            log.warning("ZooKeeper: new session")
            for callback in self._on_new_session:
                self.loop.call_soon_threadsafe(callback)

    def on_new_session(self, callback: Callable[[], Any]) -> None:
        self._on_new_session.append(callback)

    async def call(self, fn: Callable, *args, **kwargs) -> Any:
        """Run one kazoo call (``self.client.get`` ...) on the ZooKeeper worker thread."""
        return await self.loop.run_in_executor(self._executor, partial(fn, *args, **kwargs))

    async def get(self, path: str) -> tuple[bytes, Any]:
        return await self.call(self.client.get, path)

    async def get_or_none(self, path: str) -> tuple[bytes | None, Any]:
        try:
            return await self.get(path)
        except NoNodeError:
            return None, None

    async def children(self, path: str) -> list[str]:
        try:
            return await self.call(self.client.get_children, path)
        except NoNodeError:
            return []

    async def ensure(self, *paths: str) -> None:
        for path in paths:
            await self.call(self.client.ensure_path, path)

    def _to_loop(self, callback: Callable) -> Callable:
        def relay(*args):
            if self.loop.is_closed():
                return False
            self.loop.call_soon_threadsafe(callback, *args)
        return relay

    async def watch_children(self, path: str, callback: Callable[[list[str]], Any]) -> None:
        """``callback(children)`` on the loop now and on every change (the node is created if missing)."""
        def register():
            self.client.ensure_path(path)
            self.client.ChildrenWatch(path, self._to_loop(callback))
        await self.call(register)

    async def watch_data(self, path: str, callback: Callable[[bytes | None, Any], Any]) -> None:
        """``callback(data, stat)`` on the loop now and on every change; ``(None, None)`` when deleted. The
        watch ends when the callback returns False (checked on the loop, see :meth:`stop_watch`)."""
        stopped = self._stopped_watches

        def relay(data, stat, _event=None):
            if path in stopped:
                stopped.discard(path)
                return False
            if self.loop.is_closed():
                return False
            self.loop.call_soon_threadsafe(callback, data, stat)

        stopped.discard(path)
        await self.call(self.client.DataWatch, path, relay)

    def stop_watch(self, path: str) -> None:
        self._stopped_watches.add(path)

    async def stop(self, timeout: float = 10.0) -> None:
        """Close the session (its ephemeral nodes go at once), waiting at most ``timeout`` seconds: an
        unresponsive ZooKeeper leaves kazoo's stop running on its thread, and the session to expire."""
        self._closing = True
        if self.client is not None:
            stopping = asyncio.ensure_future(self.call(self.client.stop))
            done, _ = await asyncio.wait({stopping}, timeout=timeout)
            if not done:
                log.warning("ZooKeeper did not acknowledge the end of the session within %gs", timeout)
            elif stopping.exception() is not None:
                log.warning("closing the ZooKeeper session: %s", stopping.exception())
            else:
                try:
                    self.client.close()
                except Exception as exc:  # noqa: BLE001 (closing is best effort)
                    log.warning("closing the ZooKeeper client: %s", exc)
        self._executor.shutdown(wait=False, cancel_futures=True)
