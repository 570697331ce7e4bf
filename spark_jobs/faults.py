"""Crash points for tests: ``LOGBUS_LOAD_CRASH_AT=publish.move:3`` makes the process exit abruptly (``os._exit``,
no cleanup, like ``kill -9``) when it reaches the 4th file move of a publication. Unset in normal runs."""

from __future__ import annotations

import os
import sys


def point(name: str, index: int | None = None) -> None:
    spec = os.environ.get("LOGBUS_LOAD_CRASH_AT")
    if not spec:
        return
    want, _, at = spec.partition(":")
    if want == name and (index is None or not at or int(at) == index):
        print(f"logbus load: crash point {spec} reached", file=sys.stderr, flush=True)
        os._exit(137)
