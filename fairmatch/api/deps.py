"""Request-scoped dependencies: one database connection per request, the caller.

A route declares the roles it admits in its signature, with one of the aliases
at the end (`caller: Admin`, `caller: Submitters`, ...): FastAPI resolves the
caller and refuses any other role with 403 before it reads the body or asks
for a connection. The few routes served without a caller are OPEN_PATHS;
tests/unit/test_route_roles.py holds every route of the app to one or the other.
"""

from __future__ import annotations

import functools
import ipaddress
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from typing import Annotated

from fastapi import Depends, Request
from sqlalchemy.ext.asyncio import AsyncConnection

from fairmatch.auth import policy
from fairmatch.auth.settings import AuthMode
from fairmatch.auth.tokens import ANONYMOUS_ADMIN, Principal, Role
from fairmatch.errors import Forbidden, Unauthorized
from fairmatch.services.process import Process
from fairmatch.settings import Settings


def process_of(request: Request) -> Process:
    """This process's state (`fairmatch.services.process`), made once when the app started."""
    return request.app.state.process


def connection(request: Request) -> AbstractAsyncContextManager[AsyncConnection]:
    """The request's connection, for a route that takes it itself (`async with`): the
    pilots' calls, where FastAPI's handling of a `yield` dependency cost more than the
    rest of their dependencies together. The route also asks for none when its body
    is refused."""
    process: Process = request.app.state.process
    return process.connections.connect()


# Dependencies are coroutines: FastAPI runs plain functions in a thread pool,
# a hand-off that costs more than these take.
async def _connection(request: Request) -> AsyncIterator[AsyncConnection]:
    async with connection(request) as conn:
        yield conn


async def _reading(request: Request) -> AsyncIterator[AsyncConnection]:
    async with process_of(request).connections.reading() as conn:
        yield conn


async def _settings(request: Request) -> Settings:
    return request.app.state.settings


async def _process(request: Request) -> Process:
    return process_of(request)


@functools.lru_cache(maxsize=1024)  # parsing an address costs more than the rest of the check
def _is_loopback(host: str | None) -> bool:
    try:
        return host is not None and ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def authenticate(request: Request, token: str | None) -> Principal:
    """The caller of `request` who presents `token` (the API's bearer token, the console's
    cookie): with authentication off, the anonymous admin, served on loopback only."""
    settings: Settings = request.app.state.settings
    if settings.auth.mode is AuthMode.none:
        client = request.client.host if request.client else None
        if not settings.auth.allow_remote_without_auth and not _is_loopback(client):
            raise Forbidden("authentication is off: only loopback callers are served")
        return ANONYMOUS_ADMIN
    if not token:
        raise Unauthorized("a bearer token is required (Authorization: Bearer <token>)")
    return request.app.state.verifier.verify(token)


def _bearer(request: Request) -> str | None:
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    return token.strip() if scheme.lower() == "bearer" and token.strip() else None


def bearer_caller(request: Request) -> Principal:
    """The API's caller: the one its bearer token names."""
    return authenticate(request, _bearer(request))


def allow(
    *roles: Role, identify: Callable[[Request], Principal] = bearer_caller
) -> Callable[[Request], Awaitable[Principal]]:
    """The dependency that gives the caller `identify` finds (the API's: by its bearer token;
    401 without a valid one) when its role is one of `roles`, and 403 for another role. Its
    `roles` attribute names them."""
    admitted = frozenset(roles)
    names = ", ".join(r.value for r in roles)

    async def caller(request: Request) -> Principal:
        principal = identify(request)
        if principal.role not in admitted:
            raise Forbidden(f"role {principal.role.value} may not do this (allowed: {names})")
        return principal

    caller.roles = roles  # type: ignore[attr-defined]
    return caller


# Served without a caller: the probes and the scrape endpoint (their callers carry no
# token), the API's own description, and the console's sign-in page and static files.
# Every other route declares its roles.
OPEN_PATHS = frozenset({
    "/healthz", "/readyz", "/metrics", "/openapi.json", "/docs", "/docs/static/{name}",
    "/ui/sign-in", "/ui/static/{name}",
})  # fmt: skip

Connection = Annotated[AsyncConnection, Depends(_connection)]
# a connection in a read transaction, for a route that reads data-access classes and writes nothing
Reading = Annotated[AsyncConnection, Depends(_reading)]
CurrentSettings = Annotated[Settings, Depends(_settings)]
ThisProcess = Annotated[Process, Depends(_process)]

# The callers a route admits (fairmatch/auth/policy.py names the role sets).
Admin = Annotated[Principal, Depends(allow(*policy.ADMINS))]
Operators = Annotated[Principal, Depends(allow(*policy.OPERATORS))]
Submitters = Annotated[Principal, Depends(allow(*policy.SUBMITTERS))]
Pilots = Annotated[Principal, Depends(allow(*policy.PILOTS))]
PilotsAndOperators = Annotated[Principal, Depends(allow(*policy.PILOTS_AND_OPERATORS))]
AnyRole = Annotated[Principal, Depends(allow(*policy.ANYONE))]
