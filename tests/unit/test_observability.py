"""Log lines (JSON and text), request-id handling and the database gauges' pure parts."""

from __future__ import annotations

import dataclasses
import io
import json
import logging
import re
from datetime import UTC, datetime

import pytest

from fairmatch.api.observe import _request_id, _route_template
from fairmatch.logs import JsonFormatter, TextFormatter, request_id, resolved_format
from fairmatch.services.gauges import DatabaseGauges, Snapshot, corrections_of, target_shares


def record(message: str, **extra) -> logging.LogRecord:
    rec = logging.LogRecord("fairmatch.matching", logging.DEBUG, __file__, 1, message, None, None)
    for key, value in extra.items():
        setattr(rec, key, value)
    return rec


def test_json_lines_carry_fields_and_the_request_id():
    token = request_id.set("abc123")
    try:
        line = JsonFormatter().format(record("match decision", site="LCG.A.ch", job_id=7))
    finally:
        request_id.reset(token)
    entry = json.loads(line)
    assert entry["message"] == "match decision" and entry["level"] == "debug"
    assert entry["request_id"] == "abc123"
    assert entry["site"] == "LCG.A.ch" and entry["job_id"] == 7
    assert "request_id" not in json.loads(JsonFormatter().format(record("outside a request")))


def test_json_lines_hold_exceptions_and_text_lines_the_request_id():
    try:
        raise ValueError("boom")
    except ValueError:
        import sys

        rec = logging.LogRecord("x", logging.ERROR, __file__, 1, "failed", None, sys.exc_info())
    assert "ValueError: boom" in json.loads(JsonFormatter().format(rec))["exception"]
    token = request_id.set("r-1")
    try:
        assert TextFormatter().format(record("hello")).endswith("hello request_id=r-1")
    finally:
        request_id.reset(token)
    text = TextFormatter().format(rec)
    assert text.splitlines()[0].endswith("ERROR   x: failed") and "ValueError: boom" in text.splitlines()[-1]


def access(path: str, route: str) -> logging.LogRecord:
    rec = logging.LogRecord("fairmatch.access", logging.INFO, __file__, 1, "%s %s %d", ("GET", path, 200), None)
    fields = {"method": "GET", "path": path, "route": route, "status": 200, "duration_ms": 1.5, "client": None}
    for key, value in fields.items():
        setattr(rec, key, value)
    return rec


def test_a_text_line_is_time_level_logger_message_and_the_fields_it_does_not_say():
    line = TextFormatter().format(access("/api/v1/jobs/7", "/api/v1/jobs/{job_id}"))
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} INFO    fairmatch\.access: "
                        r"GET /api/v1/jobs/7 200 route=/api/v1/jobs/\{job_id\} duration_ms=1\.5", line), line  # fmt: skip
    # the route said by the path is not repeated; a value with a space is quoted
    assert (
        TextFormatter()
        .format(access("/metrics", "/metrics"))
        .endswith("fairmatch.access: GET /metrics 200 duration_ms=1.5")
    )
    assert (
        TextFormatter().format(record("match", site="LCG A")).endswith('DEBUG   fairmatch.matching: match site="LCG A"')
    )


def test_neither_format_carries_terminal_control_codes():
    """uvicorn adds a coloured copy of its message (color_message); a request's path may hold escapes."""
    coloured = record("Uvicorn running on http://127.0.0.1:8000", color_message="Uvicorn running on \x1b[1m%s\x1b[0m")
    assert "color_message" not in json.loads(JsonFormatter().format(coloured))
    assert "\x1b" not in TextFormatter().format(coloured) and "color_message" not in TextFormatter().format(coloured)
    line = TextFormatter().format(access("/x\x1b[31mred\r", "unmatched"))
    assert "\x1b" not in line and "\r" not in line
    assert "GET /x\\x1b[31mred\\x0d 200" in line
    assert json.loads(JsonFormatter().format(access("/x\x1b[31m", "unmatched")))["path"] == "/x\x1b[31m"


