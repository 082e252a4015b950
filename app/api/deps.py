"""Request-scoped dependencies: one database connection per request."""

from __future__ import annotations

import random
from collections.abc import AsyncIterator
from typing import Annotated

from fastapi import Depends, Request
from sqlalchemy.ext.asyncio import AsyncConnection

from app.settings import Settings


async def _connection(request: Request) -> AsyncIterator[AsyncConnection]:
    async with request.app.state.engine.connect() as conn:
        yield conn


def _settings(request: Request) -> Settings:
    return request.app.state.settings


def _rng(request: Request) -> random.Random:
    return request.app.state.rng


Connection = Annotated[AsyncConnection, Depends(_connection)]
CurrentSettings = Annotated[Settings, Depends(_settings)]
Rng = Annotated[random.Random, Depends(_rng)]
