"""The `fairmatch` command: run the service, migrate its database, talk to it over HTTP.

This root only composes the command modules into one app and holds the console
script's `main`; the command modules import helper modules, never each other or
this root. The local, server-side commands (serve, db, token) do not import the
HTTP client; the client commands (the rest) do not import the database.
Client commands print rich tables on a terminal and the server's JSON otherwise;
`fairmatch --format table` or `--format json` chooses, whatever stdout is.
Heavy modules (uvicorn, SQLAlchemy, Alembic, settings) are imported inside the
commands that need them, so client commands start quickly.
"""

from __future__ import annotations

import sys
from typing import Annotated

import typer

import fairmatch
from fairmatch.cli import (
    associations,
    audit,
    db,
    groups,
    jobs,
    limits,
    matching,
    pilots,
    priorities,
    serve,
    simulate,
    sites,
    status,
    token,
)
from fairmatch.cli.common import EXIT_FAILED
from fairmatch.cli.render import OutputFormat, choose_format

cli = typer.Typer(
    name="fairmatch",
    help="Fair-share job matcher: run the service, migrate its database, submit and inspect jobs.",
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode=None,  # plain help: brackets in texts are literal
    pretty_exceptions_show_locals=False,  # locals may hold database passwords
)


def _print_version(asked: bool) -> None:
    if asked:
        typer.echo(f"fairmatch {fairmatch.__version__}")
        raise typer.Exit()


@cli.callback()
def root(
    output_format: Annotated[
        OutputFormat,
        typer.Option(
            "--format",
            help="Output of the client commands: tables on a terminal and JSON otherwise (auto), "
            "or always tables, or always JSON.",
        ),
    ] = OutputFormat.auto,
    version: Annotated[
        bool,
        typer.Option("--version", "-V", callback=_print_version, is_eager=True, help="Print the version and exit."),
    ] = False,
) -> None:
    """Fair-share job matcher: run the service, migrate its database, submit and inspect jobs."""
    choose_format(output_format)


# commands, then groups, in the order `fairmatch --help` lists them
for commands in (serve.app, jobs.submit_app, matching.app, priorities.app, status.app, audit.app, simulate.app):
    cli.add_typer(commands)
for name, group in (
    ("db", db.app), ("token", token.app), ("associations", associations.app),
    ("groups", groups.app), ("jobs", jobs.app), ("limits", limits.app), ("pilots", pilots.app), ("sites", sites.app),
):  # fmt: skip
    cli.add_typer(group, name=name)


def main() -> None:
    """The console script: usage errors become one `error:` line too (exit 2)."""
    try:
        code = cli(standalone_mode=False)
    except typer.Abort:
        typer.echo("error: interrupted", err=True)
        code = EXIT_FAILED
    except Exception as exc:
        # click's exceptions (typer may bring its own copy of click): they carry their exit code
        exit_code = getattr(exc, "exit_code", None)
        if not (hasattr(exc, "format_message") and isinstance(exit_code, int)):
            raise
        if type(exc).__name__ == "NoArgsIsHelpError" and hasattr(exc, "show"):
            exc.show()  # its message is the help text
        else:
            context = getattr(exc, "ctx", None)
            where = f" (see `{context.command_path} --help`)" if context else ""
            typer.echo(f"error: {exc.format_message()}{where}", err=True)
        code = exit_code
    sys.exit(code if isinstance(code, int) else 0)
