"""`fairmatch serve`: run the HTTP service, after checking where it may listen and its schema."""

from __future__ import annotations

import signal
from typing import TYPE_CHECKING, Annotated, Any

import typer

from fairmatch.cli.common import EXIT_FAILED, EXIT_USAGE, fail, load_settings_or_exit, note
from fairmatch.cli.database import database_is_sqlite, require_head, upgrade_database

if TYPE_CHECKING:
    from fairmatch.settings import Settings

app = typer.Typer()


@app.command()
def serve(
    host: Annotated[str | None, typer.Option(help="Interface to bind to.", show_default="server.host setting")] = None,
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
    refuse_an_address_in_use(host, port, workers)
    prepared = settings.database.prepared_statements
    if database_is_sqlite(settings.database_url):
        note(upgrade_database(settings.database_url, "head", prepared_statements=prepared))
    else:
        require_head(settings.database_url, prepared_statements=prepared)
    from fairmatch.logs import uvicorn_log_config
    from fairmatch.metrics_dir import prepare_multiprocess_directory, remove_made_directory

    # before this process or a worker imports prometheus-client (it picks its value store on import)
    metrics_dir = prepare_multiprocess_directory(settings.server.metrics_dir)
    note(f"fairmatch listening on http://{format_host(host)}:{port} ({workers} worker{'s' * (workers > 1)})")
    # the client commands default to the configured port on loopback: say where this one is
    note(f"client commands: export FAIRMATCH_URL={client_url(host, port)}")
    # uvicorn re-raises the signal that stopped it once it has shut down; a handler of
    # ours (which it restores first) turns it into a clean exit, so the cleanup runs
    for stop in (signal.SIGTERM, signal.SIGINT):
        signal.signal(stop, _exit_cleanly)
    try:
        uvicorn.run(
            "fairmatch.main:create_app",
            factory=True,
            host=host,
            port=port,
            workers=workers,
            log_config=uvicorn_log_config(settings.server.log_format, settings.server.log_level),
            access_log=False,  # the service writes its own access lines (route, duration, request id)
            # on SIGTERM: stop accepting, let in-flight requests finish, then exit
            # uvicorn annotates an int but waits with asyncio.wait_for, which takes any number of seconds
            timeout_graceful_shutdown=settings.server.graceful_shutdown_seconds,  # type: ignore[arg-type]
        )
    finally:
        remove_made_directory(metrics_dir, settings.server.metrics_dir)


def _exit_cleanly(signum: int, frame: object) -> None:
    raise SystemExit(0)


def refuse_open_bind_without_auth(settings: Settings, host: str) -> None:
    """With authentication off every caller is admin: only loopback, unless told explicitly."""
    import ipaddress

    from fairmatch.auth.settings import AuthMode

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


def refuse_an_address_in_use(host: str, port: int, workers: int) -> None:
    """Bind as uvicorn will, then let go, so that a port another program listens on stops the
    start in one line, before the database is migrated and anything announced.

    Like uvicorn the probe sets SO_REUSEADDR: a port whose last connections wait in TIME_WAIT
    (a restart) is free, one with a listening socket is not. The workers share the one socket
    uvicorn binds in the first process, so one probe stands for any number of them. With one
    worker uvicorn binds every address the host resolves to (IPv6 ones IPv6 only); with more,
    the host itself, IPv6 when it holds a colon.
    """
    import errno
    import socket

    targets: list[tuple[socket.AddressFamily, tuple[Any, ...]]]
    if workers > 1:
        targets = [(socket.AF_INET6 if ":" in host else socket.AF_INET, (host, port))]
    else:
        try:
            found = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        except socket.gaierror as exc:
            fail(f"cannot listen on {host}: {exc.strerror}", EXIT_USAGE)
        targets = list(dict.fromkeys((family, address[:2]) for family, _, _, _, address in found))
    for family, address in targets:
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6 and workers == 1:
                probe.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            try:
                probe.bind(address)
            except socket.gaierror as exc:  # a host name, with several workers
                fail(f"cannot listen on {host}: {exc.strerror}", EXIT_USAGE)
            except OSError as exc:
                where = f"{format_host(str(address[0]))}:{port}"
                if exc.errno == errno.EADDRINUSE:
                    fail(f"cannot listen on {where}: another program is listening there; stop it, or choose "
                         "another port (--port, server.port or FAIRMATCH_SERVER__PORT)", EXIT_FAILED)  # fmt: skip
                if exc.errno == errno.EADDRNOTAVAIL:
                    fail(f"cannot listen on {where}: no interface of this machine has that address", EXIT_USAGE)
                fail(f"cannot listen on {where}: {exc.strerror or exc}", EXIT_FAILED)


def client_url(host: str, port: int) -> str:
    """The URL a client on this machine reaches the service at (a wildcard bind through loopback)."""
    reachable = {"0.0.0.0": "127.0.0.1", "::": "::1"}.get(host, host)
    return f"http://{format_host(reachable)}:{port}"


def format_host(host: str) -> str:
    """A host as it goes in a URL: IPv6 addresses in brackets."""
    return f"[{host}]" if ":" in host else host
