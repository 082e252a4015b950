"""The console adds routes after the API's and nothing else: /match is served as without it."""

from __future__ import annotations

from fairmatch.main import create_app
from fairmatch.settings import load_settings
from tests.unit.test_route_roles import flat

DATABASE = "sqlite+aiosqlite:///./never-opened.db"


def paths(enabled: bool) -> tuple[list[str], list]:
    app = create_app(load_settings(database_url=DATABASE, console={"enabled": enabled}))
    return [route.path for route in flat(app.routes)], app.user_middleware


def test_the_console_comes_after_every_api_route_and_adds_no_middleware():
    with_console, middleware = paths(True)
    without, plain_middleware = paths(False)
    assert with_console[: len(without)] == without  # the API's routes, in their order, first
    added = with_console[len(without) :]
    assert added and all(path.startswith("/ui/") for path in added)
    assert [m.cls for m in middleware] == [m.cls for m in plain_middleware]


def test_a_disabled_console_routes_nothing_under_ui():
    without, _ = paths(False)
    assert not [path for path in without if path.startswith("/ui")]
