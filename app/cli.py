"""The `fairmatch` command: run the service, migrate its database, talk to it over HTTP.

Client commands print rich tables on a terminal and the server's JSON otherwise.
Heavy modules (uvicorn, SQLAlchemy, Alembic, settings) are imported inside the
commands that need them, so client commands start quickly.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import sys
import tomllib
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import httpx
import typer
from rich import box
from rich.console import Console
from rich.table import Table

if TYPE_CHECKING:
    from app.settings import Settings

API_PREFIX = "/api/v1"  # app.main.API_PREFIX; not imported, as that pulls in FastAPI and SQLAlchemy
BATCH_SIZE = 10_000  # the server's largest POST /jobs
HTTP_TIMEOUT = httpx.Timeout(300.0, connect=10.0)  # a full batch may take a while to queue
SHOWN_VALUES = 3  # longer list cells are shortened to "a, b, c (+N)"
REPEATABLE = "Repeat for several."
TQ_COLUMNS = (
    "id", "owner", "group", "vo", "cpu_time", "class", "priority", "jobs", "sites", "platforms", "tags",
)  # fmt: skip
NUMERIC_COLUMNS = {"id", "TQ", "cpu_time", "class", "priority", "jobs", "probability"}

EXIT_FAILED = 1  # the service or the database said no, or could not be reached
EXIT_USAGE = 2  # the user's input or settings are wrong (also click's usage-error code)

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


def fail(message: str, code: int = EXIT_FAILED) -> NoReturn:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code)


def note(message: str) -> None:
    typer.echo(message, err=True)


def stdout_is_tty() -> bool:
    """The one place that decides between tables and JSON (tests replace it)."""
    return sys.stdout.isatty()


def load_settings_or_exit() -> Settings:
    from pydantic import ValidationError

    from app.settings import ConfigFileError, get_settings

    try:
        return get_settings()
    except ConfigFileError as exc:
        fail(f"invalid settings: {exc}", EXIT_USAGE)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or 'settings'}: {err['msg']}" for err in exc.errors()
        )
        fail(f"invalid settings: {problems}", EXIT_USAGE)


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
    if database_is_sqlite(settings.database_url):
        note(upgrade_database(settings.database_url, "head"))
    else:
        require_head(settings.database_url)
    note(f"fairmatch listening on http://{format_host(host)}:{port} ({workers} worker{'s' * (workers > 1)})")
    uvicorn.run(
        "app.main:create_app",
        factory=True,
        host=host,
        port=port,
        workers=workers,
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
    typer.echo(upgrade_database(load_settings_or_exit().database_url, revision))


@db_cli.command("current")
def db_current() -> None:
    """Show the configured database's schema revision and whether it is the latest."""
    from app.db import migrate

    url = load_settings_or_exit().database_url
    current = on_database(url, lambda: read_revision(url))
    head = migrate.head_revision(url)
    if current == head:
        typer.echo(f"{redacted(url)}: at {current} (head, up to date)")
    else:
        typer.echo(f"{redacted(url)}: at {current or 'none'}, head is {head}: run `fairmatch db upgrade`")


def upgrade_database(url: str, revision: str) -> str:
    """Migrate and say what was done."""
    from alembic.util import CommandError

    from app.db import migrate

    before = on_database(url, lambda: read_revision(url))
    try:
        on_database(url, lambda: migrate.upgrade(url, revision))
    except CommandError as exc:
        fail(f"cannot upgrade to {revision!r}: {exc}", EXIT_USAGE)
    after = on_database(url, lambda: read_revision(url))
    if before == after:
        return f"{redacted(url)}: already at {after or 'none'}"
    return f"{redacted(url)}: upgraded from {before or 'none'} to {after}"


def require_head(url: str) -> None:
    """The app refuses an old schema too, but inside a server traceback: say it plainly first."""
    from app.db import migrate

    current, head = on_database(url, lambda: read_revision(url)), migrate.head_revision(url)
    if current != head:
        fail(f"{redacted(url)} is at schema revision {current or 'none'}, this fairmatch needs {head}: "
             "run `fairmatch db upgrade`")  # fmt: skip


def read_revision(url: str) -> str | None:
    from app.db import migrate
    from app.db.engine import create_engine

    async def read() -> str | None:
        engine = create_engine(url, pool_size=1)
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


# --- HTTP client ------------------------------------------------------------

UrlOption = Annotated[
    str | None,
    typer.Option(
        "--url",
        envvar="FAIRMATCH_URL",
        show_default="http://127.0.0.1:<server.port setting>",
        help="Base URL of the service.",
    ),
]


