"""The archive of purged jobs: gzipped JSON Lines, one file per UTC day of `finished_at`.

Each write appends one gzip member per file (gzip readers read concatenated
members as one stream), flushed and fsynced before the caller deletes the
jobs. A crash between the write and the delete's commit archives those jobs
again at the next purge: readers de-duplicate by `job.id`, never does a job
go unarchived.
"""

from __future__ import annotations

import fcntl
import gzip
import os
from collections import defaultdict
from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson

# datetimes as ISO 8601 in UTC with a Z; SQLite's naive ones are stored in UTC
_JSON_OPTIONS = orjson.OPT_NAIVE_UTC | orjson.OPT_UTC_Z


class ArchiveError(RuntimeError):
    """The archive could not be written: nothing may be deleted."""


def file_name(finished_at: datetime) -> str:
    day = finished_at.astimezone(UTC) if finished_at.tzinfo else finished_at
    return f"jobs-{day:%Y-%m-%d}.jsonl.gz"


def line(job: dict[str, Any], requirements: Any, payload: Any, events: list[dict[str, Any]]) -> bytes:
    """One archived job: its row, what it was submitted with, and its events in order."""
    record = {"job": job, "requirements": requirements, "payload": payload, "events": events}
    return orjson.dumps(record, option=_JSON_OPTIONS) + b"\n"


def check_writable(directory: Path) -> None:
    """Raise ArchiveError unless files can be created in `directory` (made if missing)."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ArchiveError(f"archive directory {directory} cannot be created: {exc.strerror}") from exc
    if not (directory.is_dir() and os.access(directory, os.W_OK | os.X_OK)):
        raise ArchiveError(f"archive directory {directory} is not a writable directory")


def append(directory: Path, lines: Iterable[tuple[datetime, bytes]]) -> int:
    """Append each (finished_at, line) to its day's file, durably; how many lines were written."""
    by_file: dict[str, list[bytes]] = defaultdict(list)
    for finished_at, text in lines:
        by_file[file_name(finished_at)].append(text)
    check_writable(directory)
    created = False
    for name, texts in sorted(by_file.items()):
        path = directory / name
        created |= not path.exists()
        try:
            _append_member(path, gzip.compress(b"".join(texts)))
        except OSError as exc:
            raise ArchiveError(f"archive file {path} cannot be written: {exc.strerror}") from exc
    if created:  # the new files' directory entries are as durable as their contents
        _fsync_directory(directory)
    return sum(len(texts) for texts in by_file.values())


def _append_member(path: Path, member: bytes) -> None:
    # the lock keeps two processes' members apart; O_APPEND puts each at the end
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        size = os.fstat(fd).st_size
        try:
            view = memoryview(member)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        except OSError:
            os.ftruncate(fd, size)  # a member cut short would hide every member after it
            raise
    finally:
        os.close(fd)


def _fsync_directory(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError as exc:
        raise ArchiveError(f"archive directory {directory} cannot be synced: {exc.strerror}") from exc
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
