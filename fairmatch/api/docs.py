"""The interactive API description at /docs, served entirely by the service.

FastAPI's own page loads Swagger UI from a CDN: a browser that cannot reach it
(a site without internet) shows a blank page. Here Swagger UI's files come from
the `swagger-ui-bundle-v2` package (Swagger UI's dist, Apache-2.0), a dependency,
and are served under /docs/static, so the page needs nothing beyond this service.
Swagger UI's online validator is off: it would send the description's URL away.

There is no /redoc: it would be a second viewer of the same description, with
its own bundle to ship.
"""

from __future__ import annotations

import mimetypes
from pathlib import Path

from fastapi import FastAPI, Request, Response
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import FileResponse, HTMLResponse
from swagger_ui_bundle import swagger_ui_path

from fairmatch.errors import NotFound

DOCS = "/docs"
STATIC = f"{DOCS}/static"
SWAGGER_UI = Path(str(swagger_ui_path))
# the files the page loads: nothing else of the package's directory is served
FILES = ("swagger-ui-bundle.js", "swagger-ui.css", "favicon-32x32.png")
# the files change only with the package's version
STATIC_CACHE = "public, max-age=3600"


def install(app: FastAPI) -> None:
    """Serves /docs and its files (the app is made with `docs_url=None, redoc_url=None`)."""
    assert app.openapi_url is not None

    @app.get(DOCS, include_in_schema=False)
    async def swagger_ui(request: Request) -> HTMLResponse:
        root = request.scope.get("root_path", "").rstrip("/")
        return get_swagger_ui_html(
            openapi_url=root + str(app.openapi_url),
            title=f"{app.title} — API",
            swagger_js_url=f"{root}{STATIC}/swagger-ui-bundle.js",
            swagger_css_url=f"{root}{STATIC}/swagger-ui.css",
            swagger_favicon_url=f"{root}{STATIC}/favicon-32x32.png",
            oauth2_redirect_url=None,  # the API declares no OAuth2 flow
            swagger_ui_parameters={"validatorUrl": None},
        )

    @app.get(f"{STATIC}/{{name}}", include_in_schema=False)
    async def swagger_ui_file(name: str) -> Response:
        if name not in FILES:
            raise NotFound(f"/docs has no file {name!r}")
        media_type = mimetypes.guess_type(name)[0] or "application/octet-stream"
        return FileResponse(SWAGGER_UI / name, media_type=media_type, headers={"Cache-Control": STATIC_CACHE})
