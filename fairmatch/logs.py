"""Logs for people and for machines: plain lines on a terminal, one JSON object per line otherwise.

`fairmatch serve` hands `uvicorn_log_config` to uvicorn, so uvicorn's own
messages, the access lines and the service's loggers share one format
(`server.log_format`: `auto` picks `text` when stderr is a terminal). Both
formats carry the request id of the request being served and the fields a
message was logged with; neither carries terminal colour codes (uvicorn logs
a coloured copy of some messages, `color_message`, which both leave out).
"""

from __future__ import annotations

import contextvars
import json
import logging
import sys
from datetime import UTC, datetime
from typing import IO, Any

import orjson

request_id: contextvars.ContextVar[str | None] = contextvars.ContextVar("request_id", default=None)

# values json.dumps(default=str) would write as str() (dates, dataclasses) orjson writes so too
_AS_JSON_DUMPS = orjson.OPT_NON_STR_KEYS | orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_PASSTHROUGH_DATACLASS
# attributes every LogRecord has; anything else was passed with `extra=` and is logged as a field,
# but uvicorn's copy of its message with terminal colour codes
_STANDARD = set(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {
    "message", "asctime", "taskName", "color_message",
}  # fmt: skip
# a line on a terminal shows control characters escaped: a request's path cannot move its cursor
_ESCAPED = {code: f"\\x{code:02x}" for code in (*range(32), 127)}


def fields_of(record: logging.LogRecord) -> dict[str, Any]:
    """The fields a message was logged with (`extra=`), then the request id."""
    fields = {key: value for key, value in vars(record).items() if key not in _STANDARD and not key.startswith("_")}
    current = request_id.get()
    if current is not None:
        fields["request_id"] = current
    return fields


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
            "pid": record.process,
        }
        entry.update(fields_of(record))
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        try:
            # a few times faster than json.dumps, and with the access log on every request logs a line
            return orjson.dumps(entry, default=str, option=_AS_JSON_DUMPS).decode()
        except TypeError:  # what orjson cannot encode (an integer beyond 64 bits): json can
            return json.dumps(entry, default=str, ensure_ascii=False)


class TextFormatter(logging.Formatter):
    """`2026-01-02 03:04:05.678 INFO    fairmatch.access: GET /api/v1/jobs 201 duration_ms=3.1 …`:
    local time, level, logger, message, then its fields as `name=value`, but those whose value
    the message already says (an access line's method, path and status)."""

    def format(self, record: logging.LogRecord) -> str:
        message = record.getMessage()
        said = set(message.split())
        shown = [f"{key}={_text(value)}" for key, value in fields_of(record).items()
                 if value is not None and _text(value) not in said]  # fmt: skip
        when = datetime.fromtimestamp(record.created).strftime("%Y-%m-%d %H:%M:%S")
        line = " ".join([f"{when}.{int(record.msecs):03d} {record.levelname:<7} {record.name}: {message}", *shown])
        line = line.translate(_ESCAPED)
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


def _text(value: Any) -> str:
    text = str(value)
    return json.dumps(text, ensure_ascii=False) if not text or any(c.isspace() or c == "=" for c in text) else text


def resolved_format(log_format: str, stream: IO[str]) -> str:
    """`auto` as `text` on a terminal and `json` elsewhere; `text` and `json` as they are."""
    if log_format != "auto":
        return log_format
    return "text" if stream.isatty() else "json"


def uvicorn_log_config(log_format: str, level: str) -> dict[str, Any]:
    """A logging.config dictionary for uvicorn and the service's own loggers, on stderr."""
    text = resolved_format(log_format, sys.stderr) == "text"
    formatter = "fairmatch.logs.TextFormatter" if text else "fairmatch.logs.JsonFormatter"
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
