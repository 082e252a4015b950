"""The database server's settings that break what fairmatch promises: read as fairmatch's own
sessions see them, named at start-up and in the status overview."""

from __future__ import annotations

import logging

import psycopg
import pytest

from fairmatch.db.server_settings import DANGERS, dangers
from fairmatch.matching.settings import MatchingSettings
from fairmatch.services import status
from fairmatch.services.startup import prepare_database

pytestmark = pytest.mark.anyio


def test_each_dangerous_value_is_named_with_its_cost_and_safe_ones_are_not():
    found = dangers({"autovacuum": "off", "fsync": "on", "synchronous_commit": "off"})
    assert [w["setting"] for w in found] == ["autovacuum", "synchronous_commit"]
    assert all(w["value"] == "off" and w["cost"] == DANGERS[w["setting"]][1] for w in found)
    assert dangers({"autovacuum": "on", "fsync": "on", "synchronous_commit": "local"}) == []
    assert dangers({}) == []


async def test_sqlite_has_none_of_these_settings(engine, cloned):
    if cloned.backend != "sqlite":
        pytest.skip("the SQLite case")
    async with engine.connect() as conn:
        assert await status.database_warnings(conn) == []


@pytest.mark.parametrize("template", ["postgresql"], indirect=True)
async def test_a_database_with_synchronous_commit_off_is_named_at_start_and_in_the_status(
    engine, settings, cloned, caplog
):
    name = cloned.url.rsplit("/", 1)[1]
    with psycopg.connect(cloned.url, autocommit=True) as admin:
        admin.execute(f'ALTER DATABASE "{name}" SET synchronous_commit = off')
        autovacuum = admin.execute("SHOW autovacuum").fetchone()[0]
    with caplog.at_level(logging.WARNING, logger="fairmatch.startup"):
        await prepare_database(engine, settings)
    async with engine.connect() as conn:
        warnings = await status.database_warnings(conn)
        overview = await status.summary(conn, 5, MatchingSettings())
    expected = ["synchronous_commit"] if autovacuum == "on" else ["autovacuum", "synchronous_commit"]
    assert [w["setting"] for w in warnings] == expected  # this server's own autovacuum, as it stands
    assert overview["database_warnings"] == warnings
    logged = [r.getMessage() for r in caplog.records if r.name == "fairmatch.startup"]
    assert any(m.startswith("PostgreSQL runs with synchronous_commit = off: a claim answered") for m in logged)
    assert len(logged) == len(expected)
