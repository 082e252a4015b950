"""End-to-end fixtures shared by the test modules: token-mode servers, role clients, the CLI environment."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from fairmatch.auth.settings import AuthSettings
from fairmatch.auth.tokens import Role, create_token
from tests.conftest import PerBackend, Server, servers_of

TOKEN_SECRET = "end-to-end test secret, long enough for HS256"
TOKEN_SETTINGS = AuthSettings(mode="token", secret=TOKEN_SECRET)


def pytest_collection_modifyitems(items):
    for item in items:
        if "/e2e/" in str(item.fspath):
            item.add_marker(pytest.mark.e2e)


@pytest.fixture(scope="session")
def token_servers(databases, tmp_path_factory) -> Iterator[PerBackend]:
    """Per backend, a server in auth mode `token` (HS256 with TOKEN_SECRET) on the session's
    database, shared by the modules as the default server is (tests isolate by emptying tables)."""
    yield from servers_of(databases, tmp_path_factory, "token", AUTH__MODE="token", AUTH__SECRET=TOKEN_SECRET)


@pytest.fixture(scope="session")
def token_server(database, token_servers) -> Server:
    """The token-mode server of this test's backend."""
    return token_servers[database.backend]


@pytest.fixture
def as_role(token_server, clean) -> Iterator[Callable[..., httpx.Client]]:
    """A client of `token_server` acting with a freshly minted token of `role`."""
    clients: list[httpx.Client] = []

    def make(role: str, sub: str = "someone", **claims: Any) -> httpx.Client:
        bearer = create_token(TOKEN_SETTINGS, role=Role(role), sub=sub, ttl_seconds=600, **claims)
        c = token_server.client(headers={"Authorization": f"Bearer {bearer}"})
        clients.append(c)
        return c

    yield make
    for c in clients:
        c.close()


@pytest.fixture
def cli_env(tmp_path) -> dict[str, str]:
    """The environment without any FAIRMATCH_* setting, and an empty config file."""
    config = tmp_path / "empty.toml"
    config.write_text("")
    env = {k: v for k, v in os.environ.items() if not k.startswith("FAIRMATCH_")}
    return {**env, "FAIRMATCH_CONFIG": str(config)}
