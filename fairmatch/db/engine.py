"""Engine construction and the per-dialect details that matter for correctness."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import orjson
from psycopg.types.json import set_json_dumps
from sqlalchemy import event, text
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine

from fairmatch.db import errors, sqlite_driver
from fairmatch.errors import DatabaseUnavailable

APPLICATION_NAME = "fairmatch"

# Outages must turn into quick 503s, never into requests that hang: a
# connection attempt gives up after CONNECT_TIMEOUT, a request waiting for a
# pooled connection after POOL_TIMEOUT, and TCP keepalives notice a database
# host that vanished without closing its sockets.
CONNECT_TIMEOUT_SECONDS = 5
POOL_TIMEOUT_SECONDS = 10
POSTGRESQL_CONNECT_ARGS = {
    "application_name": APPLICATION_NAME,
    "connect_timeout": CONNECT_TIMEOUT_SECONDS,
    "keepalives": 1,
    "keepalives_idle": 30,
    "keepalives_interval": 10,
    "keepalives_count": 3,
}
SQLITE_BUSY_SECONDS = 30  # sqlite3.connect's timeout: how long a statement waits for the write lock

# orjson reads an integer past 64 bits as a float: a text with a run of 19 digits or more is
# read by the standard library, which keeps it exact. The run is found by mapping every
# digit to "9" and anything else to a space (C speed; a regular expression costs more than
# the standard library's whole decoding of a job's requirements).
_DIGITS_ONLY = bytes(b"9"[0] if chr(byte) in "0123456789" else b" "[0] for byte in range(256))
_LONG_RUN = b"9" * 19


def read_json(text: str | bytes) -> Any:
    """A JSON column's value: by orjson, which costs a fraction of the standard library's
    decoder on every job row a pilot's call reads; a text orjson would not read exactly
    (a very long integer, a number past a double's range) by the standard library."""
    if isinstance(text, str):
        data = text.encode()
    elif isinstance(text, bytes):
        data = text
    else:  # SQLite hands a number stored in a JSON column as that number: SQLAlchemy keeps it on a TypeError
        raise TypeError(f"JSON text is str or bytes, not {type(text).__name__}")
    if _LONG_RUN not in data.translate(_DIGITS_ONLY):
        try:
            return orjson.loads(data)
        except orjson.JSONDecodeError:
            pass
    return json.loads(data)


def parse_url(url: str) -> URL:
    """SQLAlchemy's URL of `url`, which may also be in libpq's multi-host form.

    A URL naming several PostgreSQL servers (a primary and its standbys) is
    written `postgresql://user@/db?host=h1:p1&host=h2:p2` for SQLAlchemy and
    `postgresql://user@h1:p1,h2:p2/db` for libpq and psycopg; SQLAlchemy
    cannot read the second, so it is rewritten into the first. psycopg then
    tries the hosts in order (with `target_session_attrs=read-write`, until
    one accepts writes).
    """
    scheme, separator, rest = url.partition("://")
    authority, _, tail = rest.partition("/")
    credentials, at, hosts = authority.rpartition("@")
    if separator and scheme.startswith("postgres") and "," in hosts:
        dbname, _, query = tail.partition("?")
        host_query = "&".join(f"host={host}" for host in hosts.split(",") if host)
        url = f"{scheme}://{credentials}{at}/{dbname}?{host_query}" + (f"&{query}" if query else "")
    return make_url(url)


def normalise_url(url: str) -> URL:
    """Give bare `postgresql://` and `sqlite://` URLs their async drivers."""
    parsed = parse_url(url)
    driver = parsed.drivername
    if driver in ("postgresql", "postgres", "postgresql+psycopg2", "postgresql+asyncpg"):
        parsed = parsed.set(drivername="postgresql+psycopg")
    elif driver in ("sqlite", "sqlite+pysqlite"):
        parsed = parsed.set(drivername="sqlite+aiosqlite")
    if parsed.drivername not in ("postgresql+psycopg", "sqlite+aiosqlite"):
        raise ValueError(f"unsupported database URL scheme {driver!r}: use postgresql://… or sqlite:///…")
    return parsed


def redacted_url(url: str) -> str:
    """The URL as it may be shown: its password replaced by ***."""
    try:
        return parse_url(url).render_as_string(hide_password=True)
    except (ArgumentError, ValueError):  # ValueError: a port that is not a number
        return "<unparsable URL>"


def is_sqlite(url: URL) -> bool:
    return url.get_backend_name() == "sqlite"


def postgresql_connect_args(url: URL, *, prepared_statements: bool = True) -> dict:
    """psycopg's connection arguments: the defaults above, minus what the URL's query sets itself.

    Without prepared statements (`prepare_threshold=None`) psycopg never
    prepares a statement on the server, however often it runs it: every
    connection of the pool, and the driver connection the hot paths use
    directly (`get_raw_connection()`), can then be moved between server
    connections by a PgBouncer in transaction mode.
    """
    args = {k: v for k, v in POSTGRESQL_CONNECT_ARGS.items() if k not in url.query}
    if not prepared_statements:
        args["prepare_threshold"] = None
    return args


def create_engine(url: str, *, pool_size: int = 10, prepared_statements: bool = True) -> AsyncEngine:
    """The service's engine; `prepared_statements=False` (the `database.prepared_statements`
    setting) for a PgBouncer in transaction mode. SQLite ignores it."""
    parsed = normalise_url(url)
    if is_sqlite(parsed):
        positional, keywords = parsed.get_dialect()().create_connect_args(parsed)
        # sqlite3's own wait for a lock held by another connection, before SQLITE_BUSY
        opened_with = (positional, {**keywords, "timeout": SQLITE_BUSY_SECONDS})
        engine = create_async_engine(
            parsed, async_creator=sqlite_driver.connector(opened_with), json_deserializer=read_json
        )
        _make_sqlite_transactional(engine)
    else:
        engine = _postgresql_engine(parsed, pool_size, prepared_statements)
    errors.install(engine)
    return engine


def write_json(value: Any) -> bytes:
    """A JSON parameter (a claim's request record, a pilot's resources) by orjson; what orjson
    refuses (an integer past 64 bits) by the standard library."""
    try:
        return orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS)
    except TypeError:
        return json.dumps(value).encode()


