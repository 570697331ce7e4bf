"""How a broker process ends, whatever is still running.

- The first SIGTERM or SIGINT asks the broker to stop (:meth:`broker.server.Broker.stop`: every step bounded by
  ``STOP_STEP_TIMEOUT_S``) and arms a watchdog: if the process still runs ``STOP_DEADLINE_S`` later, it ends with
  exit code 1 (the logs then have no clean-shutdown marker and the next start recovers them).
- A second signal during the stop forces a quick exit: the logs are closed on the event loop (flush,
  checkpoints, clean-shutdown marker) and the process exits with code 1 at once; if the loop does not get
  there within ``FORCE_GRACE_S`` (it is blocked), the watchdog ends the process without closing them.
- Once the stop has finished, threads still blocked in a call (kazoo's session close on an unresponsive
  ZooKeeper) get ``EXIT_GRACE_S`` before the watchdog ends the process with the stop's exit code.

The handlers are ``signal.signal`` handlers, not ``loop.add_signal_handler``: Python runs them on the main
thread between two bytecodes even while the event loop is busy, and they only hand work to the loop with
``call_soon_threadsafe`` (as ``asyncio.Runner`` does for SIGINT) and arm the watchdog, which takes no lock.
"""

from __future__ import annotations

import asyncio
import logging
import os
import select
import signal
import sys
import threading
import time
from typing import Callable

log = logging.getLogger(__name__)

STOP_STEP_TIMEOUT_S = 5.0  # each step of a stop: fetchers, connections, the ZooKeeper session
STOP_DEADLINE_S = 30.0  # from the first signal to the end of the process, at the latest
FORCE_GRACE_S = 3.0  # from the second signal to the end of the process, at the latest
EXIT_GRACE_S = 3.0  # from a finished stop to the end of the process, at the latest
SIGNALS = (signal.SIGTERM, signal.SIGINT)


class Watchdog:
    """A daemon thread that ends the process with ``os._exit`` once a deadline passes; arming again can only
    bring the deadline closer. :meth:`arm` is safe in a signal handler: it takes no lock and starts no thread
    (it sets two attributes and writes a byte to a pipe the thread waits on)."""

    def __init__(self) -> None:
        self.deadline: float | None = None
        self.code = 1
        self.why = ""
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_w, False)
        threading.Thread(target=self._watch, name="stop-watchdog", daemon=True).start()

    def arm(self, seconds: float, code: int, why: str) -> None:
        deadline = time.monotonic() + seconds
        if self.deadline is None or deadline < self.deadline:
            self.deadline, self.why = deadline, why
        self.code = code
        try:
            os.write(self._wake_w, b"!")
        except OSError:  # the pipe is full: the thread is awake anyway
            pass

    def _watch(self) -> None:
        while True:
            deadline = self.deadline
            if deadline is not None and time.monotonic() >= deadline:
                break
            ready, _, _ = select.select([self._wake_r], [], [],
                                        None if deadline is None else deadline - time.monotonic())
            if ready:
                os.read(self._wake_r, 512)
        # Reporting must not keep the exit waiting (stderr may be a full pipe, or its lock held by a stuck thread).
        report = threading.Thread(target=self._report, daemon=True)
        report.start()
        report.join(0.5)
        os._exit(self.code)

    def _report(self) -> None:
        log.log(logging.WARNING if self.code == 0 else logging.ERROR, "process still running %s: exiting now "
                "(code %d)", self.why, self.code)
        for handler in logging.getLogger().handlers:
            handler.flush()
        sys.stderr.flush()


class StopSignals:
    """SIGTERM/SIGINT handling for one broker run: ``request_stop`` on the first signal, ``force_exit`` on the
    second, both called on ``loop``."""

    def __init__(self, loop: asyncio.AbstractEventLoop, request_stop: Callable[[], None],
                 force_exit: Callable[[], None], watchdog: Watchdog) -> None:
        self.loop = loop
        self.request_stop = request_stop
        self.force_exit = force_exit
        self.watchdog = watchdog
        self.received = 0
        self._previous: dict[int, object] = {}

    def install(self) -> None:
        for sig in SIGNALS:
            self._previous[sig] = signal.signal(sig, self._handle)

    def uninstall(self) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()

    def _handle(self, signum: int, _frame) -> None:  # main thread, between two bytecodes
        self.received += 1
        first = self.received == 1
        if first:
            self.watchdog.arm(STOP_DEADLINE_S, 1, f"{STOP_DEADLINE_S:g}s after {signal.Signals(signum).name}")
        else:
            self.watchdog.arm(FORCE_GRACE_S, 1, f"{FORCE_GRACE_S:g}s after a second signal")
        try:
            self.loop.call_soon_threadsafe(self.request_stop if first else self.force_exit)
        except RuntimeError:  # the loop is closed: the stop is over, the watchdog ends what is left
            pass
