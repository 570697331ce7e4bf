"""Writes the disk may refuse (ENOSPC on a full log dir, EDQUOT, EIO): the two rules every write site follows.

1. Nothing partial stays behind. An append that fails is cut back to where it started (``LogSegment``,
   ``_Index``); a file that is rewritten whole (checkpoints, snapshots, ``meta.properties``) is written to
   ``<name>.tmp``, fsync'd and renamed over the old one by :func:`replace_file`, which on any failure removes the
   temp file and leaves the old file in place.
2. A refused write is an *incident* of its site (a kind of write in one log dir, or one file), reported through
   :data:`incidents`: an ERROR when it starts, at most one more per ``REPORT_INTERVAL_S`` while it lasts (with
   the count of failures in between), and one INFO when the site succeeds again. A disk that stays full for an
   hour costs a few lines per site, not one per request. The callers retry: a producer gets
   KAFKA_STORAGE_ERROR (retriable), a replica fetcher backs off, background writers try again at their next round.

Not thread-safe: :data:`incidents` is used on the event loop only.
"""

from __future__ import annotations

import logging
import os
import time

log = logging.getLogger(__name__)

REPORT_INTERVAL_S = 60.0


def replace_file(path: str, data: str | bytes, fsync: bool = True) -> None:
    """Replace ``path`` with ``data`` whole, or raise OSError and leave the old file (or no file) as it was.

    ``fsync=False`` for files whose loss in a crash only costs a slower start (a torn or empty one is detected
    and rebuilt from the log) and that are written too often to fsync on the event loop."""
    tmp = path + ".tmp"
    try:
        with open(tmp, "wb") as f:
            f.write(data.encode() if isinstance(data, str) else data)
            f.flush()
            if fsync:
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)  # a partial temp file would keep the space the disk lacks
        except OSError:
            pass
        raise
    if fsync:
        _fsync_dir(os.path.dirname(path) or ".")


def _fsync_dir(directory: str) -> None:
    """Make the rename durable; best effort (the new file is in place either way)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


class _Incident:
    __slots__ = ("reported_at", "failures", "open")

    def __init__(self) -> None:
        self.reported_at = float("-inf")
        self.failures = 0  # since the last report
        self.open = False  # a failure was reported and no success since


class Incidents:
    """Rate-limited reports of refused writes, per site (any hashable string naming the kind of write and where)."""

    def __init__(self, logger: logging.Logger = log, interval_s: float = REPORT_INTERVAL_S, clock=time.monotonic):
        self._log = logger
        self._interval = interval_s
        self._clock = clock
        self._sites: dict[str, _Incident] = {}

    def failed(self, site: str, exc: BaseException, detail: str = "") -> None:
        incident = self._sites.get(site)
        if incident is None:
            incident = self._sites[site] = _Incident()
        incident.failures += 1
        now = self._clock()
        if now - incident.reported_at < self._interval:
            return
        more = f" ({incident.failures - 1} more since the last report)" if incident.failures > 1 else ""
        self._log.error("%s refused by the disk: %s%s%s; retrying", site, exc, f" [{detail}]" if detail else "",
                        more)
        incident.reported_at, incident.failures, incident.open = now, 0, True

    def succeeded(self, site: str) -> None:
        incident = self._sites.get(site)
        if incident is None:
            return
        if incident.open:
            more = f" ({incident.failures} more failure(s) since the last report)" if incident.failures else ""
            self._log.info("%s succeed again%s", site, more)
            incident.open = False
        if self._clock() - incident.reported_at >= self._interval:
            del self._sites[site]  # forgotten: a new failure is reported at once

    @property
    def any(self) -> bool:
        """Cheap test for hot paths: is any site failing or recently failed (worth a :meth:`succeeded`)?"""
        return bool(self._sites)


def log_dir_of(partition_dir: str) -> str:
    return os.path.dirname(os.path.abspath(partition_dir))


incidents = Incidents()
