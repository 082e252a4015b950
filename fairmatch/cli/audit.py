"""`fairmatch audit`: what operators changed, when and who."""

from __future__ import annotations

import json
from typing import Annotated
from urllib.parse import urlencode

import typer
from rich.table import Table

from fairmatch.cli.client import TokenOption, UrlOption, call_api, connect
from fairmatch.cli.render import dash, new_table, show, timestamp

app = typer.Typer()


@app.command("audit")
def audit(
    since: Annotated[
        str | None, typer.Option(metavar="TIME", help="Only changes at or after TIME (ISO 8601 with a zone).")
    ] = None,
    actor: Annotated[str | None, typer.Option(help="Only this caller's changes (a token subject).")] = None,
    action: Annotated[str | None, typer.Option(help="Only this action, e.g. group.put or usage.reset.")] = None,
    limit: Annotated[int, typer.Option(min=1, max=1000, help="At most this many entries, newest first.")] = 100,
    after: Annotated[int | None, typer.Option(min=1, help="Continue a listing: its next_cursor.")] = None,
    url: UrlOption = None,
    token: TokenOption = None,
) -> None:
    """The audit log (admin): changes to groups, job classes, site limits, the site mask,
    associations, usage, priorities and jobs in bulk, newest first."""
    query = {"since": since, "actor": actor, "action": action, "limit": limit, "after": after}
    params = urlencode({k: v for k, v in query.items() if v is not None})
    show(call_api(connect(url, token), "GET", f"/audit?{params}"), audit_table)


def audit_table(document: dict) -> Table:
    caption = f"{len(document['entries'])} entries"
    if document["next_cursor"]:
        caption += f"; older ones with --after {document['next_cursor']}"
    table = new_table("Audit log", "at", "actor", "action", "target", "detail", caption=caption)
    for entry in document["entries"]:
        detail = dash(None if entry["detail"] is None else json.dumps(entry["detail"], separators=(",", ":")))
        table.add_row(timestamp(entry["at"]), entry["actor"], entry["action"], dash(entry["target"]), detail)
    return table
