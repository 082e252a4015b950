"""`fairmatch associations …`: the Slurm association tree, in and out as sacctmgr text."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from fairmatch.cli.client import TokenOption, UrlOption, call_api, call_api_text, connect, request_api
from fairmatch.cli.common import EXIT_USAGE, fail
from fairmatch.cli.render import show

app = typer.Typer(help="The Slurm association tree (sacctmgr format).", no_args_is_help=True)

SACCTMGR_COMMAND = "sacctmgr -n -p show assoc cluster=X format=account,share,parentn,user"


@app.command("import")
def associations_import(
    file: Annotated[
        str,
        typer.Argument(metavar="FILE", show_default=False, help=f"The output of `{SACCTMGR_COMMAND}`; - reads stdin."),
    ],
    url: UrlOption = None,
    token: TokenOption = None,
) -> None:
    """Replace the whole association tree with a sacctmgr dump.

    All or nothing: a dump with a wrong line is refused, naming the line, and the tree stays as it was.
    """
    text = read_dump(file)
    response = call_api_text(connect(url, token), "PUT", "/associations", content=text)
    show(response.json(), lambda answer: f"imported {answer['associations']} associations")


@app.command("export")
def associations_export(url: UrlOption = None, token: TokenOption = None) -> None:
    """Print the association tree as a sacctmgr dump, byte for byte the text imported."""
    response = call_api_text(connect(url, token), "GET", "/associations")
    # not typer.echo: the text must reach stdout unchanged, with no newline added
    sys.stdout.write(response.text)
    sys.stdout.flush()


@app.command("remove")
def associations_remove(url: UrlOption = None, token: TokenOption = None) -> None:
    """Remove the association tree (admin): any account is accepted again, shares come from the groups."""
    request_api(connect(url, token), "DELETE", "/associations")
    show({"associations": 0}, lambda _: "association tree removed")


@app.command("reset-usage")
def associations_reset_usage(
    account: Annotated[str | None, typer.Option(help="This account: its own usage and its users'.")] = None,
    user: Annotated[str | None, typer.Option(help="This user, in every account (with --account: in that one).")] = None,
    url: UrlOption = None,
    token: TokenOption = None,
) -> None:
    """Set raw usage to zero (admin), as sacctmgr's RawUsage=0; neither option: everything."""
    body = {key: value for key, value in {"account": account, "user": user}.items() if value is not None}
    answer = call_api(connect(url, token), "POST", "/associations/usage/reset", body)
    show(answer, lambda doc: f"usage reset for {doc['reset']} associations")


def read_dump(file: str) -> str:
    """The file's exact text: bytes decoded, line endings untouched (the server judges them)."""
    try:
        data = sys.stdin.buffer.read() if file == "-" else Path(file).read_bytes()
    except OSError as exc:
        fail(f"cannot read {file}: {exc.strerror or exc}", EXIT_USAGE)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        fail(f"{file} is not UTF-8 text: {exc.reason} at byte {exc.start}", EXIT_USAGE)
