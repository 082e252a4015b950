"""Driver errors turned into fairmatch's own, in one place.

Every engine translates at the source (`install`: SQLAlchemy's handle_error
event, which sees every statement and connection attempt); the claim, which
runs statements on the driver's own connection, translates with `translated`.
Services catch fairmatch's errors only, and the API answers them as it
answers every domain error:

- `DatabaseUnavailable` (503, Retry-After): refused and dropped connections,
  a connection the server closed, any error the driver saw as a disconnect,
  an exhausted pool, and a write refused as read-only (SQLSTATE 25006: a
  standby, or a primary demoted under a connection opened before the
  failover; the next connection finds the new primary). A lost COMMIT lands
  here too: its outcome is unknown, and a retry with the same request id
  settles it.
- `ConstraintViolation`, and `UniqueViolation` for a unique key already taken.
- `ValueRefused` (422): a value the column type cannot hold.
- `DatabaseError`, their base, for any other driver error: a defect, answered
  500 and logged with the driver's error as its cause.
"""

from __future__ import annotations

from sqlalchemy import event
from sqlalchemy.engine import ExceptionContext
from sqlalchemy.exc import DataError, DBAPIError, IntegrityError, InterfaceError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from sqlalchemy.ext.asyncio import AsyncEngine

from fairmatch.errors import (
    ConstraintViolation,
    DatabaseError,
    DatabaseUnavailable,
    UniqueViolation,
    ValueRefused,
)

# PostgreSQL's read_only_sql_transaction: what a standby answers a write
READ_ONLY_TRANSACTION = "25006"


def translated(exc: BaseException) -> DatabaseError | None:
    """fairmatch's error for a SQLAlchemy error; None for an error that is not the database's."""
    if isinstance(exc, PoolTimeout):
        return DatabaseUnavailable(_first_line(exc))
    if not isinstance(exc, DBAPIError):
        return None
    if isinstance(exc, (OperationalError, InterfaceError)) or exc.connection_invalidated:
        return DatabaseUnavailable(_first_line(exc))
    if refused_as_read_only(exc.orig):
        return DatabaseUnavailable(_first_line(exc))
    if isinstance(exc, IntegrityError):
        unique = _is_unique_violation(exc)
        return (UniqueViolation if unique else ConstraintViolation)(_first_line(exc))
    if isinstance(exc, DataError):
        return ValueRefused(_first_line(exc))
    return DatabaseError(_first_line(exc))


def refused_as_read_only(driver_error: BaseException | None) -> bool:
    """The server took the write for a read-only transaction's: it is no (longer a) primary."""
    return getattr(driver_error, "sqlstate", None) == READ_ONLY_TRANSACTION


def _is_unique_violation(exc: IntegrityError) -> bool:
    # PostgreSQL's SQLSTATE 23505; SQLite names the constraint in its message
    code = getattr(exc.orig, "sqlstate", None)
    return code == "23505" if code is not None else "UNIQUE constraint failed" in str(exc.orig)


def _first_line(exc: BaseException) -> str:
    """The driver's message without SQLAlchemy's appended SQL and parameters."""
    orig = getattr(exc, "orig", None) or exc
    return str(orig).strip().split("\n", 1)[0][:200]


def install(engine: AsyncEngine) -> None:
    """Make the engine raise fairmatch's errors (after SQLAlchemy's own clean-up: a
    connection it saw as broken is already invalidated)."""

    @event.listens_for(engine.sync_engine, "handle_error")
    def _translate(context: ExceptionContext) -> BaseException | None:
        raised = context.sqlalchemy_exception
        if raised is None:
            return None
        if refused_as_read_only(context.original_exception):
            # a connection to a standby stays one: SQLAlchemy drops it (and the pool's older
            # connections, opened before the failover) so that the next connects to the primary
            context.is_disconnect = True
        error = DatabaseUnavailable(_first_line(raised)) if context.is_disconnect else translated(raised)
        if error is not None:
            error.__cause__ = raised
        return error
