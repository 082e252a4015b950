"""The client commands' HTTP: where the service is (--url), the bearer token (--token), the request helpers."""

from __future__ import annotations

import functools
import ssl
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Annotated, Any
from urllib.parse import quote

import httpx
import typer

from fairmatch.cli.common import EXIT_USAGE, fail, load_settings_or_exit

API_PREFIX = "/api/v1"  # fairmatch.main.API_PREFIX; not imported, as that pulls in FastAPI and SQLAlchemy
HTTP_TIMEOUT = httpx.Timeout(300.0, connect=10.0)  # a full batch may take a while to queue

UrlOption = Annotated[
    str | None,
    typer.Option(
        "--url",
        envvar="FAIRMATCH_URL",
        show_default="http://127.0.0.1:<server.port setting>",
        help="Base URL of the service.",
    ),
]
TokenOption = Annotated[
    str | None,
    typer.Option(
        "--token",
        envvar="FAIRMATCH_TOKEN",
        show_default=False,
        # an option's value shows in process listings; the variable does not
        help="Bearer token for auth mode `token` (better: set FAIRMATCH_TOKEN).",
    ),
]


@dataclass(frozen=True, slots=True)
class Service:
    """Where the service is and who the caller is to it."""

    url: str
    token: str | None = None

    def __repr__(self) -> str:  # never print the token
        return f"Service({self.url!r}, token={'set' if self.token else 'none'})"


def connect(url: str | None, token: str | None) -> Service:
    return Service(service_url(url), bearer_token(token))


def service_url(url: str | None) -> str:
    if url:
        return url.rstrip("/")
    return f"http://127.0.0.1:{load_settings_or_exit().server.port}"


def bearer_token(token: str | None) -> str | None:
    """The token without surrounding blanks or a pasted `Bearer ` prefix; None when empty."""
    token = (token or "").strip()
    if token[:7].lower() == "bearer ":
        token = token[7:].strip()
    if token and not (token.isascii() and token.isprintable() and " " not in token):
        fail("--token / FAIRMATCH_TOKEN holds spaces or control characters: it is not a token", EXIT_USAGE)
    return token or None


@functools.cache
def tls_context() -> ssl.SSLContext:
    """httpx's default verification (certifi, or SSL_CERT_FILE / SSL_CERT_DIR), loaded once a
    process: loading it takes ~30 ms, and a command may make many requests."""
    return httpx.create_ssl_context()


def request_api(api: Service, method: str, path: str, *, accept: Iterable[int] = (), **kwargs: Any) -> httpx.Response:
    """One request; a transport failure or an error answer ends the command with a one-line message.

    Error statuses in `accept` are returned instead, for the caller to handle.
    """
    headers = dict(kwargs.pop("headers", None) or {})
    if api.token:
        headers["authorization"] = f"Bearer {api.token}"
    try:
        response = httpx.request(
            method,
            f"{api.url}{API_PREFIX}{path}",
            headers=headers,
            timeout=HTTP_TIMEOUT,
            verify=tls_context(),
            **kwargs,
        )
    except (httpx.InvalidURL, httpx.UnsupportedProtocol) as exc:
        fail(f"--url {api.url!r} is not a usable URL: {exc}", EXIT_USAGE)
    except httpx.ConnectError as exc:
        fail(f"cannot connect to fairmatch at {api.url} ({exc}); is `fairmatch serve` running there?")
    except httpx.TransportError as exc:
        fail(f"no answer from fairmatch at {api.url}: {type(exc).__name__} {exc}".rstrip())
    if response.is_error and response.status_code not in accept:
        hint = " (give --token or set FAIRMATCH_TOKEN)" if response.status_code == 401 and not api.token else ""
        fail(problem_message(response) + hint)
    return response


def call_api(api: Service, method: str, path: str, body: Any = None, *, accept: Iterable[int] = ()) -> Any:
    """One JSON request, its JSON answer (None for an accepted error status)."""
    response = request_api(api, method, path, json=body, accept=accept)
    if response.is_error:
        return None
    try:
        return response.json()
    except ValueError:
        fail(f"the answer from {api.url} is not JSON; is it a fairmatch service?")


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


def path_part(value: str | int) -> str:
    """A name as one URL path segment: a `?` or `#` in it must not change the request."""
    return quote(str(value), safe="")


def call_api_text(api: Service, method: str, path: str, content: str | None = None) -> httpx.Response:
    """call_api for a text/plain body and answer."""
    headers = {"accept": "text/plain, application/json"}
    if content is not None:
        headers["content-type"] = "text/plain; charset=utf-8"
    return request_api(api, method, path, content=content, headers=headers)
