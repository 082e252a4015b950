"""The local commands' view of the configured database: its schema revision, migrating it, one-line errors.

SQLAlchemy and Alembic are imported inside the functions, so the CLI starts without them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fairmatch.cli.common import EXIT_USAGE, fail


def upgrade_database(url: str, revision: str, *, prepared_statements: bool = True) -> str:
    """Migrate and say what was done."""
    from alembic.util import CommandError

    from fairmatch.db import migrate

    before = schema_revision(url, prepared_statements=prepared_statements)
    try:
        on_database(url, lambda: migrate.upgrade(url, revision, prepared_statements=prepared_statements))
    except CommandError as exc:
        fail(f"cannot upgrade to {revision!r}: {exc}", EXIT_USAGE)
    after = schema_revision(url, prepared_statements=prepared_statements)
    if before == after:
        return f"{redacted(url)}: already at {after or 'none'}"
    return f"{redacted(url)}: upgraded from {before or 'none'} to {after}"


def require_head(url: str, *, prepared_statements: bool = True) -> None:
    """The app refuses an old schema too, but inside a server traceback: say it plainly first."""
    current, head = schema_revision(url, prepared_statements=prepared_statements), head_revision(url)
    if current != head:
        fail(f"{redacted(url)} is at schema revision {current or 'none'}, this fairmatch needs {head}: "
             "run `fairmatch db upgrade`")  # fmt: skip


def schema_revision(url: str, *, prepared_statements: bool = True) -> str | None:
    """The database's revision (None before any migration); an unusable database ends the command."""
    from fairmatch.db import migrate

    return on_database(url, lambda: migrate.database_revision(url, prepared_statements=prepared_statements))


def head_revision(url: str) -> str | None:
    """The newest revision this fairmatch knows."""
    from fairmatch.db import migrate

    return migrate.head_revision(url)


def database_is_sqlite(url: str) -> bool:
    from fairmatch.db.engine import is_sqlite, normalise_url

    return on_database(url, lambda: is_sqlite(normalise_url(url)))


def on_database(url: str, action: Callable[[], Any]) -> Any:
    """Run `action`, turning an unusable URL or an unreachable database into a one-line error."""
    from sqlalchemy.exc import ArgumentError, SQLAlchemyError

    from fairmatch.errors import DatabaseError

    try:
        return action()
    except (ArgumentError, ValueError) as exc:  # unparsable URL or unsupported scheme
        fail(f"database_url {redacted(url)}: {exc}", EXIT_USAGE)
    except DatabaseError as exc:  # the service's engines
        fail(f"database {redacted(url)}: {exc.cause}")
    except SQLAlchemyError as exc:  # Alembic's own engine
        reason = str(getattr(exc, "orig", None) or exc).strip().splitlines()[0]
        fail(f"database {redacted(url)}: {reason}")


def redacted(url: str) -> str:
    """The URL as it may be shown: its password replaced by ***."""
    from fairmatch.db.engine import redacted_url

    return redacted_url(url)
