"""Which database errors are an outage (503 + Retry-After) and which are a bug (500).

The outage test only meets the errors a stopped PostgreSQL happens to raise;
this one pins every kind an outage can surface as, through the real handlers.
"""

from __future__ import annotations

import asyncio

import httpx
import psycopg
import pytest
from fastapi import FastAPI
from sqlalchemy.exc import (
    DataError,
    DBAPIError,
    IntegrityError,
    InterfaceError,
    InternalError,
    OperationalError,
)
from sqlalchemy.exc import TimeoutError as PoolTimeout

from fairmatch.api import problems

pytestmark = pytest.mark.fault


def _wrapped(cls: type[DBAPIError], orig: Exception, **kwargs) -> DBAPIError:
    return cls("COMMIT", {}, orig, **kwargs)


OUTAGES = {
    "refused": _wrapped(OperationalError, psycopg.OperationalError("connection refused")),
    "closed": _wrapped(InterfaceError, psycopg.InterfaceError("the connection is closed")),
    "invalidated": _wrapped(DBAPIError, psycopg.Error("server closed the connection"), connection_invalidated=True),
    "pool": PoolTimeout("QueuePool limit of size 10 overflow 10 reached"),
    # a standby (or a demoted primary) refusing a write, as psycopg and SQLAlchemy raise it
    "read-only": _wrapped(
        InternalError, psycopg.errors.ReadOnlySqlTransaction("cannot execute UPDATE in a read-only transaction")
    ),
}
BUGS = {
    "integrity": _wrapped(IntegrityError, psycopg.IntegrityError("duplicate key")),
    "other-driver-error": _wrapped(DBAPIError, psycopg.Error("something else")),
}


def app_raising() -> FastAPI:
    """An app with the service's problem handlers whose one route raises the named error."""
    app = FastAPI()
    problems.install(app)

    @app.get("/raise/{name}")
    async def raise_(name: str) -> None:
        raise {**OUTAGES, **BUGS}.get(name) or _wrapped(DataError, psycopg.DataError("out of range"))

    return app


def get(path: str) -> httpx.Response:
    async def call() -> httpx.Response:
        transport = httpx.ASGITransport(app=app_raising(), raise_app_exceptions=False)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            return await client.get(path)

    return asyncio.run(call())


@pytest.mark.parametrize("name", OUTAGES)
def test_outage_is_503_with_retry_after(name: str) -> None:
    response = get(f"/raise/{name}")
    assert response.status_code == 503, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    assert int(response.headers["retry-after"]) > 0
    assert response.json()["type"] == "urn:fairmatch:problem:database-unavailable"
    assert "COMMIT" not in response.text  # no SQL echoed


@pytest.mark.parametrize("name", BUGS)
def test_other_database_errors_stay_500(name: str) -> None:
    response = get(f"/raise/{name}")
    assert response.status_code == 500, response.text
    assert "retry-after" not in response.headers
    assert response.json()["type"] == "urn:fairmatch:problem:internal"


def test_refused_value_stays_422() -> None:
    assert get("/raise/data").status_code == 422
