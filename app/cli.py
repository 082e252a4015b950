"""The `fairmatch` command: run the service, migrate its database, talk to it over HTTP.

Client commands print rich tables on a terminal and the server's JSON otherwise.
Heavy modules (uvicorn, SQLAlchemy, Alembic, settings) are imported inside the
commands that need them, so client commands start quickly.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich import box
from rich.console import Console
from rich.table import Table

from app.cli_client import Service, TokenOption, UrlOption, call_api, connect
from app.cli_common import EXIT_FAILED, EXIT_USAGE, fail, load_settings_or_exit, note, print_json
from app.cli_files import load_jobs

if TYPE_CHECKING:
    from app.settings import Settings

BATCH_SIZE = 10_000  # the server's largest POST /jobs
SHOWN_VALUES = 3  # longer list cells are shortened to "a, b, c (+N)"
REPEATABLE = "Repeat for several."
TQ_COLUMNS = (
    "id", "owner", "group", "vo", "cpu_time", "class", "priority", "jobs", "sites", "platforms", "tags",
)  # fmt: skip
NUMERIC_COLUMNS = {
    "id", "TQ", "cpu_time", "class", "priority", "jobs", "probability", "uprio", "job_share",
    "waiting", "matched", "running", "stalled", "matches", "per second", "task queues", "running_limit",
    "matching_delay",
}  # fmt: skip

cli = typer.Typer(
    name="fairmatch",
    help="Fair-share job matcher: run the service, migrate its database, submit and inspect jobs.",
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode=None,  # plain help: brackets in texts are literal
    pretty_exceptions_show_locals=False,  # locals may hold database passwords
)
db_cli = typer.Typer(help="Database schema migrations.", no_args_is_help=True)
cli.add_typer(db_cli, name="db")
token_cli = typer.Typer(help="Bearer tokens for auth mode `token`.", no_args_is_help=True)
cli.add_typer(token_cli, name="token")


# --- shared helpers ---------------------------------------------------------


def stdout_is_tty() -> bool:
    """The one place that decides between tables and JSON (tests replace it)."""
    return sys.stdout.isatty()


def stderr_is_tty() -> bool:
    """Progress bars or plain progress lines (tests replace it)."""
    return sys.stderr.isatty()


# --- serve ------------------------------------------------------------------


@cli.command()
def serve(
    host: Annotated[
        str | None, typer.Option(help="Interface to bind to.", show_default="server.host setting")
    ] = None,
    port: Annotated[
        int | None,
        typer.Option(min=1, max=65535, help="TCP port.", show_default="server.port setting"),
    ] = None,
    workers: Annotated[
        int | None,
        typer.Option(min=1, max=64, help="Server processes.", show_default="server.workers setting"),
    ] = None,
) -> None:
    """Run the HTTP service.

    A SQLite database is migrated first; PostgreSQL must be migrated with `fairmatch db upgrade`.
    """
    import uvicorn

    settings = load_settings_or_exit()
    host = host or settings.server.host
    port = port or settings.server.port
    workers = workers or settings.server.workers
    refuse_open_bind_without_auth(settings, host)
    prepared = settings.database.prepared_statements
    if database_is_sqlite(settings.database_url):
        note(upgrade_database(settings.database_url, "head", prepared_statements=prepared))
    else:
        require_head(settings.database_url, prepared_statements=prepared)
    from app.logs import uvicorn_log_config
    from app.metrics import prepare_multiprocess_directory

    # before any worker imports prometheus-client (it picks its value store on import)
    prepare_multiprocess_directory(settings.server.metrics_dir)
    note(f"fairmatch listening on http://{format_host(host)}:{port} ({workers} worker{'s' * (workers > 1)})")
    uvicorn.run(
        "app.main:create_app",
        factory=True,
        host=host,
        port=port,
        workers=workers,
        log_config=uvicorn_log_config(settings.server.log_format, settings.server.log_level),
        access_log=False,  # the service writes its own access lines (route, duration, request id)
        # on SIGTERM: stop accepting, let in-flight requests finish, then exit
        timeout_graceful_shutdown=settings.server.graceful_shutdown_seconds,
    )


def refuse_open_bind_without_auth(settings: Settings, host: str) -> None:
    """With authentication off every caller is admin: only loopback, unless told explicitly."""
    import ipaddress

    from app.settings import AuthMode

    if settings.auth.mode is not AuthMode.none or settings.auth.allow_remote_without_auth:
        return
    try:
        loopback = host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    if not loopback:
        fail(
            f"auth.mode is none (every caller is admin): refusing to listen on {host}. "
            "Use auth.mode = token, or set auth.allow_remote_without_auth = true to serve "
            "anyone who reaches it as admin.",
            EXIT_USAGE,
        )


def format_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host


# --- db ---------------------------------------------------------------------


@db_cli.command("upgrade")
def db_upgrade(
    revision: Annotated[str, typer.Option(help="Alembic revision to upgrade to.")] = "head",
) -> None:
    """Migrate the configured database (`database_url`) to a revision."""
    settings = load_settings_or_exit()
    typer.echo(
        upgrade_database(settings.database_url, revision, prepared_statements=settings.database.prepared_statements)
    )


@db_cli.command("current")
def db_current() -> None:
    """Show the configured database's schema revision and whether it is the latest."""
    from app.db import migrate

    settings = load_settings_or_exit()
    url, prepared = settings.database_url, settings.database.prepared_statements
    current = on_database(url, lambda: read_revision(url, prepared_statements=prepared))
    head = migrate.head_revision(url)
    if current == head:
        typer.echo(f"{redacted(url)}: at {current} (head, up to date)")
    else:
        typer.echo(f"{redacted(url)}: at {current or 'none'}, head is {head}: run `fairmatch db upgrade`")


