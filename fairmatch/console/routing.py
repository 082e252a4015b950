"""How the console's routes answer errors: as pages, not problem details.

A missing or expired session goes to the sign-in page; any other refusal is
shown with its reason and status.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Coroutine
from typing import Any
from urllib.parse import quote

from fastapi import APIRouter, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import RedirectResponse
from fastapi.routing import APIRoute
from pydantic import ValidationError

from fairmatch.console import auth, render
from fairmatch.errors import FairmatchError, invalid_fields

log = logging.getLogger("fairmatch.console")

PREFIX = "/ui"


class ConsoleRoute(APIRoute):
    """A route whose errors are answered as console pages, not problem details."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handle = super().get_route_handler()

        async def handled(request: Request) -> Response:
            try:
                return await handle(request)
            except auth.SignInRequired as exc:
                if request.headers.get("x-console-refresh"):
                    return render.page(request, "error.html", None, status=401, title=exc.title, detail=exc.detail)
                where = quote(request.url.path + (f"?{request.url.query}" if request.url.query else ""))
                return RedirectResponse(f"{PREFIX}/sign-in?next={where}", status_code=303)
            except (RequestValidationError, ValidationError) as exc:
                # a query's, a form's or a description's values: each named with what is wrong
                detail = invalid_fields(exc.errors())
                return render.page(request, "error.html", None, status=422, title="Invalid input", detail=detail)
            except FairmatchError as exc:
                if exc.status >= 500:
                    log.warning("console page failed: %s", exc.detail)
                return render.page(request, "error.html", None, status=exc.status, title=exc.title, detail=exc.detail)

        return handled


def console_router() -> APIRouter:
    return APIRouter(route_class=ConsoleRoute, include_in_schema=False)


def local_path(target: str | None) -> str:
    """A console path to go to next (after signing in, after an action): never another site."""
    if target and target.startswith(f"{PREFIX}/") and not target.startswith("//") and "\\" not in target:
        return target
    return f"{PREFIX}/"
