"""The console under /ui: sign-in, the static files, and every page's router."""

from __future__ import annotations

import mimetypes
from pathlib import Path

from fastapi import FastAPI, Request, Response
from fastapi.responses import RedirectResponse

from fairmatch.auth.settings import AuthMode
from fairmatch.console import auth, render, states
from fairmatch.console.forms import read_form
from fairmatch.console.pages import ROUTERS
from fairmatch.console.routing import PREFIX, console_router, local_path
from fairmatch.errors import FairmatchError, NotFound

STATIC = Path(__file__).parent / "static"
# the console's own files, read once: name -> (content, media type)
_FILES = {
    path.name: (path.read_bytes(), mimetypes.guess_type(path.name)[0] or "application/octet-stream")
    for path in STATIC.iterdir()
    if path.is_file()
}
# the states' colours, generated from fairmatch/console/states.py
_FILES["states.css"] = (states.stylesheet().encode(), "text/css")
# no page is cached, but the files change only with the package's version
STATIC_CACHE = "public, max-age=3600"

router = console_router()


@router.get("/static/{name}")
async def static_file(name: str) -> Response:
    found = _FILES.get(name)
    if found is None:
        raise NotFound(f"the console has no file {name!r}")
    content, media_type = found
    return Response(content, media_type=media_type, headers={**render.SECURITY_HEADERS, "Cache-Control": STATIC_CACHE})


@router.get("/sign-in")
async def sign_in_page(request: Request, next: str | None = None) -> Response:
    settings = request.app.state.settings
    if settings.auth.mode is AuthMode.none:
        return RedirectResponse(local_path(next), status_code=303)
    return render.page(request, "sign_in.html", None, next=local_path(next), problem=None)


@router.post("/sign-in")
async def sign_in(request: Request) -> Response:
    """Takes the token from the form, checks it as the API would, and keeps it in the cookie."""
    form = await read_form(request)
    target = local_path(form.get("next"))
    if not auth.same_origin(request):
        return render.page(request, "sign_in.html", None, status=403, next=target,
                           problem="the form was not sent from this console's own page")  # fmt: skip
    token = form.get("token", "").strip()
    try:
        _, seconds = auth.signed_in(request, token)
    except FairmatchError as exc:
        return render.page(request, "sign_in.html", None, status=exc.status, next=target, problem=exc.detail)
    response = RedirectResponse(target, status_code=303)
    auth.keep_cookie(response, request, auth.COOKIE, token, max_age=seconds)
    return response


@router.post("/sign-out")
async def sign_out(request: Request, caller: auth.Viewer) -> Response:
    auth.check_form(request, await read_form(request))
    response = RedirectResponse(f"{PREFIX}/sign-in", status_code=303)
    response.delete_cookie(auth.COOKIE, path=auth.COOKIE_PATH, httponly=True, samesite="strict")
    return response


# included after every page: a console path no page serves
missing = console_router()


@missing.get("/{path:path}")
async def no_such_page(path: str, caller: auth.Viewer) -> Response:
    raise NotFound(f"the console has no page /ui/{path}")


def install(app: FastAPI) -> None:
    """Mounts the console under /ui (after the API: no request of the API is routed past it)."""
    app.include_router(router, prefix=PREFIX)
    for page_router in ROUTERS:
        app.include_router(page_router, prefix=PREFIX)
    app.include_router(missing, prefix=PREFIX)
