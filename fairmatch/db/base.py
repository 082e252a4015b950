"""What every data-access class shares: one connection, and the backend chosen once.

Each area of the schema has one class that alone builds its SQL (`TaskQueueDB`,
`JobDB`, ...). Where PostgreSQL and SQLite need different SQL, the area's
class has one subclass per backend, declared with `dialect=...`; `Area.of(conn)`
picks it from the connection, so no method ever asks which backend it runs on.
The backend mixins below hold the few statements every area words differently.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from datetime import datetime
from functools import cache
from operator import attrgetter
from types import ModuleType
from typing import TYPE_CHECKING, Any, ClassVar, Self, TypeVar, get_args

from pydantic import BaseModel
from sqlalchemy import ColumnElement, DateTime, Insert, Select, Table, column, func, literal, select, text
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncConnection

from fairmatch.clock import as_utc, utcnow

CHUNK = 1000  # rows per multi-row statement: well under every driver's parameter limit


Model = TypeVar("Model", bound=BaseModel)


def model_of(model: type[Model], row: Any, **given: Any) -> Model:
    """`model` made of a row (SQLAlchemy's, or a hot path's `raw.Row`): each field not `given`
    is the column of its name, a time in UTC (SQLite's come back naive)."""
    names, read, times = _reader(model, tuple(given))
    values = dict(zip(names, read(row)), **given)
    for name in times:
        values[name] = as_utc(values[name])
    return model.model_validate(values)


@cache
def _reader(
    model: type[BaseModel], given: tuple[str, ...]
) -> tuple[tuple[str, ...], Callable[[Any], tuple], tuple[str, ...]]:
    """The columns a row gives `model` besides `given`, one getter of them all (every job
    answer reads some forty), and those that hold times."""
    names = tuple(name for name in model.model_fields if name not in given)
    times = tuple(
        name
        for name in names
        if datetime in (model.model_fields[name].annotation, *get_args(model.model_fields[name].annotation))
    )
    if len(names) > 1:
        return names, attrgetter(*names), times
    return names, lambda row: tuple(getattr(row, name) for name in names), times  # attrgetter of one answers no tuple


def chunks(items: Sequence[Any], size: int = CHUNK) -> Iterable[Sequence[Any]]:
    """`items` in slices of at most `size`."""
    for start in range(0, len(items), size):
        yield items[start : start + size]


class AreaDB:
    """Base of the data-access classes: the SQL of one area on one connection.

    Transactions are the caller's (a service): methods run inside whatever
    transaction is open unless their docstring says they open their own.
    """

    _backends: ClassVar[dict[str, type]]

    def __init_subclass__(cls, dialect: str | None = None, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if dialect is None:
            cls._backends = {}  # an area's own class: its backends register below it
        else:
            cls._backends[dialect] = cls

    def __init__(self, conn: AsyncConnection) -> None:
        self.conn = conn

    if TYPE_CHECKING:
        # The backend-worded statements, which each backend's class takes from its mixin below.
        insert_module: ModuleType

        def insert_ignoring_conflicts(self, table: Table, *index_elements: str) -> Insert: ...
        def change_time(self) -> ColumnElement[datetime]: ...
        async def database_now(self) -> datetime: ...
        async def try_leader_lock(self, key: int) -> bool: ...
        async def leader_lock(self, key: int) -> None: ...
        def tq_rows_locked(self, stmt: Select) -> Select: ...

    @classmethod
    def of(cls, conn: AsyncConnection) -> Self:
        """The area's class for the connection's backend."""
        return cls._backends[conn.dialect.name](conn)


class _Statements:
    conn: AsyncConnection
    insert_module: ModuleType = postgresql

    def insert_ignoring_conflicts(self, table: Table, *index_elements: str) -> Insert:
        """INSERT … ON CONFLICT (index_elements) DO NOTHING."""
        return self.insert_module.insert(table).on_conflict_do_nothing(index_elements=list(index_elements))


class PostgresStatements(_Statements):
    """The backend-worded statements on PostgreSQL."""

    def change_time(self) -> ColumnElement[datetime]:
        """When a row changes: PostgreSQL's clock, the one every replica compares with."""
        return func.clock_timestamp()

    async def database_now(self) -> datetime:
        """The clock `change_time` writes with."""
        return (await self.conn.execute(select(func.clock_timestamp()))).scalar_one()

    async def try_leader_lock(self, key: int) -> bool:
        """Take a transaction-scoped leader lock if free; False if another transaction holds it."""
        return bool((await self.conn.execute(text("SELECT pg_try_advisory_xact_lock(:key)"), {"key": key})).scalar())

    async def leader_lock(self, key: int) -> None:
        """Wait for a transaction-scoped leader lock."""
        await self.conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": key})

    def tq_rows_locked(self, stmt: Select) -> Select:
        """A read of task-queue rows that locks them for writing their levels (FOR NO KEY UPDATE),
        in id order: the order every writer of task queues locks them in, so none waits in a cycle."""
        return stmt.order_by(column("id")).with_for_update(key_share=True)


class SQLiteStatements(_Statements):
    """The same on SQLite: one machine's clock, and every writing transaction
    already holds the database write lock (BEGIN IMMEDIATE), so locks are no-ops."""

    insert_module = sqlite

    def change_time(self) -> ColumnElement[datetime]:
        return literal(utcnow(), DateTime(timezone=True))

    async def database_now(self) -> datetime:
        return utcnow()

    async def try_leader_lock(self, key: int) -> bool:
        return True

    async def leader_lock(self, key: int) -> None:
        return None

    def tq_rows_locked(self, stmt: Select) -> Select:
        return stmt
