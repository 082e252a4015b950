"""The few statements whose SQL differs between PostgreSQL and SQLite."""

from __future__ import annotations

from sqlalchemy import Table
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncConnection


def insert_ignoring_conflicts(conn: AsyncConnection, table: Table, *index_elements: str):
    """INSERT … ON CONFLICT (index_elements) DO NOTHING, on either backend."""
    module = postgresql if conn.dialect.name == "postgresql" else sqlite
    return module.insert(table).on_conflict_do_nothing(index_elements=list(index_elements))


def is_postgresql(conn: AsyncConnection) -> bool:
    return conn.dialect.name == "postgresql"
