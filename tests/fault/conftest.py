"""Fault tests: a PostgreSQL cluster of the test's own, stopped and restarted at will."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from fairmatch.db import migrate
from tests.conftest import TestDatabase
from tests.fault.cluster import ClusterUnavailable, PgCluster


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "fault: kills servers and restarts a PostgreSQL cluster the test owns")


@pytest.fixture
def pg_cluster() -> Iterator[PgCluster]:
    """A started throwaway cluster on a free loopback port; always stopped and removed."""
    try:
        cluster = PgCluster()
    except ClusterUnavailable as exc:
        pytest.skip(f"no throwaway PostgreSQL cluster possible: {exc}")
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.destroy()


@pytest.fixture
def cluster_db(pg_cluster: PgCluster) -> TestDatabase:
    """A migrated fairmatch database in the throwaway cluster."""
    url = pg_cluster.create_database("fairmatch")
    migrate.upgrade(url)
    return TestDatabase("postgresql", url, url.replace("postgresql://", "postgresql+psycopg://"))
