"""A write refused as read-only (SQLSTATE 25006: a standby, or a primary demoted under an
open connection) is an outage, answered 503, and the connection that met it is dropped, so
that the next one is opened afresh and reaches the primary (PostgreSQL).

The clone's sessions are made read-only as a standby's are (`default_transaction_read_only`,
read when a session starts): a connection kept in the pool would go on failing after the
database accepts writes again; a replaced one does not.
"""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest
from sqlalchemy import insert

from fairmatch.db.batches import Batches
from fairmatch.db.tables import groups
from fairmatch.errors import DatabaseUnavailable
from tests.conftest import PG_ADMIN_URL

pytestmark = [pytest.mark.anyio, pytest.mark.parametrize("template", ["postgresql"], indirect=True)]

A_GROUP = {"job_share": 1.0, "job_sharing": False, "properties": [], "allow_background_tqs": False, "priority": 0}


@pytest.fixture
def standby_like(cloned) -> Iterator[None]:
    """New sessions of the clone are read-only until the test's end (or `accept_writes`)."""
    set_read_only(cloned.url, True)
    try:
        yield
    finally:
        set_read_only(cloned.url, False)


def set_read_only(url: str, read_only: bool) -> None:
    dbname = url.rsplit("/", 1)[1]
    setting = "SET default_transaction_read_only = on" if read_only else "RESET default_transaction_read_only"
    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as admin:
        admin.execute(f'ALTER DATABASE "{dbname}" {setting}')


async def backend_pid(conn) -> int:
    """The server process of the connection, read without a statement (which would begin a transaction)."""
    return (await conn.get_raw_connection()).driver_connection.info.backend_pid


async def test_a_write_refused_as_read_only_is_unavailable_and_drops_its_connection(engine, cloned, standby_like):
    async with engine.connect() as conn:
        refused_on = await backend_pid(conn)
        with pytest.raises(DatabaseUnavailable) as refused:
            async with conn.begin():
                await conn.execute(insert(groups).values(name="g1", **A_GROUP))
        assert "read-only transaction" in refused.value.cause
        assert conn.invalidated
    set_read_only(cloned.url, False)  # the "new primary": sessions opened from now on may write
    async with engine.begin() as conn:
        assert await backend_pid(conn) != refused_on
        await conn.execute(insert(groups).values(name="g2", **A_GROUP))


async def test_a_claim_path_write_refused_as_read_only_drops_its_connection(engine, cloned, standby_like):
    """The hot paths' statements on the driver's own connection (fairmatch/db/batches.py) alike."""
    statement = (
        "INSERT INTO groups (name, job_share, job_sharing, properties, allow_background_tqs, priority)"
        " VALUES (%(name)s, 1.0, false, '[]', false, 0) RETURNING name"
    )
    async with engine.connect() as conn:
        refused_on = await backend_pid(conn)
        with pytest.raises(DatabaseUnavailable) as refused:
            await Batches().run(conn, statement, {"name": "g1"})
        assert "read-only transaction" in refused.value.cause
        assert conn.invalidated
    set_read_only(cloned.url, False)
    async with engine.connect() as conn:
        assert await backend_pid(conn) != refused_on
        row = await Batches().run(conn, statement, {"name": "g2"})
        assert row is not None and row.name == "g2"
