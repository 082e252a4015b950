"""How late usage follows its charges, over real HTTP on both backends.

A Done report only logs its charge; the server's priority loop folds the log
into the totals every `priority.interval_seconds`, so what sshare and the
policies see lags a charge by at most one interval (plus the fold's own
milliseconds). A charge logged by a server that dies before folding it is
folded by the next server, exactly once.
"""

from __future__ import annotations

import time

import httpx
import pytest
import sqlalchemy as sa

from fairmatch.db.tables import usage_charges
from tests.conftest import migrated_database, servers_on
from tests.e2e.test_usage_accounting import import_tree, run_job

INTERVAL = 2.0
SLACK = 1.0  # a loaded test machine's scheduling delay, not part of the bound


def charge_lags(db) -> list[tuple[float, float | None]]:
    """(seconds from charge to fold or None while pending, charge) per logged charge."""
    c = usage_charges.c
    engine = db.engine()
    with engine.connect() as conn:
        rows = conn.execute(sa.select(c.charged_at, c.folded_at, c.charge).order_by(c.id)).all()
    engine.dispose()
    return [(None if folded is None else (folded - at).total_seconds(), charge) for at, folded, charge in rows]


def raw_usage(client: httpx.Client, node: tuple[str, str | None]) -> float:
    rows = client.get("/associations/usage").json()["associations"]
    return next(r["raw_usage"] for r in rows if (r["account"], r["user"]) == node)


def test_usage_follows_every_charge_within_one_priority_interval(server_factory, clean):
    srv = server_factory(PRIORITY__INTERVAL_SECONDS=str(INTERVAL))
    with srv.client() as client:
        import_tree(client)
        for n in range(4):  # charges spread over two intervals, each landing anywhere in one
            run_job(client, "alice", "theory", cpu_seconds=10.0)
            reported = time.monotonic()
            while raw_usage(client, ("theory", "alice")) < 10.0 * (n + 1) * 0.999:
                assert time.monotonic() - reported <= INTERVAL + SLACK, "usage lagged more than an interval"
                time.sleep(0.05)
            time.sleep(0.3 * n)
        assert raw_usage(client, ("root", None)) == pytest.approx(40.0, rel=1e-3)
    lags = charge_lags(clean)
    assert len(lags) == 4 and all(lag is not None and 0 <= lag <= INTERVAL + SLACK for lag, _ in lags), lags


@pytest.fixture
def own_database(database, tmp_path):
    """A database no other server folds in: only the servers of the test touch it."""
    db, remove = migrated_database(database.backend, tmp_path)
    yield db
    remove()


@pytest.fixture
def own_servers(own_database, tmp_path):
    yield from servers_on(own_database, tmp_path)


def test_a_charge_the_server_died_with_is_folded_once_by_the_next(own_servers, own_database):
    clean = own_database
    first = own_servers(PRIORITY__INTERVAL_SECONDS="3600")
    with first.client() as client:
        import_tree(client)
        time.sleep(1.5)  # the loop's first run (a second after the start) is behind us
        run_job(client, "alice", "theory", cpu_seconds=25.0)
    first.process.kill()  # SIGKILL: no shutdown work
    first.process.wait()
    assert charge_lags(clean) == [(None, 25.0)]  # logged with the report, not folded
    second = own_servers(PRIORITY__INTERVAL_SECONDS="3600")  # its first run folds
    deadline = time.monotonic() + 10
    while charge_lags(clean)[0][0] is None:
        assert time.monotonic() < deadline, second.log()
        time.sleep(0.1)
    with second.client() as client:
        assert raw_usage(client, ("theory", "alice")) == pytest.approx(25.0, rel=1e-3)
        assert raw_usage(client, ("physics", None)) == pytest.approx(25.0, rel=1e-3)
