"""fairmatch's own /match code behind a raw ASGI endpoint: how much FastAPI costs (measurement only).

`create_raw_app()` is the fairmatch app with POST /api/v1/match answered without FastAPI:
the same middlewares (Observe, RequestLimits), authentication rule, ClaimingResource
validation (on the raw bytes), pinning, connection, service call and answer. Every other
request (and the lifespan) goes to the FastAPI app. Errors are not shaped as the API's, so
it serves only to measure:

    uvicorn --app-dir bench/references --factory raw_asgi_match:create_raw_app --workers 2
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request

from fairmatch.api import matching as matching_api
from fairmatch.api.body_limits import RequestLimits
from fairmatch.api.deps import _authenticate, connection, process_of
from fairmatch.api.observe import Observe
from fairmatch.main import create_app
from fairmatch.matching.pinning import pin_resource
from fairmatch.matching.resource import ClaimingResource
from fairmatch.services import matching as service
from fairmatch.settings import Settings, get_settings

JSON = [(b"content-type", b"application/json")]


def create_raw_app(settings: Settings | None = None) -> Any:
    settings = settings or get_settings()
    app = create_app(settings)
    match_route = next(r for r in matching_api.router.routes if getattr(r, "name", "") == "match")

    async def raw_match(scope: Any, receive: Any, send: Any) -> None:
        scope["app"], scope["route"] = app, match_route
        request = Request(scope, receive)
        body = (await receive())["body"]
        caller = _authenticate(request)
        resource = pin_resource(caller, ClaimingResource.model_validate_json(body))
        process = process_of(request)
        async with connection(request) as conn:
            job = await service.match(conn, resource, settings, process.rng, requester=caller.sub, process=process)
        if job is None:
            await send({"type": "http.response.start", "status": 204, "headers": []})
            await send({"type": "http.response.body", "body": b""})
            return
        answer = job.model_dump_json().encode()
        headers = [*JSON, (b"content-length", str(len(answer)).encode())]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": answer})

    limits = settings.server
    lean = Observe(
        RequestLimits(raw_match, max_body_bytes=limits.max_body_bytes, max_json_depth=limits.max_json_depth),
        access_log=limits.access_log,
    )

    async def dispatch(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["method"] == "POST" and scope["path"] == "/api/v1/match":
            await lean(scope, receive, send)
        else:
            await app(scope, receive, send)

    dispatch.state = app.state  # type: ignore[attr-defined]
    return dispatch