def service_url(url: str | None) -> str:
    if url:
        return url.rstrip("/")
    return f"http://127.0.0.1:{load_settings_or_exit().server.port}"


def request_api(url: str, method: str, path: str, **kwargs: Any) -> httpx.Response:
    """One request; a transport failure or an error answer ends the command with a one-line message."""
    try:
        response = httpx.request(method, f"{url}{API_PREFIX}{path}", timeout=HTTP_TIMEOUT, **kwargs)
    except (httpx.InvalidURL, httpx.UnsupportedProtocol) as exc:
        fail(f"--url {url!r} is not a usable URL: {exc}", EXIT_USAGE)
    except httpx.ConnectError as exc:
        fail(f"cannot connect to fairmatch at {url} ({exc}); is `fairmatch serve` running there?")
    except httpx.TransportError as exc:
        fail(f"no answer from fairmatch at {url}: {type(exc).__name__} {exc}".rstrip())
    if response.is_error:
        fail(problem_message(response))
    return response


def call_api(url: str, method: str, path: str, body: Any = None) -> Any:
    """One JSON request, its JSON answer."""
    response = request_api(url, method, path, json=body)
    try:
        return response.json()
    except ValueError:
        fail(f"the answer from {url} is not JSON; is it a fairmatch service?")


def problem_message(response: httpx.Response) -> str:
    """`<title>: <detail>` from an RFC 9457 problem, or the status line if there is none."""
    try:
        problem = response.json()
    except ValueError:
        problem = None
    if isinstance(problem, dict) and problem.get("title"):
        title, detail = problem["title"], problem.get("detail")
    else:
        title, detail = f"HTTP {response.status_code} {response.reason_phrase}", response.text[:200].strip()
    return f"{title}: {detail}" if detail and detail != title else str(title)


def print_json(document: Any) -> None:
    typer.echo(json.dumps(document, indent=2, ensure_ascii=False))


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
) -> None:
    """Queue the jobs in FILE and show their ids and task queues.

    Jobs go in batches of 10 000. Each batch is queued entirely or not at all, so when a
    batch fails the batches before it stay queued.
    """
    jobs = load_jobs(file)
    base = service_url(url)
    batches = [jobs[i : i + BATCH_SIZE] for i in range(0, len(jobs), BATCH_SIZE)]
    if len(batches) == 1:
        answer = call_api(base, "POST", "/jobs", {"jobs": jobs})
    else:
        answer = {"jobs": submit_batches(base, batches, len(jobs))}
    show(answer, jobs_table)


def submit_batches(url: str, batches: list[list[dict]], total: int) -> list[dict]:
    queued: list[dict] = []
    for number, batch in enumerate(batches, start=1):
        where = f"batch {number}/{len(batches)} (jobs {len(queued) + 1}-{len(queued) + len(batch)})"
        try:
            queued += call_api(url, "POST", "/jobs", {"jobs": batch})["jobs"]
        except typer.Exit:
            # the error's job indexes count from the batch's first job
            note(f"{where} failed; the {len(queued)} jobs before it stay queued")
            raise
        note(f"{where} queued: {len(queued)}/{total} jobs")
    return queued


def load_jobs(file: str) -> list[dict]:
    text, kind = read_jobs_file(file)
    name = "stdin" if file == "-" else file
    document = parse_document(text, kind, name)
    return job_list(document, name)


def read_jobs_file(file: str) -> tuple[str, str]:
    if file == "-":
        return sys.stdin.read(), "json"
    path = Path(file)
    kind = path.suffix.lower().lstrip(".")
    if kind not in ("json", "toml"):
        fail(f"{file}: the file name must end in .json or .toml (or use - for JSON on stdin)", EXIT_USAGE)
    try:
        return path.read_text(encoding="utf-8"), kind
    except OSError as exc:
        fail(f"cannot read {file}: {exc.strerror or exc}", EXIT_USAGE)
    except UnicodeDecodeError as exc:
        fail(f"{file} is not UTF-8 text: {exc.reason} at byte {exc.start}", EXIT_USAGE)


def parse_document(text: str, kind: str, name: str) -> Any:
    try:
        if kind == "toml":
            # TOML dates and times have no JSON form: send them as ISO 8601 strings
            return json.loads(json.dumps(tomllib.loads(text), default=iso_format))
        return json.loads(text)
    except tomllib.TOMLDecodeError as exc:
        fail(f"{name} is not valid TOML: {exc}", EXIT_USAGE)
    except json.JSONDecodeError as exc:
        fail(f"{name} is not valid JSON: {exc}", EXIT_USAGE)


