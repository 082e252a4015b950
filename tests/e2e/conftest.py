"""End-to-end fixtures shared by the test modules: token-mode servers and the CLI environment."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tests.conftest import TOKEN_SECRET, PerBackend, Server, servers_of


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
def cli_env(tmp_path) -> dict[str, str]:
    """The environment without any FAIRMATCH_* setting, and an empty config file."""
    config = tmp_path / "empty.toml"
    config.write_text("")
    env = {k: v for k, v in os.environ.items() if not k.startswith("FAIRMATCH_")}
    return {**env, "FAIRMATCH_CONFIG": str(config)}
