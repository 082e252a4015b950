"""Data-layer tests in process: a migrated template database per backend, cloned per test.

The template is migrated once per session; each test gets its own copy
(PostgreSQL: CREATE DATABASE … TEMPLATE, SQLite: a file copy), so tests are
isolated without emptying tables and without a server.
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from fairmatch.db.engine import create_engine
from fairmatch.settings import Settings
from tests.conftest import BACKENDS, PG_ADMIN_URL, PerBackend, TestDatabase, migrated_database, pg_url
from tests.db.world import World


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="session")
def templates(tmp_path_factory) -> Iterator[PerBackend]:
    """Per backend, a database migrated to head; never used directly, only cloned."""

    cache = PerBackend(lambda backend: migrated_database(backend, tmp_path_factory.mktemp(f"template-{backend}")))
    try:
        yield cache
    finally:
        cache.close()


@pytest.fixture(params=BACKENDS)
def template(request, templates) -> TestDatabase:
    """The migrated template of this test's backend."""
    return templates[request.param]


def clone(template: TestDatabase, directory: Path) -> tuple[TestDatabase, Callable[[], None]]:
    """A fresh copy of the template and the function that removes it."""
    if template.backend == "sqlite":
        path = directory / f"clone-{uuid.uuid4().hex[:8]}.db"
        shutil.copyfile(template.url.removeprefix("sqlite:///"), path)
        return TestDatabase("sqlite", f"sqlite:///{path}", f"sqlite:///{path}"), lambda: None
    source = template.url.rsplit("/", 1)[1]
    name = f"fairmatch_clone_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}" TEMPLATE "{source}"')

    def drop() -> None:
        with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    url = pg_url(name)
    return TestDatabase("postgresql", url, url.replace("postgresql://", "postgresql+psycopg://")), drop


@pytest.fixture
def cloned(template, tmp_path) -> Iterator[TestDatabase]:
    """This test's own database, at the schema's head and empty."""
    db, remove = clone(template, tmp_path)
    try:
        yield db
    finally:
        remove()


@pytest.fixture
def settings(cloned, tmp_path, monkeypatch) -> Settings:
    """Default settings on the clone: no config file, no FAIRMATCH_* environment."""
    for name in [n for n in os.environ if n.startswith("FAIRMATCH_")]:
        monkeypatch.delenv(name)
    empty = tmp_path / "empty.toml"
    empty.write_text("")
    monkeypatch.setenv("FAIRMATCH_CONFIG", str(empty))
    return Settings(database_url=cloned.url)


@pytest.fixture
async def engine(settings) -> AsyncIterator:
    """The service's own engine on the clone."""
    engine = create_engine(settings.database_url, pool_size=8)
    try:
        yield engine
    finally:
        await engine.dispose()


SEED = 20_240_611  # the worlds' lottery


@pytest.fixture
async def world_of(settings) -> AsyncIterator[Callable[..., Any]]:
    """Makes a World on the clone, with these settings changed (e.g. matching={"lottery": "dirac"})."""
    opened = []

    async def make(**changes: Any) -> World:
        changed = Settings(**{**settings.model_dump(exclude_unset=True), **changes})
        engine = create_engine(changed.database_url, pool_size=2)
        conn = await engine.connect()
        opened.append((engine, conn))
        return World(conn, changed, SEED)

    yield make
    for engine, conn in opened:
        await conn.close()
        await engine.dispose()
