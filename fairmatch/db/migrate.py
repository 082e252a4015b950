"""Alembic, driven from code: `fairmatch db upgrade` and the schema check at start-up."""

from __future__ import annotations

import asyncio
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy.ext.asyncio import AsyncConnection

import fairmatch


def migrations_dir() -> Path:
    """`fairmatch/migrations`, in a source checkout and in the installed wheel alike."""
    path = Path(fairmatch.__file__).resolve().parent / "migrations"
    if not (path / "env.py").is_file():
        raise FileNotFoundError(f"the migrations directory {path} is missing from this installation")
    return path


def alembic_config(database_url: str, *, prepared_statements: bool = True) -> Config:
    config = Config()
    config.set_main_option("script_location", str(migrations_dir()))
    # '%' would be read as interpolation by configparser
    config.set_main_option("sqlalchemy.url", database_url.replace("%", "%%"))
    # read by migrations/env.py when it creates its engine (False behind PgBouncer in transaction mode)
    config.attributes["prepared_statements"] = prepared_statements
    return config


def upgrade(database_url: str, revision: str = "head", *, prepared_statements: bool = True) -> None:
    command.upgrade(alembic_config(database_url, prepared_statements=prepared_statements), revision)


def downgrade(database_url: str, revision: str = "base") -> None:
    command.downgrade(alembic_config(database_url), revision)


def head_revision(database_url: str) -> str | None:
    return ScriptDirectory.from_config(alembic_config(database_url)).get_current_head()


async def current_revision(conn: AsyncConnection) -> str | None:
    return await conn.run_sync(lambda sync: MigrationContext.configure(sync).get_current_revision())


def database_revision(database_url: str, *, prepared_statements: bool = True) -> str | None:
    """The database's schema revision (None before any migration), read on a connection of its own."""
    from fairmatch.db.engine import create_engine

    async def read() -> str | None:
        engine = create_engine(database_url, pool_size=1, prepared_statements=prepared_statements)
        try:
            async with engine.connect() as conn:
                return await current_revision(conn)
        finally:
            await engine.dispose()

    return asyncio.run(read())
