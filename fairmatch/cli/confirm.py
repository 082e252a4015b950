"""Asking before a change to many jobs, a purge or a ban of an unknown site: one rule for
every command that asks.

On a terminal the command says what it would change and waits for a yes; `--yes` (`-y`)
answers beforehand. When stdin is not a terminal nobody is there to answer: the command
refuses without `--yes` rather than act on a question nobody saw (`echo n | …` is not a
terminal either, and neither is cron). A "no" (or end of input) changes nothing and
exits with EXIT_DECLINED, as apt and dnf do on abort, so that `… && next` stops there.
"""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from fairmatch.cli import render
from fairmatch.cli.common import EXIT_FAILED, EXIT_USAGE, fail, note

EXIT_DECLINED = EXIT_FAILED  # answered no: nothing changed
EXIT_UNCONFIRMED = EXIT_USAGE  # no terminal to answer on and no --yes
YES = frozenset({"y", "yes"})  # any other answer, an empty one too, is a no

Yes = Annotated[
    bool,
    typer.Option("--yes", "-y", help="Go ahead without asking; needed when stdin is not a terminal (scripts, cron)."),
]


def confirm(question: str, *, yes: bool) -> None:
    """Return when the change may go ahead; else end the command, having changed nothing.

    `question` says what would change, without its question mark: "hold 113 jobs of owner alice".
    """
    if yes:
        return
    if not render.stdin_is_tty():
        fail(f"{question}? Not asked, as stdin is not a terminal: nothing changed; pass --yes (-y) to go ahead",
             EXIT_UNCONFIRMED)  # fmt: skip
    # asked and answered on stderr and stdin: stdout keeps only the command's output
    typer.echo(f"{question}? [y/N] ", err=True, nl=False)
    try:
        answer = sys.stdin.readline()
    except KeyboardInterrupt:
        answer = ""
    if not answer.endswith("\n"):  # end of input or Ctrl-C: the next line starts afresh
        typer.echo(err=True)
    if answer.strip().casefold() not in YES:
        note("nothing changed")
        raise typer.Exit(EXIT_DECLINED)
