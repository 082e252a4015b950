"""Input documents of the client commands: jobs and site limits as JSON or TOML files, or stdin."""

from __future__ import annotations

import datetime as dt
import json
import sys
import tomllib
from pathlib import Path
from typing import Any

from fairmatch.cli.common import EXIT_USAGE, fail


def read_document(file: str) -> tuple[Any, str]:
    """The parsed document of FILE (.json or .toml; `-` is JSON on stdin) and the name to report."""
    name = "stdin" if file == "-" else file
    text, kind = read_text(file)
    return parse_document(text, kind, name), name


def read_text(file: str) -> tuple[str, str]:
    if file == "-":
        return sys.stdin.read(), "json"
    path = Path(file)
    kind = path.suffix.lower().lstrip(".")
    if kind not in ("json", "toml"):
        fail(f"{file}: the file name must end in .json or .toml (or use - for JSON on stdin)", EXIT_USAGE)
    try:
        return path.read_text(encoding="utf-8"), kind
    except OSError as exc:
        fail(f"cannot read {file}: {exc.strerror or exc}", EXIT_USAGE)
    except UnicodeDecodeError as exc:
        fail(f"{file} is not UTF-8 text: {exc.reason} at byte {exc.start}", EXIT_USAGE)


def parse_document(text: str, kind: str, name: str) -> Any:
    try:
        if kind == "toml":
            # TOML dates and times have no JSON form: send them as ISO 8601 strings
            return json.loads(json.dumps(tomllib.loads(text), default=iso_format))
        return json.loads(text)
    except tomllib.TOMLDecodeError as exc:
        fail(f"{name} is not valid TOML: {exc}", EXIT_USAGE)
    except json.JSONDecodeError as exc:
        fail(f"{name} is not valid JSON: {exc}", EXIT_USAGE)


def iso_format(value: Any) -> str:
    if isinstance(value, (dt.date, dt.time)):  # datetime is a date
        return value.isoformat()
    raise TypeError(f"{type(value).__name__} has no JSON form")


def object_list(document: Any, key: str, name: str) -> list[dict]:
    """The non-empty list of objects in `document`: the list itself, or {key: [...]} ([[key]] in TOML)."""
    if isinstance(document, dict):
        if set(document) != {key}:
            found = ", ".join(sorted(document)) or "nothing"
            fail(f"{name}: expected only a '{key}' list (or [[{key}]] tables), found: {found}", EXIT_USAGE)
        document = document[key]
    if not isinstance(document, list):
        fail(f"{name}: expected a list of {key}, found {type(document).__name__}", EXIT_USAGE)
    for number, item in enumerate(document, start=1):
        if not isinstance(item, dict):
            fail(f"{name}: {key[:-1]} {number} is a {type(item).__name__}, not an object", EXIT_USAGE)
    return document


def load_jobs(file: str) -> list[dict]:
    document, name = read_document(file)
    jobs = object_list(document, "jobs", name)
    if not jobs:
        fail(f"{name} contains no jobs", EXIT_USAGE)
    return jobs
