"""Log line formats: `text` for people, `json` (one object per line) for node log collectors.

JSON lines carry time (RFC 3339, UTC), level, logger and message, plus the structured
fields a call site passes with `extra=` (plugin, hook, pod, container, method, code, ...).
"""

from __future__ import annotations

import datetime
import logging
import sys

import orjson

LOG_FORMATS = ("text", "json")
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
# Record attributes passed through as JSON fields when a call site sets them via `extra=`.
STRUCTURED_FIELDS = ("plugin", "hook", "pod", "container", "method", "code", "endpoint", "file")


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


def configure_logging(level: str, log_format: str = "text") -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if log_format == "json" else logging.Formatter(TEXT_FORMAT))
    logging.basicConfig(level=getattr(logging, level.upper()), handlers=[handler], force=True)
