"""Alembic environment: async engine, URL from the caller or from fairmatch settings."""

from __future__ import annotations

import asyncio

from alembic import context
from sqlalchemy.engine import Connection

from fairmatch.db.engine import create_engine
from fairmatch.db.tables import metadata

config = context.config


def _url() -> str:
    url = config.get_main_option("sqlalchemy.url")
    if url:
        return url
    from fairmatch.settings import get_settings

    return get_settings().database_url


def _prepared_statements() -> bool:
    """As the caller says (`migrate.upgrade`), else the `database.prepared_statements` setting."""
    if "prepared_statements" in config.attributes:
        return bool(config.attributes["prepared_statements"])
    if config.get_main_option("sqlalchemy.url"):
        return True
    from fairmatch.settings import get_settings

    return get_settings().database.prepared_statements


def _configure(connection: Connection | None = None, **kwargs) -> None:
    context.configure(
        connection=connection,
        target_metadata=metadata,
        render_as_batch=True,  # SQLite cannot ALTER most things in place
        compare_type=True,
        **kwargs,
    )


def run_migrations_offline() -> None:
    _configure(url=_url(), literal_binds=True)
    with context.begin_transaction():
        context.run_migrations()


def _run_sync(connection: Connection) -> None:
    if connection.dialect.name == "sqlite":
        # a batch migration drops and re-creates a table: with foreign keys on, the drop
        # would cascade into the rows that refer to it. The pragma works only outside a
        # transaction, so it goes to the driver before SQLAlchemy's BEGIN.
        cursor = connection.connection.cursor()
        cursor.execute("PRAGMA foreign_keys=OFF")
        cursor.close()
    _configure(connection)
    with context.begin_transaction():
        context.run_migrations()


async def run_migrations_online() -> None:
    engine = create_engine(_url(), pool_size=1, prepared_statements=_prepared_statements())
    try:
        async with engine.connect() as connection:
            await connection.run_sync(_run_sync)
            await connection.commit()
    finally:
        await engine.dispose()


if context.is_offline_mode():
    run_migrations_offline()
else:
    asyncio.run(run_migrations_online())
