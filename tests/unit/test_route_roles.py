"""Every route declares the roles it admits in its signature, or is one of the few open ones.

The app is built with create_app and asked through its ASGI interface, without
a server or a database: a refused caller is answered before the route asks
for a connection.
"""

from __future__ import annotations

import asyncio
import inspect
import re
from collections.abc import Iterable, Iterator
from typing import Any

import fastapi.routing
import httpx
import pytest
from fastapi import APIRouter, Depends, FastAPI, Request
from fastapi.dependencies.models import Dependant
from pydantic import BaseModel
from starlette.routing import BaseRoute

from fairmatch.api import problems
from fairmatch.api.deps import OPEN_PATHS, Admin, AnyRole, Operators, Submitters, allow
from fairmatch.auth import policy
from fairmatch.auth.settings import AuthSettings
from fairmatch.auth.tokens import Principal, Role, TokenVerifier, create_token
from fairmatch.console.render import NAVIGATION
from fairmatch.main import API_PREFIX, create_app
from fairmatch.settings import load_settings

SECRET = "route roles test secret, long enough for HS256"
AUTH = AuthSettings(mode="token", secret=SECRET)

ADMIN, OPERATOR, USER, PILOT = Role.admin, Role.operator, Role.user, Role.pilot
EVERY_ROLE = frozenset(Role)

# The role table (docs/how-to/tokens.md): who may call each route at all.
# What a caller then sees or may change is the routes' own logic (job scope, pinning, classes).
ROLES: dict[tuple[str, str], frozenset[Role]] = {
    ("POST", "/jobs"): frozenset({ADMIN, OPERATOR, USER}),
    ("GET", "/jobs"): EVERY_ROLE,
    ("GET", "/jobs/{job_id}"): EVERY_ROLE,
    ("PATCH", "/jobs/{job_id}"): frozenset({ADMIN, OPERATOR, USER}),
    ("DELETE", "/jobs/{job_id}"): frozenset({ADMIN, OPERATOR, USER}),
    ("POST", "/jobs/purge"): frozenset({ADMIN}),
    ("GET", "/jobs/{job_id}/history"): EVERY_ROLE,
    ("GET", "/jobs/by-external-id/{external_id}"): EVERY_ROLE,
    ("DELETE", "/jobs/by-external-id/{external_id}"): frozenset({ADMIN, OPERATOR, USER}),
    ("PUT", "/running/{source}"): frozenset({ADMIN, OPERATOR}),
    ("DELETE", "/taskqueues/{tq_id}"): frozenset({ADMIN, OPERATOR}),
    **{
        ("POST", f"/jobs/{action}"): frozenset({ADMIN, OPERATOR, USER})
        for action in ("kill", "hold", "release", "reschedule", "priority")
    },
    ("GET", "/audit"): frozenset({ADMIN}),
    ("POST", "/jobs/{job_id}/reschedule"): frozenset({ADMIN, OPERATOR, USER}),
    ("POST", "/jobs/{job_id}/status"): frozenset({ADMIN, OPERATOR, PILOT}),
    ("POST", "/match"): frozenset({ADMIN, PILOT}),
    ("POST", "/taskqueues/matching"): frozenset({ADMIN, OPERATOR, PILOT}),
    ("GET", "/taskqueues"): frozenset({ADMIN, OPERATOR, USER}),
    ("GET", "/taskqueues/{tq_id}"): frozenset({ADMIN, OPERATOR, USER}),
    ("GET", "/groups"): frozenset({ADMIN, OPERATOR, USER}),
    ("GET", "/groups/{name}"): frozenset({ADMIN, OPERATOR, USER}),
    ("PUT", "/groups/{name}"): frozenset({ADMIN}),
    ("DELETE", "/groups/{name}"): frozenset({ADMIN}),
    ("GET", "/job-classes"): frozenset({ADMIN, OPERATOR, USER}),
    ("GET", "/job-classes/{name:path}"): frozenset({ADMIN, OPERATOR, USER}),
    ("PUT", "/job-classes/{name:path}"): frozenset({ADMIN}),
    ("DELETE", "/job-classes/{name:path}"): frozenset({ADMIN}),
    ("PUT", "/associations"): frozenset({ADMIN}),
    ("DELETE", "/associations"): frozenset({ADMIN}),
    ("GET", "/associations"): frozenset({ADMIN, OPERATOR}),
    ("GET", "/associations/usage"): frozenset({ADMIN, OPERATOR}),
    ("POST", "/associations/usage/reset"): frozenset({ADMIN}),
    ("GET", "/limits"): frozenset({ADMIN, OPERATOR}),
    ("PUT", "/limits"): frozenset({ADMIN}),
    ("GET", "/site-mask"): EVERY_ROLE,
    ("GET", "/site-mask/check/{site:path}"): frozenset({ADMIN, OPERATOR}),
    ("PUT", "/site-mask/{site:path}"): frozenset({ADMIN, OPERATOR}),
    ("DELETE", "/site-mask/{site:path}"): frozenset({ADMIN, OPERATOR}),
    ("POST", "/priorities/recompute"): frozenset({ADMIN}),
    ("GET", "/shares"): frozenset({ADMIN, OPERATOR}),
    ("GET", "/priorities"): frozenset({ADMIN, OPERATOR, USER}),
    ("GET", "/status"): frozenset({ADMIN, OPERATOR}),
    ("GET", "/pilots"): frozenset({ADMIN, OPERATOR, PILOT}),
    ("GET", "/pilots/{reference:path}"): frozenset({ADMIN, OPERATOR, PILOT}),
}

