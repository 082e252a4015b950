"""Structured logs: one JSON object per line, with the request id of the request being served.

`fairmatch serve` hands `uvicorn_log_config` to uvicorn, so uvicorn's own
messages, the access lines and the service's loggers share one format.
"""

from __future__ import annotations

import contextvars
import json
import logging
from datetime import UTC, datetime
from typing import Any

import orjson

request_id: contextvars.ContextVar[str | None] = contextvars.ContextVar("request_id", default=None)

# values json.dumps(default=str) would write as str() (dates, dataclasses) orjson writes so too
_AS_JSON_DUMPS = orjson.OPT_NON_STR_KEYS | orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_PASSTHROUGH_DATACLASS
# attributes every LogRecord has; anything else was passed with `extra=` and is logged as a field
_STANDARD = set(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime", "taskName"}


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
            "pid": record.process,
        }
        current = request_id.get()
        if current is not None:
            entry["request_id"] = current
        for key, value in vars(record).items():
            if key not in _STANDARD and not key.startswith("_"):
                entry[key] = value
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        try:
            # a few times faster than json.dumps, and with the access log on every request logs a line
            return orjson.dumps(entry, default=str, option=_AS_JSON_DUMPS).decode()
        except TypeError:  # what orjson cannot encode (an integer beyond 64 bits): json can
            return json.dumps(entry, default=str, ensure_ascii=False)


class TextFormatter(logging.Formatter):
    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        current = request_id.get()
        return f"{line} [request {current}]" if current is not None else line


def uvicorn_log_config(log_format: str, level: str) -> dict[str, Any]:
    """A logging.config dictionary for uvicorn and the service's own loggers."""
    formatter = "fairmatch.logs.JsonFormatter" if log_format == "json" else "fairmatch.logs.TextFormatter"
    level = level.upper()
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"default": {"()": formatter}},
        "handlers": {
            "stderr": {"class": "logging.StreamHandler", "formatter": "default", "stream": "ext://sys.stderr"}
        },
        "loggers": {
            "uvicorn": {"handlers": ["stderr"], "level": level, "propagate": False},
            "uvicorn.error": {"level": level},
            # access lines come from the service (with route, duration and request id)
            "uvicorn.access": {"handlers": [], "level": "WARNING", "propagate": False},
            "fairmatch": {"handlers": ["stderr"], "level": level, "propagate": False},
        },
    }
