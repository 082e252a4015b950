"""The report paths agree: the same reports, at the same instants, leave the same jobs, events
and charges on SQLite (the transaction's path), on PostgreSQL (its one statement) and on
PostgreSQL with the transaction's path alone."""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import select, text

from fairmatch.clock import as_utc
from fairmatch.db.engine import create_engine, read_transaction
from fairmatch.db.jobs import JobDB, PostgresJobDB
from fairmatch.db.tables import job_events, usage_charges
from fairmatch.errors import Conflict, InvalidInput
from fairmatch.jobs.models import JobSpec, StatusUpdate
from fairmatch.services import jobs, submission
from fairmatch.settings import Settings
from tests.conftest import BACKENDS
from tests.db.conftest import clone

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.skipif(set(BACKENDS) != {"sqlite", "postgresql"}, reason="compares SQLite with PostgreSQL"),
]

T0 = datetime(2026, 11, 28, 4, tzinfo=UTC)
PEOPLE = [("alice", "theory", None), ("bob", "theory", "physics"), ("carol", "chem", None), ("dave", "chem", None)]
# (job, report); each report one second after the one before
REPORTS: list[tuple[int, StatusUpdate]] = [
    (0, StatusUpdate(status="Running")),
    (0, StatusUpdate(status="Running", minor_status="Step 1", cpu_seconds=5.0)),
    (0, StatusUpdate(status="Running")),  # a heartbeat keeps the minor status
    (1, StatusUpdate(status="Failed", minor_status="Cannot start", cpu_seconds=1.0)),
    (2, StatusUpdate(status="Running", cpu_seconds=4.0, wall_seconds=5.0)),
    (2, StatusUpdate(status="Stalled")),
    (0, StatusUpdate(status="Done", cpu_seconds=10.0, wall_seconds=20.0)),
    (2, StatusUpdate(status="Running", minor_status="Back")),
    (2, StatusUpdate(status="Done")),  # charged the CPU seconds stored before
    (3, StatusUpdate(status="Done", cpu_seconds=1.0)),  # refused: Matched
    (3, StatusUpdate(status="Running", wall_seconds=10.0**8)),  # refused: beyond the time since the match
    (3, StatusUpdate(status="Running", cpu_seconds=2.0)),
    (3, StatusUpdate(status="Failed", cpu_seconds=3.0)),
    (0, StatusUpdate(status="Running")),  # refused: Done
]


def _plain(row: Any) -> tuple:
    return tuple(as_utc(value) if isinstance(value, datetime) else value for value in row)


async def _run_reports(url: str, python_path_only: bool, monkeypatch) -> dict[str, Any]:
    clock = itertools.count()
    monkeypatch.setattr("fairmatch.services.submission.utcnow", lambda: T0)
    monkeypatch.setattr("fairmatch.services.jobs.utcnow", lambda: T0 + timedelta(seconds=next(clock)))
    if python_path_only:
        monkeypatch.setattr(PostgresJobDB, "report", JobDB.report)
    settings = Settings(database_url=url)
    engine = create_engine(url, pool_size=2)
    try:
        async with engine.connect() as conn:
            specs = [JobSpec(owner=o, owner_group=g, account=a, priority_class=0) for o, g, a in PEOPLE]
            ids = [q["job_id"] for q in await submission.submit(conn, specs, settings, by="alice")]
            async with conn.begin():  # as a claim leaves them, a minute before the reports
                await conn.execute(text("DELETE FROM tq_jobs"))
                await conn.execute(
                    text("UPDATE jobs SET status = 'Matched', matched_by = 'p1', site = 'S', matched_at = :at, "
                         "lease_expires_at = :lease"),
                    {"at": T0 - timedelta(minutes=1), "lease": T0 + timedelta(minutes=10)},
                )  # fmt: skip
            answers = []
            for job, update in REPORTS:
                try:
                    answers.append((await jobs.report_status(conn, ids[job], update, settings, by="p1")).model_dump())
                except (Conflict, InvalidInput) as refused:
                    answers.append(type(refused).__name__)
            async with read_transaction(conn):
                e, c = job_events.c, usage_charges.c
                events = await conn.execute(
                    select(e.job_id, e.status, e.minor_status, e.at, e.source, e.by).order_by(e.id)
                )
                charges = await conn.execute(
                    select(c.charged_at, c.job_id, c.vo, c.owner_group, c.owner, c.account, c.charge).order_by(c.id)
                )
                found = {"events": [_plain(r) for r in events], "charges": [_plain(r) for r in charges]}
            found["jobs"] = [(await jobs.get(conn, job_id)).model_dump() for job_id in ids]
            found["answers"] = answers
            return found
    finally:
        await engine.dispose()


@pytest.fixture
def databases(templates, tmp_path, monkeypatch) -> Iterator[dict[tuple[str, bool], str]]:
    """A fresh database per report path: (backend, the transaction's path alone) -> its URL."""
    for name in [n for n in os.environ if n.startswith("FAIRMATCH_")]:
        monkeypatch.delenv(name)
    empty = tmp_path / "empty.toml"
    empty.write_text("")
    monkeypatch.setenv("FAIRMATCH_CONFIG", str(empty))
    paths = [("sqlite", False), ("postgresql", False), ("postgresql", True)]
    made = {path: clone(templates[path[0]], tmp_path) for path in paths}
    try:
        yield {path: db.url for path, (db, _) in made.items()}
    finally:
        for _, remove in made.values():
            remove()


async def test_every_report_path_leaves_the_same_jobs_events_and_charges(databases, monkeypatch):
    results = {}
    for (backend, python_path_only), url in databases.items():
        with monkeypatch.context() as patched:
            results[(backend, python_path_only)] = await _run_reports(url, python_path_only, patched)
    sqlite = results[("sqlite", False)]
    assert results[("postgresql", False)] == sqlite
    assert results[("postgresql", True)] == sqlite
    # what the sequence states, so that agreeing on nothing would not pass
    assert [a if isinstance(a, str) else a["status"] for a in sqlite["answers"]] == [
        "Running", "Running", "Running", "Failed", "Running", "Stalled", "Done", "Running", "Done",
        "Conflict", "InvalidInput", "Running", "Failed", "Conflict",
    ]  # fmt: skip
    weight = Settings().accounting.cpu_weight
    assert [(c[1], c[5], c[6]) for c in sqlite["charges"]] == [
        (2, "physics", 1.0 * weight), (1, "theory", 10.0 * weight), (3, "chem", 4.0 * weight),
        (4, "chem", 3.0 * weight),
    ]  # fmt: skip
    assert sqlite["jobs"][0]["minor_status"] is None  # Done states none
    assert len(sqlite["events"]) == len(PEOPLE) + 9  # submitted, then every change of status