def upgrade_database(url: str, revision: str, *, prepared_statements: bool = True) -> str:
    """Migrate and say what was done."""
    from alembic.util import CommandError

    from app.db import migrate

    prepared = prepared_statements
    before = on_database(url, lambda: read_revision(url, prepared_statements=prepared))
    try:
        on_database(url, lambda: migrate.upgrade(url, revision, prepared_statements=prepared))
    except CommandError as exc:
        fail(f"cannot upgrade to {revision!r}: {exc}", EXIT_USAGE)
    after = on_database(url, lambda: read_revision(url, prepared_statements=prepared))
    if before == after:
        return f"{redacted(url)}: already at {after or 'none'}"
    return f"{redacted(url)}: upgraded from {before or 'none'} to {after}"


def require_head(url: str, *, prepared_statements: bool = True) -> None:
    """The app refuses an old schema too, but inside a server traceback: say it plainly first."""
    from app.db import migrate

    current = on_database(url, lambda: read_revision(url, prepared_statements=prepared_statements))
    head = migrate.head_revision(url)
    if current != head:
        fail(f"{redacted(url)} is at schema revision {current or 'none'}, this fairmatch needs {head}: "
             "run `fairmatch db upgrade`")  # fmt: skip


def read_revision(url: str, *, prepared_statements: bool = True) -> str | None:
    from app.db import migrate
    from app.db.engine import create_engine

    async def read() -> str | None:
        engine = create_engine(url, pool_size=1, prepared_statements=prepared_statements)
        try:
            async with engine.connect() as conn:
                return await migrate.current_revision(conn)
        finally:
            await engine.dispose()

    return asyncio.run(read())


def on_database(url: str, action: Callable[[], Any]) -> Any:
    """Run `action`, turning an unusable URL or an unreachable database into a one-line error."""
    from sqlalchemy.exc import ArgumentError, SQLAlchemyError

    try:
        return action()
    except (ArgumentError, ValueError) as exc:  # unparsable URL or unsupported scheme
        fail(f"database_url {redacted(url)}: {exc}", EXIT_USAGE)
    except SQLAlchemyError as exc:
        reason = str(getattr(exc, "orig", None) or exc).strip().splitlines()[0]
        fail(f"database {redacted(url)}: {reason}")


def database_is_sqlite(url: str) -> bool:
    from app.db.engine import is_sqlite, normalise_url

    return on_database(url, lambda: is_sqlite(normalise_url(url)))


def redacted(url: str) -> str:
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        return make_url(url).render_as_string(hide_password=True)
    except ArgumentError:
        return "<unparsable URL>"


# --- token ------------------------------------------------------------------

TTL_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_ttl(text: str) -> int:
    """`3600`, `90m`, `12h` or `7d` in seconds."""
    text = text.strip().lower()
    unit = TTL_UNITS.get(text[-1:], None)
    number = text[:-1] if unit else text
    if not number.isdigit() or int(number) == 0:
        raise typer.BadParameter(f"{text!r}: give seconds or a number with s, m, h or d (e.g. 12h)")
    return int(number) * (unit or 1)


