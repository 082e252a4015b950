"""`fairmatch token create`: sign a bearer token with the configured key."""

from __future__ import annotations

from typing import Annotated

import typer

from fairmatch.cli.common import EXIT_USAGE, fail, load_settings_or_exit

app = typer.Typer(help="Bearer tokens for auth mode `token`.", no_args_is_help=True)

TTL_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_ttl(text: str) -> int:
    """`3600`, `90m`, `12h` or `7d` in seconds."""
    text = text.strip().lower()
    unit = TTL_UNITS.get(text[-1:])
    number = text[:-1] if unit else text
    if not number.isdigit() or int(number) == 0:
        raise typer.BadParameter(f"{text!r}: give seconds or a number with s, m, h or d (e.g. 12h)")
    return int(number) * (unit or 1)


@app.command("create")
def token_create(
    role: Annotated[str, typer.Option(help="admin, operator, user or pilot.", show_default=False)],
    sub: Annotated[str, typer.Option(help="Subject: the user or pilot name.", show_default=False)],
    groups: Annotated[str | None, typer.Option(help="Comma-separated groups (a pilot's make it private).")] = None,
    vo: Annotated[str | None, typer.Option(help="Virtual organisation.")] = None,
    site: Annotated[str | None, typer.Option(help="Pin a pilot to this site.")] = None,
    ttl: Annotated[str, typer.Option(help="Lifetime: seconds, or e.g. 30m, 12h, 7d.")] = "1d",
) -> None:
    """Sign a token with the configured key (auth.secret, or auth.private_key_file for RS256).

    The token is the last line of standard output.
    """
    from fairmatch.auth.tokens import Role, create_token

    settings = load_settings_or_exit()
    try:
        chosen_role = Role(role)
    except ValueError:
        fail(f"--role must be one of {', '.join(r.value for r in Role)}, not {role!r}", EXIT_USAGE)
    seconds = parse_ttl(ttl)
    group_list = [g.strip() for g in (groups or "").split(",") if g.strip()]
    try:
        token = create_token(
            settings.auth, role=chosen_role, sub=sub, groups=group_list, vo=vo, site=site, ttl_seconds=seconds
        )
    except ValueError as exc:
        fail(str(exc), EXIT_USAGE)
    typer.echo(token)
