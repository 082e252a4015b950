"""`fairmatch sites …`: the site mask (banned sites get only test jobs)."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.table import Table

from fairmatch.cli import confirm
from fairmatch.cli.client import TokenOption, UrlOption, call_api, connect, path_part, request_api
from fairmatch.cli.common import EXIT_USAGE, fail
from fairmatch.cli.render import new_table, show, timestamp

app = typer.Typer(help="The site mask: ban a broken site, allow it again.", no_args_is_help=True)

Site = Annotated[str, typer.Argument(metavar="SITE", show_default=False, help="The site, e.g. LCG.CERN.cern.")]


@app.command("list")
def list_sites(url: UrlOption = None, token: TokenOption = None) -> None:
    """The banned sites, with who banned them, when and why."""
    show(call_api(connect(url, token), "GET", "/site-mask"), mask_table)


@app.command("ban")
def ban(
    site: Site,
    reason: Annotated[str, typer.Option(show_default=False, help="Why the site is banned (required).")],
    yes: confirm.Yes = False,
    url: UrlOption = None,
    token: TokenOption = None,
) -> None:
    """Ban a site: its pilots get only jobs of the types matching.masked_site_job_types names (admin, operator).

    Banning a banned site again replaces its reason. A site no pilot on record reported
    (often a misspelt name) is banned only once confirmed, the reported sites most like
    it offered (--yes when stdin is not a terminal). Prints the site's entry.
    """
    if not reason.strip():
        fail("--reason must say why the site is banned", EXIT_USAGE)
    api = connect(url, token)
    if not yes:
        check = call_api(api, "GET", f"/site-mask/check/{path_part(site)}")
        if not check["reported"]:
            confirm.confirm(f"{check['warning']} — ban anyway", yes=False)
    entry = call_api(api, "PUT", f"/site-mask/{path_part(site)}", {"reason": reason})
    show(entry, lambda doc: mask_table({"sites": [doc]}, "Site banned"))


@app.command("allow")
def allow(site: Site, url: UrlOption = None, token: TokenOption = None) -> None:
    """Allow a banned site again (admin, operator). Prints the mask as it then stands."""
    api = connect(url, token)
    response = request_api(api, "DELETE", f"/site-mask/{path_part(site)}", accept={404})
    if response.status_code == 404:
        fail(f"site {site!r} is not banned")
    show(call_api(api, "GET", "/site-mask"), mask_table)


def mask_table(document: dict, title: str = "Site mask") -> Table:
    sites = document["sites"]
    table = new_table(title, "site", "reason", "banned_at", "banned_by", caption=f"{len(sites)} banned")
    for entry in sites:
        table.add_row(entry["site"], entry["reason"], timestamp(entry["banned_at"]), entry["banned_by"])
    return table