def iso_format(value: Any) -> str:
    if isinstance(value, (dt.date, dt.time)):  # datetime is a date
        return value.isoformat()
    raise TypeError(f"{type(value).__name__} has no JSON form")


def job_list(document: Any, name: str) -> list[dict]:
    if isinstance(document, dict):
        if set(document) != {"jobs"}:
            found = ", ".join(sorted(document)) or "nothing"
            fail(f"{name}: expected only a 'jobs' list (or [[jobs]] tables), found: {found}", EXIT_USAGE)
        document = document["jobs"]
    if not isinstance(document, list):
        fail(f"{name}: expected a list of jobs, found {type(document).__name__}", EXIT_USAGE)
    if not document:
        fail(f"{name} contains no jobs", EXIT_USAGE)
    for number, job in enumerate(document, start=1):
        if not isinstance(job, dict):
            fail(f"{name}: job {number} is a {type(job).__name__}, not an object", EXIT_USAGE)
    return document


# --- taskqueues and match ---------------------------------------------------


@cli.command()
def taskqueues(url: UrlOption = None) -> None:
    """List all task queues.

    A task queue groups the waiting jobs with equal requirements.
    """
    answer = call_api(service_url(url), "GET", "/taskqueues")
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
    answer = call_api(service_url(url), "POST", "/taskqueues/matching", given)
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


def shortened(values: Iterable[str]) -> str:
    values = list(values)
    if not values:
        return "-"
    extra = len(values) - SHOWN_VALUES
    return ", ".join(values[:SHOWN_VALUES]) + (f" (+{extra})" if extra > 0 else "")


# --- associations -----------------------------------------------------------

associations_cli = typer.Typer(help="The Slurm association tree (sacctmgr format).", no_args_is_help=True)
cli.add_typer(associations_cli, name="associations")

SACCTMGR_COMMAND = "sacctmgr -n -p show assoc cluster=X format=account,share,parentn,user"


@associations_cli.command("import")
def associations_import(
    file: Annotated[
        str,
        typer.Argument(
            metavar="FILE", show_default=False, help=f"The output of `{SACCTMGR_COMMAND}`; - reads stdin."
        ),
    ],
    url: UrlOption = None,
) -> None:
    """Replace the whole association tree with a sacctmgr dump.

    All or nothing: a dump with a wrong line is refused, naming the line, and the tree stays as it was.
    """
    text = read_dump(file)
    response = call_api_text(service_url(url), "PUT", "/associations", content=text)
    answer = response.json()
    if stdout_is_tty():
        typer.echo(f"imported {answer['associations']} associations")
    else:
        print_json(answer)


@associations_cli.command("export")
def associations_export(url: UrlOption = None) -> None:
    """Print the association tree as a sacctmgr dump, byte for byte the text imported."""
    response = call_api_text(service_url(url), "GET", "/associations")
    # not typer.echo: the text must reach stdout unchanged, with no newline added
    sys.stdout.write(response.text)
    sys.stdout.flush()


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


def call_api_text(url: str, method: str, path: str, content: str | None = None) -> httpx.Response:
    """call_api for a text/plain body and answer."""
    headers = {"accept": "text/plain, application/json"}
    if content is not None:
        headers["content-type"] = "text/plain; charset=utf-8"
    return request_api(url, method, path, content=content, headers=headers)


# --- sprio and sshare ---------------------------------------------------------

MULTIFACTOR_COLUMNS = ("fairshare", "age", "job_size", "user", "queue", "qos")


@cli.command()
def sprio(
    task_queue: Annotated[int | None, typer.Option("--tq", help="Only this task queue.")] = None,
    jobs: Annotated[int, typer.Option(min=0, max=10_000, help="Waiting jobs to list.")] = 0,
    url: UrlOption = None,
) -> None:
    """Why each task queue has its priority: the policy's terms or factors (like Slurm's sprio)."""
    query = f"?jobs_limit={jobs}" + (f"&task_queue_id={task_queue}" if task_queue else "")
    show(call_api(service_url(url), "GET", f"/priorities{query}"), sprio_table)


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
def sshare(url: UrlOption = None) -> None:
    """Shares, usage and fair-share factors of the last priority run (like Slurm's sshare)."""
    show(call_api(service_url(url), "GET", "/shares"), sshare_table)


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


def main() -> None:
    cli()


if __name__ == "__main__":
    main()
