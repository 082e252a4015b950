"""`fairmatch pilots …`: the pilots on record, as their matches left them."""

from __future__ import annotations

from typing import Annotated
from urllib.parse import quote, urlencode

import typer
from rich.table import Table

from fairmatch.cli.client import TokenOption, UrlOption, call_api, connect
from fairmatch.cli.render import dash, fields_table, new_table, show, timestamp

app = typer.Typer(help="Pilots on record: where they run, what they took, how often they got nothing.",
                  no_args_is_help=True)  # fmt: skip

Reference = Annotated[
    str,
    typer.Argument(
        metavar="REF", show_default=False, help="The pilot's reference as it sends it, e.g. a URL; quoted here."
    ),
]


@app.command("list")
def list_pilots(
    site: Annotated[str | None, typer.Option(help="Only pilots at this site.")] = None,
    since: Annotated[
        str | None, typer.Option(metavar="TIME", help="Only pilots first seen at or after TIME (ISO 8601; UTC).")
    ] = None,
    reference: Annotated[str | None, typer.Option(metavar="REF", help="Only the pilot of this reference.")] = None,
    limit: Annotated[int, typer.Option(min=1, max=1000, help="At most this many pilots, newest first.")] = 100,
    cursor: Annotated[str | None, typer.Option(help="Continue a listing: its next_cursor.")] = None,
    url: UrlOption = None,
    token: TokenOption = None,
) -> None:
    """Pilots, newest first; the answer's next_cursor continues the listing (--cursor)."""
    query = {"site": site, "since": since, "reference": reference, "limit": limit, "cursor": cursor}
    params = urlencode({k: v for k, v in query.items() if v is not None})
    show(call_api(connect(url, token), "GET", f"/pilots?{params}"), pilot_list_table)


@app.command("show")
def show_pilot(reference: Reference, url: UrlOption = None, token: TokenOption = None) -> None:
    """One pilot: where it runs, its counts and the jobs it took."""
    pilot = call_api(connect(url, token), "GET", f"/pilots/{quote(reference, safe='')}")
    show(pilot, lambda doc: fields_table(f"Pilot {reference}", doc))


def pilot_list_table(document: dict) -> Table:
    caption = f"{len(document['pilots'])} pilots"
    if document["next_cursor"]:
        caption += f"; more with --cursor {document['next_cursor']}"
    table = new_table("Pilots", "reference", "site", "CE", "benchmark", "matches", "empty", "job",
                      "first seen", "last seen", caption=caption)  # fmt: skip
    for pilot in document["pilots"]:
        table.add_row(
            pilot["reference"], pilot["site"], dash(pilot["grid_ce"]), dash(pilot["benchmark"]),
            str(pilot["matches"]), str(pilot["empty_matches"]), dash(pilot["current_job_id"]),
            timestamp(pilot["first_seen"]), timestamp(pilot["last_seen"]),
        )  # fmt: skip
    return table