class Stream(io.StringIO):
    def __init__(self, tty: bool) -> None:
        super().__init__()
        self.tty = tty

    def isatty(self) -> bool:
        return self.tty


@pytest.mark.parametrize(
    ("setting", "tty", "chosen"),
    [("auto", True, "text"), ("auto", False, "json"), ("json", True, "json"), ("text", False, "text")],
)
def test_auto_is_text_on_a_terminal_and_json_elsewhere(setting, tty, chosen):
    assert resolved_format(setting, Stream(tty)) == chosen


@pytest.mark.parametrize(
    ("header", "kept"),
    [(b"pilot-42.req:7", True), (b"x" * 64, True), (b"x" * 65, False), (b"bad id", False), (b"\xff", False)],
)
def test_only_sane_request_ids_are_taken(header, kept):
    rid = _request_id({"headers": [(b"x-request-id", header)]})
    assert (rid == header.decode(errors="replace")) is kept
    assert len(rid) <= 64


def test_target_shares_are_normalised_over_active_groups():
    shares = target_shares({"a": 3000, "b": 1000, "idle": 5000}, {"a", "b", "unknown"})
    assert shares == pytest.approx({"a": 0.6, "b": 0.2, "unknown": 0.2})
    assert target_shares({"a": 0}, {"a"}) == {"a": 0.0}


def test_corrections_come_from_the_last_run_report():
    report = {"corrections": {"groups": {"group": None, "entities": {"lhcb_mc": {"correction": 1.5}}}}}
    assert corrections_of(report) == {("groups", "lhcb_mc"): 1.5}
    assert corrections_of(None) == {} and corrections_of({"corrections": {}}) == {}


def test_gauges_exposition_without_the_database():
    gauges = DatabaseGauges(5)
    assert b"fairmatch_database_up 0.0" in gauges.exposition()
    gauges.snapshot = Snapshot(group_jobs={("g", "Waiting"): 4, ("h", "Matched"): 1}, task_queues=2, database_up=True)
    text = gauges.exposition().decode()
    assert 'fairmatch_group_jobs{owner_group="g",status="Waiting"} 4.0' in text
    # every group has all three statuses, zeros included
    assert 'fairmatch_group_jobs{owner_group="g",status="Matched"} 0.0' in text
    assert 'fairmatch_group_jobs{owner_group="g",status="Running"} 0.0' in text
    assert 'fairmatch_group_jobs{owner_group="h",status="Waiting"} 0.0' in text
    assert 'fairmatch_group_jobs{owner_group="h",status="Matched"} 1.0' in text
    assert "fairmatch_task_queues 2.0" in text


def test_route_templates_keep_the_prefix_and_hide_ids():
    from fairmatch.api.jobs import router

    job = next(r for r in router.routes if r.path == "/jobs/{job_id}")
    assert _route_template({"path": "/api/v1/jobs/5", "route": job}) == "/api/v1/jobs/{job_id}"
    assert _route_template({"path": "/nowhere"}) == "unmatched"


def test_json_lines_hold_what_json_dumps_would_have_written():
    """Fields of any type: dates and dataclasses as their str(), non-string keys as strings,
    integers beyond 64 bits too (through the standard library's encoder)."""

    @dataclasses.dataclass
    class Decision:
        tq: int

    fields = {
        "when": datetime(2026, 3, 28, 12, 0, tzinfo=UTC),
        "decision": Decision(7),
        "counts": {1: 2},
        "note": "é ✓",
        "cpu": 1.5,
        "huge": 2**70,
    }
    for huge in (2**70, 5):
        fields["huge"] = huge
        entry = json.loads(JsonFormatter().format(record("fields", **fields)))
        expected = json.loads(json.dumps(fields, default=str, ensure_ascii=False))
        assert {key: entry[key] for key in fields} == expected