# The console's pages (fairmatch/console): who may open each. Pilots have none.
CONSOLE_ROLES: dict[tuple[str, str], frozenset[Role]] = {
    ("GET", "/ui/"): frozenset({ADMIN, OPERATOR, USER}),  # users are sent on to their jobs
    ("GET", "/ui/why-not"): frozenset({ADMIN, OPERATOR}),
    ("GET", "/ui/shares"): frozenset({ADMIN, OPERATOR}),
    ("GET", "/ui/sites"): frozenset({ADMIN, OPERATOR}),
    ("GET", "/ui/taskqueues"): frozenset({ADMIN, OPERATOR, USER}),
    ("GET", "/ui/taskqueues/{tq_id}"): frozenset({ADMIN, OPERATOR, USER}),
    ("GET", "/ui/jobs"): frozenset({ADMIN, OPERATOR, USER}),
    ("GET", "/ui/jobs/{job_id}"): frozenset({ADMIN, OPERATOR, USER}),
    ("POST", "/ui/actions/jobs/{action}"): frozenset({ADMIN, OPERATOR, USER}),
    ("POST", "/ui/actions/site-mask/ban"): frozenset({ADMIN, OPERATOR}),
    ("POST", "/ui/actions/site-mask/allow"): frozenset({ADMIN, OPERATOR}),
    ("POST", "/ui/actions/recompute"): frozenset({ADMIN}),
    ("POST", "/ui/sign-out"): frozenset({ADMIN, OPERATOR, USER}),
    ("GET", "/ui/{path:path}"): frozenset({ADMIN, OPERATOR, USER}),  # the console's own 404
}

# What must be served without a caller: probes and scrapers carry no token, the API's
# description is public, and a browser must reach the console's sign-in page and its
# static files before it has a session. Nothing else belongs here.
MUST_BE_OPEN = {"/healthz", "/readyz", "/metrics", "/openapi.json", "/docs", "/docs/static/{name}",
                "/ui/sign-in", "/ui/static/{name}"}  # fmt: skip
# the one open route that is not a read: it takes the token a session starts with
OPEN_FORM = "/ui/sign-in"


# --- the predicate -------------------------------------------------------------------------


def flat(routes: Iterable[BaseRoute]) -> list[Any]:
    """Every route with what its inclusion adds (prefix, router dependencies). FastAPI
    includes routers lazily since 0.165: `app.routes` then holds the included routers."""
    iterate = getattr(fastapi.routing, "iter_route_contexts", None)
    return list(iterate(list(routes))) if iterate else list(routes)


def _dependants(dependant: Dependant) -> Iterator[Dependant]:
    for sub in dependant.dependencies:
        yield sub
        yield from _dependants(sub)


