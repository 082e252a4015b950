"""`fairmatch db …`: migrate the configured database and show its schema revision."""

from __future__ import annotations

from typing import Annotated

import typer

from fairmatch.cli.common import load_settings_or_exit
from fairmatch.cli.database import head_revision, redacted, schema_revision, upgrade_database

app = typer.Typer(help="Database schema migrations.", no_args_is_help=True)


@app.command("upgrade")
def db_upgrade(
    revision: Annotated[str, typer.Option(help="Alembic revision to upgrade to.")] = "head",
) -> None:
    """Migrate the configured database (`database_url`) to a revision."""
    settings = load_settings_or_exit()
    typer.echo(
        upgrade_database(settings.database_url, revision, prepared_statements=settings.database.prepared_statements)
    )


@app.command("current")
def db_current() -> None:
    """Show the configured database's schema revision and whether it is the latest."""
    settings = load_settings_or_exit()
    url = settings.database_url
    current = schema_revision(url, prepared_statements=settings.database.prepared_statements)
    head = head_revision(url)
    if current == head:
        typer.echo(f"{redacted(url)}: at {current} (head, up to date)")
    else:
        typer.echo(f"{redacted(url)}: at {current or 'none'}, head is {head}: run `fairmatch db upgrade`")
