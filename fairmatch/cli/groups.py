"""`fairmatch groups …`: the fair-share groups (share, properties, priority level)."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.table import Table

from fairmatch.cli.client import TokenOption, UrlOption, call_api, connect, path_part, request_api
from fairmatch.cli.render import new_table, shortened, show

# what GET /groups/{name} shows and PUT takes back; the rest (name, job_sharing) is derived
EDITABLE = ("job_share", "properties", "allow_background_tqs", "priority", "description")

app = typer.Typer(help="Fair-share groups: shares, properties, priority levels.", no_args_is_help=True)

GroupName = Annotated[str, typer.Argument(metavar="NAME", show_default=False, help="The group's name.")]


@app.command("list")
def list_groups(url: UrlOption = None, token: TokenOption = None) -> None:
    """All groups by name (a user's token: its own groups)."""
    show(call_api(connect(url, token), "GET", "/groups"), groups_table)


@app.command("delete")
def delete_group(name: GroupName, url: UrlOption = None, token: TokenOption = None) -> None:
    """Delete a group's configuration (admin): its jobs stay, at the default share."""
    request_api(connect(url, token), "DELETE", f"/groups/{path_part(name)}")
    show({"deleted": name}, lambda doc: f"group {doc['deleted']} deleted")


@app.command("show")
def show_group(name: GroupName, url: UrlOption = None, token: TokenOption = None) -> None:
    """One group."""
    group = call_api(connect(url, token), "GET", f"/groups/{path_part(name)}")
    show(group, lambda doc: groups_table({"groups": [doc]}))


@app.command("set")
def set_group(
    name: GroupName,
    share: Annotated[float | None, typer.Option(min=0, help="The group's job share.")] = None,
    properties: Annotated[
        str | None, typer.Option(help='Comma-separated, replacing the old ones (e.g. JOB_SHARING); "" clears.')
    ] = None,
    allow_background_tqs: Annotated[
        bool | None,
        typer.Option("--allow-background-tqs/--no-allow-background-tqs", help="Background queues get the minimum."),
    ] = None,
    priority: Annotated[int | None, typer.Option(min=-1000, max=1000, help="The group's priority level.")] = None,
    description: Annotated[str | None, typer.Option(help='Free text; "" clears.')] = None,
    url: UrlOption = None,
    token: TokenOption = None,
) -> None:
    """Create a group or change some of its settings (admin).

    Settings not given keep their current values; a new group starts from the service's defaults.
    """
    api = connect(url, token)
    path = f"/groups/{path_part(name)}"
    # PUT replaces the whole definition: read it, change what was given, write it back
    current = call_api(api, "GET", path, accept={404})
    body = {key: current[key] for key in EDITABLE} if current else {}
    changes = {
        "job_share": share,
        "properties": None if properties is None else [p.strip() for p in properties.split(",") if p.strip()],
        "allow_background_tqs": allow_background_tqs,
        "priority": priority,
        "description": description,
    }
    body.update({k: v for k, v in changes.items() if v is not None})
    body["description"] = body.get("description") or None
    group = call_api(api, "PUT", path, body)
    title = "Group created" if current is None else "Group updated"
    show(group, lambda doc: groups_table({"groups": [doc]}, title))


def groups_table(document: dict, title: str = "Groups") -> Table:
    table = new_table(title, "name", "job_share", "properties", "background", "priority", "description")
    unconfigured = 0
    for g in document["groups"]:
        background = "yes" if g["allow_background_tqs"] else "no"
        name = g["name"] if g.get("configured", True) else f"{g['name']} *"
        unconfigured += not g.get("configured", True)
        table.add_row(name, f"{g['job_share']:g}", shortened(g["properties"]), background,
                      str(g["priority"]), g["description"] or "-")  # fmt: skip
    if unconfigured:
        table.caption = "* not configured: waiting jobs at the defaults"
    return table