def declared_roles(route: Any) -> frozenset[Role] | None:
    """The roles the route's role dependencies admit together; None when it declares none."""
    dependant = getattr(route, "dependant", None)
    if dependant is None:  # not a FastAPI route: it cannot declare roles
        return None
    found = [frozenset(d.call.roles) for d in _dependants(dependant) if hasattr(d.call, "roles")]
    return frozenset.intersection(*found) if found else None


def undeclared(routes: Iterable[BaseRoute]) -> list[str]:
    """Routes that neither declare roles nor are in the open set."""
    return [
        f"{sorted(r.methods or [])} {r.path}"
        for r in flat(routes)
        if declared_roles(r) is None and r.path not in OPEN_PATHS
    ]


def _operations(app: FastAPI) -> Iterator[tuple[str, str, Any]]:
    for route in flat(app.routes):
        for method in sorted(route.methods or ()):
            yield method, route.path, route


@pytest.fixture(scope="module")
def app() -> FastAPI:
    settings = load_settings(database_url="sqlite+aiosqlite:///./never-opened.db", auth=AUTH)
    built = create_app(settings)
    # what the lifespan would set up for the caller dependency (no database is reached)
    built.state.settings = settings
    built.state.verifier = TokenVerifier(settings.auth)
    return built


# --- every route, declared -------------------------------------------------------------------


def test_every_route_declares_its_roles_or_is_open(app):
    assert undeclared(app.routes) == []


def test_the_open_set_holds_only_what_must_be_open(app):
    assert set(OPEN_PATHS) == MUST_BE_OPEN
    open_routes = [r for r in flat(app.routes) if r.path in OPEN_PATHS]
    assert {r.path for r in open_routes} == MUST_BE_OPEN
    for route in open_routes:
        assert not route.path.startswith(API_PREFIX)
        assert set(route.methods) <= ({"GET", "HEAD", "POST"} if route.path == OPEN_FORM else {"GET", "HEAD"})
        assert declared_roles(route) is None, f"{route.path} is open and declares roles too"


def test_every_api_route_has_the_roles_of_the_table(app):
    declared = {
        (method, path.removeprefix(API_PREFIX)): declared_roles(route)
        for method, path, route in _operations(app)
        if path.startswith(f"{API_PREFIX}/")
    }
    assert declared == ROLES


def test_every_console_page_has_the_roles_of_the_table(app):
    declared = {
        (method, path): declared_roles(route)
        for method, path, route in _operations(app)
        if path.startswith("/ui/") and path not in OPEN_PATHS
    }
    assert declared == CONSOLE_ROLES


def test_the_navigation_links_only_to_pages_the_role_may_open():
    for _, _, path, roles in NAVIGATION:
        assert set(roles) <= CONSOLE_ROLES["GET", path], path


def test_a_pilot_opens_no_console_page(app):
    token = _bearer(Role.pilot)["Authorization"].removeprefix("Bearer ")
    answers = ask(app, *(("GET", _concrete(path), {"Cookie": f"fairmatch_console={token}"}, None)
                         for method, path in CONSOLE_ROLES if method == "GET"))  # fmt: skip
    for r in answers:
        assert r.status_code == 403 and "pilots have no console" in r.text


def test_a_route_without_roles_fails_the_check():
    """What the first test would say of a route someone adds without declaring roles."""

    async def authenticated_only(request: Request) -> Principal:
        return Principal("x", Role.admin)

    router = APIRouter()

    @router.get("/declared")
    async def declared(caller: Admin) -> dict:
        return {}

    @router.get("/forgotten")
    async def forgotten() -> dict:
        return {}

    @router.post("/token-but-no-roles")
    async def token_but_no_roles(caller: Principal = Depends(authenticated_only)) -> dict:  # noqa: B008
        return {}

    throwaway = FastAPI(docs_url=None, redoc_url=None)  # as the service makes it
    throwaway.include_router(router, prefix=API_PREFIX)
    throwaway.add_route("/plain", lambda request: None)
    assert undeclared(throwaway.routes) == [
        f"['GET'] {API_PREFIX}/forgotten",
        f"['POST'] {API_PREFIX}/token-but-no-roles",
        "['GET', 'HEAD'] /plain",
    ]


