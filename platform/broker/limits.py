"""Process resources a broker must not run out of: open files, memory handed back after large requests.

- ``raise_open_file_limit``: at start-up the soft ``RLIMIT_NOFILE`` is raised to the hard limit (what Kafka's
  operators do with ``ulimit -n``); every segment keeps three files open (``.log``, ``.index``, ``.timeindex``).
- ``partition_limit``: ``max.broker.partitions`` (the name proposed by Kafka's KIP-578), or when it is -1, what
  the open-file limit allows: (limit − ``RESERVED_FILES`` for sockets and checkpoints) / ``FILES_PER_PARTITION``
  (three files of the active segment plus headroom for a rolled one). CreateTopics refuses a topic that would
  take any broker past it (POLICY_VIOLATION), instead of failing half-way with "Too many open files".
- ``return_freed_memory``: glibc grows its mmap threshold after a large block is freed (up to 32 MiB), after
  which frames of a few MiB come from the heap and their memory is kept by the process. A fixed threshold of
  1 MiB keeps large buffers in their own mappings, given back to the OS as soon as they are freed.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import resource

log = logging.getLogger(__name__)

RESERVED_FILES = 1024
FILES_PER_PARTITION = 4
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
MMAP_THRESHOLD = 1 << 20


def raise_open_file_limit() -> int:
    """Raise the soft open-file limit to the hard one; returns the soft limit in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY:
        hard = 1 << 20
    if soft == resource.RLIM_INFINITY or soft >= hard:
        return soft if soft != resource.RLIM_INFINITY else hard
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        return hard
    except (ValueError, OSError) as exc:
        log.warning("cannot raise the open-file limit from %d to %d: %s", soft, hard, exc)
        return soft


def partition_limit(configured: int) -> int:
    """Partitions one broker may host: ``max.broker.partitions``, or (-1) what the open-file limit allows."""
    if configured >= 0:
        return configured
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        soft = 1 << 20
    return max((soft - RESERVED_FILES) // FILES_PER_PARTITION, 1)


def return_freed_memory() -> bool:
    """Fix glibc's mmap and trim thresholds (see the module docstring); False where that is not glibc."""
    name = ctypes.util.find_library("c")
    if not name:
        return False
    try:
        libc = ctypes.CDLL(name)
        return bool(libc.mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(
            libc.mallopt(_M_TRIM_THRESHOLD, MMAP_THRESHOLD))
    except (OSError, AttributeError):
        return False
