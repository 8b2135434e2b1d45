"""Log line formats: `text` for people, `json` (one object per line) for node log collectors.

JSON lines carry time (RFC 3339, UTC), level, logger and message, plus the structured
fields a call site passes with `extra=` (plugin, hook, pod, container, method, code, ...).
"""

from __future__ import annotations

import datetime
import logging
import sys
from pathlib import Path

import orjson

LOG_FORMATS = ("text", "json")
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
# Record attributes passed through as JSON fields when a call site sets them via `extra=`.
STRUCTURED_FIELDS = ("plugin", "hook", "pod", "container", "method", "code", "endpoint", "file")
# Libraries whose debug lines are their own internals, not the proxy's: grpc's asyncio poller logs
# "Loaded running loop" every second. --log-level=debug is for the proxy's decisions, so these stay at info.
QUIET_LIBRARY_LOGGERS = ("grpc", "asyncio")


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, object] = {
            "time": datetime.datetime.fromtimestamp(record.created, datetime.timezone.utc)
            .isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        for name in STRUCTURED_FIELDS:
            value = record.__dict__.get(name)
            if value not in (None, ""):
                entry[name] = value
        if record.exc_info:
            entry["error"] = self.formatException(record.exc_info)
        return orjson.dumps(entry, default=str).decode()


def configure_logging(level: str, log_format: str = "text", log_file: Path | None = None,
                      also_stderr: bool = True) -> None:
    """Log lines to stderr, or to log_file (appending; and stderr too when also_stderr)."""
    formatter = JsonFormatter() if log_format == "json" else logging.Formatter(TEXT_FORMAT)
    handlers: list[logging.Handler] = []
    if log_file is not None:
        log_file.parent.mkdir(parents=True, exist_ok=True)
        handlers.append(logging.FileHandler(log_file))
    if log_file is None or also_stderr:
        handlers.append(logging.StreamHandler(sys.stderr))
    for handler in handlers:
        handler.setFormatter(formatter)
    root_level = getattr(logging, level.upper())
    logging.basicConfig(level=root_level, handlers=handlers, force=True)
    for name in QUIET_LIBRARY_LOGGERS:
        logging.getLogger(name).setLevel(max(root_level, logging.INFO))