def test_a_router_level_role_dependency_counts():
    router = APIRouter(dependencies=[Depends(allow(Role.admin, Role.operator))])

    @router.get("/x")
    async def x() -> dict:
        return {}

    throwaway = FastAPI(docs_url=None, redoc_url=None)
    throwaway.include_router(router, prefix=API_PREFIX)
    [route] = [r for r in flat(throwaway.routes) if r.path == f"{API_PREFIX}/x"]
    assert declared_roles(route) == {Role.admin, Role.operator}
    assert undeclared(throwaway.routes) == []


# --- the dependency ---------------------------------------------------------------------------


def test_role_dependencies_are_coroutines():
    """FastAPI runs plain functions in a thread pool."""
    for alias in (Admin, Operators, Submitters, AnyRole):
        [depends] = alias.__metadata__
        assert inspect.iscoroutinefunction(depends.dependency)


def test_the_role_sets_name_every_role_once():
    for roles in (policy.ADMINS, policy.OPERATORS, policy.SUBMITTERS, policy.PILOTS,
                  policy.PILOTS_AND_OPERATORS, policy.ANYONE):  # fmt: skip
        assert len(set(roles)) == len(roles) and roles[0] is Role.admin
    assert set(policy.ANYONE) == EVERY_ROLE


def _bearer(role: Role) -> dict[str, str]:
    token = create_token(AUTH, role=role, sub=f"a-{role.value}", groups=["g1"], ttl_seconds=600)
    return {"Authorization": f"Bearer {token}"}


def _concrete(path: str) -> str:
    return re.sub(r"\{[^}]+\}", "1", path)


def ask(app: FastAPI, *requests: tuple[str, str, dict[str, str], Any]) -> list[httpx.Response]:
    """(method, path, headers, JSON body or None) through the app's ASGI interface, without its lifespan."""

    async def send() -> list[httpx.Response]:
        transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            return [await client.request(m, p, headers=h, json=j) for m, p, h, j in requests]

    return asyncio.run(send())


def test_every_refused_role_gets_403_before_any_validation(app):
    """No body, no valid path parameter, no database: the role is decided first."""
    asked = [
        (method, path, role) for (method, path), admitted in ROLES.items() for role in sorted(EVERY_ROLE - admitted)
    ]
    answers = ask(app, *((m, _concrete(API_PREFIX + p), _bearer(role), None) for m, p, role in asked))
    for (method, path, role), r in zip(asked, answers, strict=True):
        admitted = ROLES[method, path]
        assert r.status_code == 403, (method, path, role, r.text)
        refused, allowed = REFUSAL.fullmatch(r.json()["detail"]).groups()
        assert (refused, set(allowed.split(", "))) == (role.value, {a.value for a in admitted})


REFUSAL = re.compile(r"role (\w+) may not do this \(allowed: ([\w, ]+)\)")


def test_no_token_is_401_on_every_api_route(app):
    answers = ask(app, *((method, _concrete(API_PREFIX + path), {}, None) for method, path in ROLES))
    for (method, path), r in zip(ROLES, answers, strict=True):
        assert r.status_code == 401, (method, path, r.text)
        assert r.headers["www-authenticate"].startswith("Bearer")


class Body(BaseModel):
    n: int


def test_a_refused_role_learns_nothing_of_the_body_an_admitted_one_gets_422():
    throwaway = FastAPI(docs_url=None, redoc_url=None)
    problems.install(throwaway)
    throwaway.state.settings = load_settings(auth=AUTH)
    throwaway.state.verifier = TokenVerifier(AUTH)

    @throwaway.post("/admin-only")
    async def admin_only(body: Body, caller: Admin) -> dict:
        return {"sub": caller.sub}

    refused, invalid, accepted = ask(
        throwaway,
        ("POST", "/admin-only", _bearer(Role.user), {"n": "not a number"}),
        ("POST", "/admin-only", _bearer(Role.admin), {"n": "not a number"}),
        ("POST", "/admin-only", _bearer(Role.admin), {"n": 1}),
    )
    assert (refused.status_code, refused.json()["detail"]) == (403, "role user may not do this (allowed: admin)")
    assert invalid.status_code == 422
    assert accepted.json() == {"sub": "a-admin"}
