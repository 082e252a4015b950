"""The few statements whose SQL differs between PostgreSQL and SQLite."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import ColumnElement, DateTime, Table, func, literal, select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncConnection

from app.clock import utcnow


def insert_ignoring_conflicts(conn: AsyncConnection, table: Table, *index_elements: str):
    """INSERT … ON CONFLICT (index_elements) DO NOTHING, on either backend."""
    module = postgresql if conn.dialect.name == "postgresql" else sqlite
    return module.insert(table).on_conflict_do_nothing(index_elements=list(index_elements))


def is_postgresql(conn: AsyncConnection) -> bool:
    return conn.dialect.name == "postgresql"


def change_time(conn: AsyncConnection) -> ColumnElement:
    """The time a row changes. PostgreSQL's clock, not the writer's: every replica
    compares it with that one clock. SQLite lives on one machine."""
    if is_postgresql(conn):
        return func.clock_timestamp()
    return literal(utcnow(), DateTime(timezone=True))


async def database_now(conn: AsyncConnection) -> datetime:
    """The clock `change_time` writes with."""
    if is_postgresql(conn):
        return (await conn.execute(select(func.clock_timestamp()))).scalar_one()
    return utcnow()
