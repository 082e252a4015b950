"""Request-scoped dependencies: one database connection per request, the caller."""

from __future__ import annotations

import ipaddress
import random
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Request
from sqlalchemy.ext.asyncio import AsyncConnection

from app.auth.tokens import ANONYMOUS_ADMIN, Principal
from app.errors import Forbidden, Unauthorized
from app.services.keeper import Keeper
from app.settings import AuthMode, Settings


# Dependencies are coroutines: FastAPI runs plain functions in a thread pool,
# a hand-off that costs more than these take.
async def _connection(request: Request) -> AsyncIterator[AsyncConnection]:
    async with request.app.state.connections.connect() as conn:
        yield conn


async def _settings(request: Request) -> Settings:
    return request.app.state.settings


@dataclass(frozen=True, slots=True)
class MatchingContext:
    """What a match needs from the process, built once at start-up: one dependency
    on the hot path instead of three."""

    settings: Settings
    rng: random.Random
    keeper: Keeper


async def _matching_context(request: Request) -> MatchingContext:
    return request.app.state.matching


def _is_loopback(host: str | None) -> bool:
    try:
        return host is not None and ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


async def _caller(request: Request) -> Principal:
    settings: Settings = request.app.state.settings
    if settings.auth.mode is AuthMode.none:
        client = request.client.host if request.client else None
        if not settings.auth.allow_remote_without_auth and not _is_loopback(client):
            raise Forbidden("authentication is off: only loopback callers are served")
        return ANONYMOUS_ADMIN
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise Unauthorized("a bearer token is required (Authorization: Bearer <token>)")
    return request.app.state.verifier.verify(token.strip())


Connection = Annotated[AsyncConnection, Depends(_connection)]
CurrentSettings = Annotated[Settings, Depends(_settings)]
Matching = Annotated[MatchingContext, Depends(_matching_context)]
Caller = Annotated[Principal, Depends(_caller)]
