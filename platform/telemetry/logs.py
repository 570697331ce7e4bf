"""Every service's log lines: ``--log-format text`` (the default: ``time LEVEL logger: message``) or ``json``
(one JSON object per line — ``ts`` (ISO 8601, UTC, milliseconds), ``level``, ``logger``, ``message``, ``pid``,
``service`` (``LOGBUS_SERVICE``, set by the topology's supervisor) and ``exception`` (the traceback) when there is
one — for a log shipper). The web servers' own loggers (uvicorn) go through the same handler."""

from __future__ import annotations

import datetime
import json
import logging
import os
import sys

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
FORMATS = ("text", "json")


class JsonFormatter(logging.Formatter):
    def __init__(self):
        super().__init__()
        self.service = os.environ.get("LOGBUS_SERVICE") or None
        self.pid = os.getpid()

    def format(self, record: logging.LogRecord) -> str:
        event = {"ts": datetime.datetime.fromtimestamp(record.created, datetime.timezone.utc)
                 .isoformat(timespec="milliseconds").replace("+00:00", "Z"),
                 "level": record.levelname, "logger": record.name, "message": record.getMessage(),
                 "pid": self.pid}
        if self.service:
            event["service"] = self.service
        if record.exc_info:
            event["exception"] = self.formatException(record.exc_info)
        return json.dumps(event, ensure_ascii=False, default=str)


def configure(level: str = "INFO", fmt: str | None = None) -> str:
    """Root logging on stderr in ``fmt`` (default: ``LOGBUS_LOG_FORMAT``, else text); returns the format used."""
    fmt = (fmt or os.environ.get("LOGBUS_LOG_FORMAT") or "text").lower()
    if fmt not in FORMATS:
        raise ValueError(f"--log-format must be one of {', '.join(FORMATS)}, not {fmt!r}")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else logging.Formatter(TEXT_FORMAT))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
    return fmt