def _postgresql_engine(parsed: URL, pool_size: int, prepared_statements: bool) -> AsyncEngine:
    engine = create_async_engine(
        parsed,
        pool_size=pool_size,
        # a fixed set: connections beyond it would be opened for a burst and closed at
        # once, each a new PostgreSQL backend process
        max_overflow=0,
        pool_timeout=POOL_TIMEOUT_SECONDS,
        # No ping at checkout (a round trip on every request): a connection the
        # database dropped fails its request with a 503 and is replaced; SQLAlchemy
        # then renews the whole pool, and the match path drops its own.
        # What the URL's query sets itself wins over the default connect arguments.
        connect_args=postgresql_connect_args(parsed, prepared_statements=prepared_statements),
        json_deserializer=read_json,
    )

    @event.listens_for(engine.sync_engine, "connect")
    def _write_json_by_orjson(dbapi_connection, _record):
        set_json_dumps(write_json, dbapi_connection.driver_connection)

    return engine


def _make_sqlite_transactional(engine: AsyncEngine) -> None:
    """SQLite as a correct single-writer database.

    The driver's own transaction handling is switched off so that every
    transaction starts with an explicit BEGIN: IMMEDIATE for anything that may
    write (the write lock is taken up front, so check-then-write sequences are
    atomic and never fail half-way with SQLITE_BUSY), deferred for reads.
    """

    @event.listens_for(engine.sync_engine, "connect")
    def _on_connect(dbapi_connection, _record):
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.close()

    @event.listens_for(engine.sync_engine, "begin")
    def _on_begin(conn):
        if conn.get_execution_options().get("fairmatch_read_only"):
            conn.exec_driver_sql("BEGIN")
        else:
            conn.exec_driver_sql("BEGIN IMMEDIATE")


class RequestConnections:
    """Connections for requests, handed out first come first served.

    SQLAlchemy's pool queue lets a newcomer take a connection a waiter was
    woken for, so under load some requests waited for seconds; a FIFO
    semaphore in front keeps the wait fair. As with the pool itself, a
    request that waits longer than POOL_TIMEOUT_SECONDS fails (503).
    """

    def __init__(self, engine: AsyncEngine, size: int) -> None:
        self.engine = engine
        self._slots = asyncio.Semaphore(size)  # FIFO: newcomers queue behind waiters

    @asynccontextmanager
    async def connect(self) -> AsyncIterator[AsyncConnection]:
        if self._slots.locked():  # others wait or none is free: queue, with a timeout
            try:
                await asyncio.wait_for(self._slots.acquire(), POOL_TIMEOUT_SECONDS)
            except TimeoutError:
                raise DatabaseUnavailable(f"no database connection free within {POOL_TIMEOUT_SECONDS} s") from None
        else:  # a free slot is taken at once, without the task wait_for would start
            await self._slots.acquire()
        try:
            async with self.engine.connect() as conn:
                yield conn
        finally:
            self._slots.release()

    @asynccontextmanager
    async def reading(self) -> AsyncIterator[AsyncConnection]:
        """A request's connection in a transaction that only reads (`read_transaction`): for a
        route that reads through data-access classes and changes nothing."""
        async with self.connect() as conn, read_transaction(conn):
            yield conn


@asynccontextmanager
async def read_transaction(conn: AsyncConnection) -> AsyncIterator[AsyncConnection]:
    """A transaction that only reads.

    SQLite: a deferred BEGIN, so readers do not queue behind the write lock, and the
    reads share one snapshot. PostgreSQL: autocommit, no BEGIN and COMMIT. Under READ
    COMMITTED every statement takes its own snapshot whether or not a transaction
    wraps it, and these reads take no locks, so the wrapping bought nothing but two
    round trips.
    """
    reading, writing = _read_options(conn)
    await conn.execution_options(**reading)
    try:
        async with conn.begin():
            yield conn
    finally:
        await conn.execution_options(**writing)


def _read_options(conn: AsyncConnection) -> tuple[dict, dict]:
    """The execution options that make `conn` read as `read_transaction` says, and those that undo it."""
    if conn.dialect.name == "sqlite":
        return {"fairmatch_read_only": True}, {"fairmatch_read_only": False}
    return {"isolation_level": "AUTOCOMMIT"}, {"isolation_level": conn.default_isolation_level}


async def ping(engine: AsyncEngine) -> None:
    """One round trip to the database; raises when it cannot be reached."""
    async with engine.connect() as conn:
        await conn.execute(text("SELECT 1"))
