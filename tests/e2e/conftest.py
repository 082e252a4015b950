"""End-to-end fixtures shared by the test modules: token-mode servers, the CLI environment, console sessions."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from fairmatch.auth.tokens import Role, create_token
from tests.conftest import TOKEN_SECRET, TOKEN_SETTINGS, PerBackend, Server, servers_of
from tests.e2e.console_pages import CSRF


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


@dataclass
class Console:
    """A browser's view of the console over plain HTTP: its session cookie, and forms sent
    as a page of the console sends them (its Origin and the page's CSRF token)."""

    client: httpx.Client
    origin: str

    def get(self, path: str, **kwargs: Any) -> httpx.Response:
        return self.client.get(path, **kwargs)

    def csrf(self, path: str = "/ui/jobs") -> str:
        """The CSRF token the forms of the page at `path` carry."""
        found = CSRF.search(self.client.get(path).text)
        assert found, f"no form with a CSRF token on {path}"
        return found.group(1)

    def submit(
        self, path: str, fields: dict[str, str], *, confirm: bool = True, page: str = "/ui/jobs"
    ) -> httpx.Response:
        """Post a console form; with `confirm`, the confirmation page's form too."""
        form = {**fields, "csrf": self.csrf(page)}
        answer = self.client.post(path, data=form, headers={"Origin": self.origin})
        if confirm and answer.status_code == 200 and 'id="confirmation"' in answer.text:
            answer = self.client.post(path, data={**form, "confirmed": "yes"}, headers={"Origin": self.origin})
        return answer


@pytest.fixture
def console_as(token_server, clean) -> Iterator[Callable[..., Console]]:
    """A console session on `token_server`, signed in through the sign-in form with a
    freshly minted token of `role`."""
    clients: list[httpx.Client] = []

    def make(role: str, sub: str = "someone", **claims: Any) -> Console:
        token = create_token(TOKEN_SETTINGS, role=Role(role), sub=sub, ttl_seconds=600, **claims)
        c = httpx.Client(base_url=token_server.url, timeout=30, verify=False)
        clients.append(c)
        answer = c.post("/ui/sign-in", data={"token": token, "next": "/ui/"}, headers={"Origin": token_server.url})
        assert answer.status_code == 303, answer.text
        return Console(c, token_server.url)

    yield make
    for c in clients:
        c.close()