@token_cli.command("create")
def token_create(
    role: Annotated[str, typer.Option(help="admin, operator, user or pilot.", show_default=False)],
    sub: Annotated[str, typer.Option(help="Subject: the user or pilot name.", show_default=False)],
    groups: Annotated[
        str | None, typer.Option(help="Comma-separated groups (a pilot's make it private).")
    ] = None,
    vo: Annotated[str | None, typer.Option(help="Virtual organisation.")] = None,
    site: Annotated[str | None, typer.Option(help="Pin a pilot to this site.")] = None,
    ttl: Annotated[str, typer.Option(help="Lifetime: seconds, or e.g. 30m, 12h, 7d.")] = "1d",
) -> None:
    """Sign a token with the configured key (auth.secret, or auth.private_key_file for RS256).

    The token is the last line of standard output.
    """
    from app.auth.tokens import Role, create_token

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


# --- submit -----------------------------------------------------------------


@cli.command()
def submit(
    file: Annotated[
        str,
        typer.Argument(
            metavar="FILE",
            show_default=False,
            help="Jobs as .json (a list, or {\"jobs\": [...]}) or .toml ([[jobs]] tables); "
            "- reads JSON from stdin.",
        ),
    ],
    url: UrlOption = None,
    token: TokenOption = None,
) -> None:
    """Queue the jobs in FILE and show their ids and task queues.

    Jobs go in batches of 10 000. Each batch is queued entirely or not at all, so when a
    batch fails the batches before it stay queued.
    """
    jobs = load_jobs(file)
    api = connect(url, token)
    batches = [jobs[i : i + BATCH_SIZE] for i in range(0, len(jobs), BATCH_SIZE)]
    if len(batches) == 1:
        answer = call_api(api, "POST", "/jobs", {"jobs": jobs})
    else:
        answer = {"jobs": submit_batches(api, batches, len(jobs))}
    show(answer, jobs_table)


def submit_batches(api: Service, batches: list[list[dict]], total: int) -> list[dict]:
    queued: list[dict] = []
    with batch_progress(total) as report:
        for number, batch in enumerate(batches, start=1):
            where = f"batch {number}/{len(batches)} (jobs {len(queued) + 1}-{len(queued) + len(batch)})"
            try:
                queued += call_api(api, "POST", "/jobs", {"jobs": batch})["jobs"]
            except typer.Exit:
                # the error's job indexes count from the batch's first job
                note(f"{where} failed; the {len(queued)} jobs before it stay queued")
                raise
            report(len(batch), f"{where} queued: {len(queued)}/{total} jobs")
    return queued


