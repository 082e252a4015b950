"""The API's contract, tested in process: the same fixtures as tests/e2e/, served without a socket.

`server`, `token_server`, `server_factory`, `private_server_factory` and
`quiet_server` here are the application served inside the test process
(tests/asgi_server.py): its lifespan and background loops run as in a uvicorn
worker, requests reach it through an `httpx.Client` with the same base URL
shape. So `client` and `as_role` (tests/conftest.py) work here unchanged, and a
module moves between tests/e2e/ and tests/api/ without edits.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.asgi_server import InProcessServer
from tests.conftest import TOKEN_SECRET, PerBackend, Start, quiet_server_of, servers_of, servers_on, start_in_process


@pytest.fixture(scope="session")
def servers(databases, tmp_path_factory) -> Iterator[PerBackend]:
    """Per backend, the default-settings application on the session's database."""
    yield from servers_of(databases, tmp_path_factory, "app", start=start_in_process)


@pytest.fixture(scope="session")
def server(database, servers) -> InProcessServer:
    return servers[database.backend]


@pytest.fixture(scope="session")
def token_servers(databases, tmp_path_factory) -> Iterator[PerBackend]:
    """Per backend, the application in auth mode `token` (HS256 with TOKEN_SECRET)."""
    yield from servers_of(
        databases, tmp_path_factory, "token-app", start=start_in_process, AUTH__MODE="token", AUTH__SECRET=TOKEN_SECRET
    )


@pytest.fixture(scope="session")
def token_server(database, token_servers) -> InProcessServer:
    return token_servers[database.backend]


@pytest.fixture
def server_factory(database, clean, tmp_path) -> Iterator[Start]:
    """Applications with other settings on the session's database, emptied first; stopped after the test."""
    yield from servers_on(database, tmp_path, start=start_in_process)


@pytest.fixture
def private_server_factory(private_database, tmp_path) -> Iterator[Start]:
    yield from servers_on(private_database, tmp_path, start=start_in_process)


@pytest.fixture
def quiet_server(database, quiet_servers, clean, tmp_path_factory) -> Start:
    return quiet_server_of(database, quiet_servers, tmp_path_factory, start_in_process)
