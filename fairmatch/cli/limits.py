"""`fairmatch limits …`: the site limits (running jobs and matching pace per site or CE and job attribute)."""

from __future__ import annotations

from typing import Annotated, Any

import typer
from rich.table import Table

from fairmatch.cli.client import Service, TokenOption, UrlOption, call_api, connect
from fairmatch.cli.common import EXIT_USAGE, fail
from fairmatch.cli.files import object_list, read_document
from fairmatch.cli.render import dash, new_table, show, timestamp

# the spellings PUT /limits takes; DIRAC's are accepted and stored as ours
ATTRIBUTES = {"job_type": "job_type", "owner_group": "owner_group", "owner": "owner",
              "JobType": "job_type", "OwnerGroup": "owner_group", "Owner": "owner"}  # fmt: skip
STATE = ("running", "last_match_at")  # shown by GET, not part of a limit's definition
CLEAR = "none"

app = typer.Typer(help="Site limits: running jobs and matching pace per site or CE.", no_args_is_help=True)

Site = Annotated[str, typer.Argument(metavar="SITE", show_default=False, help="The site, e.g. LCG.CERN.cern.")]
Attribute = Annotated[
    str, typer.Argument(metavar="ATTRIBUTE", show_default=False, help="job_type, owner_group or owner.")
]
Value = Annotated[str, typer.Argument(metavar="VALUE", show_default=False, help="The attribute's value.")]
GridCE = Annotated[
    str,
    typer.Option(
        "--ce", metavar="CE", help="A CE of the site: the limit counts only the jobs matched through it. "
        "Left out: the whole site.",
    ),
]  # fmt: skip


@app.command("show")
def show_limits(url: UrlOption = None, token: TokenOption = None) -> None:
    """Every site limit, with the jobs it counts now and its last match."""
    show(call_api(connect(url, token), "GET", "/limits"), limits_table)


@app.command("set")
def set_all(
    file: Annotated[
        str,
        typer.Argument(
            metavar="FILE",
            show_default=False,
            help='.json (a list, or {"limits": [...]}) or .toml ([[limits]] tables); - reads JSON from stdin.',
        ),
    ],
    url: UrlOption = None,
    token: TokenOption = None,
) -> None:
    """Replace every site limit with those in FILE (admin); an empty list removes them all.

    The JSON of `fairmatch limits show` is accepted as it is: its running and last_match_at are left out.
    """
    document, name = read_document(file)
    limits = [definition(entry) for entry in object_list(document, "limits", name)]
    put_limits(connect(url, token), limits)


@app.command("set-one")
def set_one(
    site: Site,
    attribute: Attribute,
    value: Value,
    grid_ce: GridCE = "",
    running_limit: Annotated[
        str | None, typer.Option(metavar="N", help=f"At most N jobs Matched or Running there; {CLEAR} drops it.")
    ] = None,
    matching_delay: Annotated[
        str | None, typer.Option(metavar="SECONDS", help=f"At least this long between matches; {CLEAR} drops it.")
    ] = None,
    url: UrlOption = None,
    token: TokenOption = None,
) -> None:
    """Add one site limit, or change it; the other limits stay as they are (admin)."""
    key = limit_key(site, grid_ce, attribute, value)
    if running_limit is None and matching_delay is None:
        fail("give --running-limit, --matching-delay or both", EXIT_USAGE)
    api = connect(url, token)
    limits = current_limits(api)
    entry = next((e for e in limits if key_of(e) == key), None)
    if entry is None:
        entry = {"site": site, "grid_ce": grid_ce, "attribute": key[2], "value": value,
                 "running_limit": None, "matching_delay": None}  # fmt: skip
        limits.append(entry)
    if running_limit is not None:
        entry["running_limit"] = parse_number(running_limit, "--running-limit", int)
    if matching_delay is not None:
        entry["matching_delay"] = parse_number(matching_delay, "--matching-delay", float)
    if entry["running_limit"] is None and entry["matching_delay"] is None:
        command = " ".join([site, key[2], value] + (["--ce", grid_ce] if grid_ce else []))
        fail(f"the limit would limit nothing: remove it with `fairmatch limits remove {command}`", EXIT_USAGE)
    put_limits(api, limits)


@app.command("remove")
def remove(
    site: Site,
    attribute: Attribute,
    value: Value,
    grid_ce: GridCE = "",
    url: UrlOption = None,
    token: TokenOption = None,
) -> None:
    """Remove one site limit; the others stay (admin)."""
    key = limit_key(site, grid_ce, attribute, value)
    api = connect(url, token)
    limits = current_limits(api)
    kept = [e for e in limits if key_of(e) != key]
    if len(kept) == len(limits):
        fail(f"there is no limit for {attribute} {value!r} at {site}" + (f" through {grid_ce}" if grid_ce else ""))
    put_limits(api, kept)


def current_limits(api: Service) -> list[dict[str, Any]]:
    return [definition(entry) for entry in call_api(api, "GET", "/limits")["limits"]]


def put_limits(api: Service, limits: list[dict[str, Any]]) -> None:
    # the set is replaced whole: a change made by someone else in between is overwritten
    show(call_api(api, "PUT", "/limits", {"limits": limits}), limits_table)


def definition(entry: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in entry.items() if k not in STATE}


def limit_key(site: str, grid_ce: str, attribute: str, value: str) -> tuple[str, str, str, str]:
    if attribute not in ATTRIBUTES:
        fail(f"attribute must be job_type, owner_group or owner, not {attribute!r}", EXIT_USAGE)
    return site, grid_ce, ATTRIBUTES[attribute], value


def key_of(entry: dict[str, Any]) -> tuple[str, str, str, str]:
    """A listed limit's key (a file's limit without grid_ce is on the whole site)."""
    return limit_key(entry["site"], entry.get("grid_ce") or "", entry["attribute"], entry["value"])


def parse_number(text: str, option: str, kind: type) -> Any:
    if text.strip().lower() == CLEAR:
        return None
    try:
        number = kind(text)
    except ValueError:
        number = -1
    if not 0 <= number < float("inf"):
        fail(f"{option} must be a number ≥ 0 or {CLEAR}, not {text!r}", EXIT_USAGE)
    return number


def limits_table(document: dict) -> Table:
    table = new_table("Site limits", "site", "grid_ce", "attribute", "value", "running_limit", "running",
                      "matching_delay", "last_match_at", caption=f"{len(document['limits'])} limits")  # fmt: skip
    for limit in document["limits"]:
        table.add_row(
            limit["site"], limit["grid_ce"] or "(site)", limit["attribute"], limit["value"], dash(limit["running_limit"]), str(limit["running"]),
            "-" if limit["matching_delay"] is None else f"{limit['matching_delay']:g} s",
            timestamp(limit["last_match_at"]),
        )  # fmt: skip
    return table