@contextmanager
def batch_progress(total: int) -> Iterator[Callable[[int, str], None]]:
    """Yields report(jobs_done, line): a progress bar on a terminal, else the line on stderr."""
    if not stderr_is_tty():
        yield lambda _done, line: note(line)
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    columns = (TextColumn("queueing jobs"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=Console(stderr=True)) as progress:
        task = progress.add_task("submit", total=total)
        yield lambda done, _line: progress.advance(task, done)


# --- taskqueues and match ---------------------------------------------------


@cli.command()
def taskqueues(url: UrlOption = None, token: TokenOption = None) -> None:
    """List all task queues.

    A task queue groups the waiting jobs with equal requirements.
    """
    answer = call_api(connect(url, token), "GET", "/taskqueues")
    show(answer, lambda doc: task_queue_table(doc, "Task queues"))


@cli.command()
def match(
    site: Annotated[str, typer.Option(help="Site of the resource (`any`: every site).", show_default=False)],
    cpu_time: Annotated[int, typer.Option(min=0, help="CPU seconds the slot offers.", show_default=False)],
    grid_ce: Annotated[str | None, typer.Option(help="Computing element of the resource.")] = None,
    platform: Annotated[list[str] | None, typer.Option(help=f"Platform offered. {REPEATABLE}")] = None,
    job_type: Annotated[list[str] | None, typer.Option(help=f"Job type accepted. {REPEATABLE}")] = None,
    tag: Annotated[list[str] | None, typer.Option(help=f"Tag offered. {REPEATABLE}")] = None,
    required_tag: Annotated[
        list[str] | None, typer.Option(help=f"Tag a job must ask for (also offered). {REPEATABLE}")
    ] = None,
    owner_group: Annotated[
        list[str] | None, typer.Option(help=f"Only jobs of this group. {REPEATABLE}")
    ] = None,
    owner: Annotated[str | None, typer.Option(help="Only jobs of this owner.")] = None,
    vo: Annotated[str | None, typer.Option(help="Only jobs of this VO.")] = None,
    max_ram_mb: Annotated[
        int | None, typer.Option(min=0, help="Memory of the slot in MB (adds the 1GB..NGB tags).")
    ] = None,
    processors: Annotated[
        int | None, typer.Option(min=1, help="Cores of the slot (adds the NProcessors tags).")
    ] = None,
    whole_node: Annotated[
        bool, typer.Option("--whole-node", help="The slot is a whole node (adds the WholeNode tag).")
    ] = False,
    url: UrlOption = None,
    token: TokenOption = None,
) -> None:
    """Dry run: eligible task queues and their chances.

    Shows what a pilot with this resource could match. Claims nothing: jobs stay Waiting.
    """
    resource = {
        "site": site,
        "cpu_time": cpu_time,
        "grid_ce": grid_ce,
        "platform": platform,
        "job_type": job_type,
        "tags": tag,
        "required_tags": required_tag,
        "owner_group": owner_group,
        "owner": owner,
        "vo": vo,
        "max_ram_mb": max_ram_mb,
        "number_of_processors": processors,
        "whole_node": whole_node or None,
    }
    given = {key: value for key, value in resource.items() if value not in (None, [])}
    answer = call_api(connect(url, token), "POST", "/taskqueues/matching", given)
    show(answer, lambda doc: task_queue_table(doc, f"Task queues eligible at {site}", with_probability=True))


# --- output -----------------------------------------------------------------


def show(document: Any, table: Callable[[Any], Table]) -> None:
    if stdout_is_tty():
        Console().print(table(document))
    else:
        print_json(document)


def jobs_table(document: dict) -> Table:
    table = new_table("Jobs", "id", "TQ", "status", caption=f"{len(document['jobs'])} jobs")
    for job in document["jobs"]:
        table.add_row(str(job["job_id"]), str(job["task_queue_id"]), job["status"])
    return table


def task_queue_table(document: dict, title: str, *, with_probability: bool = False) -> Table:
    table = new_table(title, *TQ_COLUMNS, *(["probability"] if with_probability else []))
    for tq in document["task_queues"]:
        row = [
            str(tq["task_queue_id"]), tq["owner"], tq["owner_group"], tq["vo"], str(tq["cpu_time"]),
            str(tq["priority_class"]), f"{tq['priority']:.4g}", str(tq["jobs"]),
            shortened(tq["sites"]), shortened(tq["platforms"]), shortened(tq["tags"]),
        ]  # fmt: skip
        if with_probability:
            row.append(f"{tq['probability']:.1%}")
        table.add_row(*row)
    return table


def new_table(title: str, *columns: str, caption: str | None = None) -> Table:
    # no vertical rules and single spaces between columns: twelve columns must fit a terminal
    table = Table(title=title, caption=caption, box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True)
    for name in columns:
        # numbers stay whole and aligned; names fold rather than lose characters to an ellipsis
        if name in NUMERIC_COLUMNS:
            table.add_column(name, justify="right", no_wrap=True)
        else:
            table.add_column(name, overflow="fold")
    return table


def fields_table(title: str, document: dict, caption: str | None = None) -> Table:
    """One object as a two-column table, field by field; lists shortened."""
    table = new_table(title, "field", "value", caption=caption)
    for name, value in document.items():
        if isinstance(value, list):
            shown = shortened(str(v) for v in value)
        elif isinstance(value, dict):
            shown = json.dumps(value, ensure_ascii=False)
        else:
            shown = "-" if value is None else str(value)
        table.add_row(name, shown)
    return table


def shortened(values: Iterable[str]) -> str:
    values = list(values)
    if not values:
        return "-"
    extra = len(values) - SHOWN_VALUES
    return ", ".join(values[:SHOWN_VALUES]) + (f" (+{extra})" if extra > 0 else "")


# --- sprio and sshare ---------------------------------------------------------

MULTIFACTOR_COLUMNS = ("fairshare", "age", "job_size", "user", "queue", "qos")


@cli.command()
def sprio(
    task_queue: Annotated[int | None, typer.Option("--tq", help="Only this task queue.")] = None,
    jobs: Annotated[int, typer.Option(min=0, max=10_000, help="Waiting jobs to list.")] = 0,
    url: UrlOption = None,
    token: TokenOption = None,
) -> None:
    """Why each task queue has its priority: the policy's terms or factors (like Slurm's sprio)."""
    query = f"?jobs_limit={jobs}" + (f"&task_queue_id={task_queue}" if task_queue else "")
    show(call_api(connect(url, token), "GET", f"/priorities{query}"), sprio_table)


def _origin_columns(policy: str, origin: dict | None) -> list[str]:
    origin = origin or {}
    if policy == "multifactor":
        factors = origin.get("factors", {})
        return [f"{factors.get(name, {}).get('contribution', 0):.1f}" for name in MULTIFACTOR_COLUMNS]
    if policy == "rank":
        terms = origin.get("terms", {})
        return [f"{origin.get('rank', 0):.2f}", str(origin.get("priority_level", ""))] + [
            f"{terms[level]['term']:.2f}" if level in terms else "-" for level in ("vo", "group", "user")
        ]
    return [f"{origin.get('entity_share', 0):.4g}", f"{origin.get('weight') or 0:.4g}",
            f"{origin.get('group_correction', 1) * origin.get('user_correction', 1):.3g}"]  # fmt: skip


def _origin_headers(policy: str) -> tuple[str, ...]:
    if policy == "multifactor":
        return tuple(name.upper().replace("_", "") for name in MULTIFACTOR_COLUMNS)
    if policy == "rank":
        return ("RANK", "LEVEL", "VO", "GROUP", "USER")
    return ("SHARE", "WEIGHT", "CORR")


def sprio_table(document: dict) -> Table:
    policy = document["policy"]
    table = new_table(f"Priorities ({policy}, lottery {document['lottery']})",
                      "TQ", "OWNER", "GROUP", "CLASS", "PRIORITY", *_origin_headers(policy))  # fmt: skip
    for tq in document["task_queues"]:
        table.add_row(str(tq["task_queue_id"]), tq["owner"], tq["owner_group"], str(tq["priority_class"]),
                      f"{tq['priority']:.6g}", *_origin_columns(policy, tq["origin"]))  # fmt: skip
    return table


@cli.command()
def sshare(url: UrlOption = None, token: TokenOption = None) -> None:
    """Shares, usage and fair-share factors of the last priority run (like Slurm's sshare)."""
    show(call_api(connect(url, token), "GET", "/shares"), sshare_table)


def sshare_table(document: dict) -> Table:
    if document.get("associations"):
        table = new_table("Associations", "Account", "User", "RawShares", "NormShares", "RawUsage",
                          "NormUsage", "EffectvUsage", "FairShare")  # fmt: skip
        for node in document["associations"]:
            indent = "  " * max(node["depth"] - 1, 0)  # sshare shows the tree by indentation
            table.add_row(indent + node["account"], node["user"], str(node["raw_shares"]),
                          *(f"{node[k]:.6f}" if node[k] is not None else "-" for k in
                            ("norm_shares", "raw_usage", "norm_usage", "effective_usage", "fairshare")))
        return table  # fmt: skip
    if document.get("entities"):
        table = new_table("Entities", "Group", "Owner", "Configured", "GroupCorr", "UserCorr", "Share", "NormShare")
        for e in document["entities"]:
            table.add_row(e["group"], e["owner"] or "(all)", f"{e['configured_share']:.6g}",
                          f"{e['group_correction']:.3g}", f"{e['user_correction']:.3g}",
                          f"{e['share']:.6g}", f"{e['normalised_share']:.4f}")  # fmt: skip
        return table
    return sprio_table({"policy": document["policy"], "lottery": "-", "task_queues": [
        {**tq, "origin": tq.get("origin")} for tq in document.get("task_queue_priorities", [])
    ]})  # fmt: skip


# The command groups of app/cli_*.py register themselves on `cli` when imported.
from app import cli_associations, cli_groups, cli_jobs, cli_limits, cli_status  # noqa: E402, F401


def main() -> None:
    """The console script: usage errors become one `error:` line too (exit 2)."""
    try:
        code = cli(standalone_mode=False)
    except typer.Abort:
        typer.echo("error: interrupted", err=True)
        code = EXIT_FAILED
    except Exception as exc:
        # click's exceptions (typer may bring its own copy of click): they carry their exit code
        if not (hasattr(exc, "format_message") and isinstance(getattr(exc, "exit_code", None), int)):
            raise
        if type(exc).__name__ == "NoArgsIsHelpError":
            exc.show()  # its message is the help text
        else:
            context = getattr(exc, "ctx", None)
            where = f" (see `{context.command_path} --help`)" if context else ""
            typer.echo(f"error: {exc.format_message()}{where}", err=True)
        code = exc.exit_code
    sys.exit(code if isinstance(code, int) else 0)


if __name__ == "__main__":
    main()
