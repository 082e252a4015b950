"""Per-request observation: request id, HTTP metrics and the access log line.

A pure ASGI middleware (the cheapest kind): it tags the request with an id
(the caller's `X-Request-ID` when it is sane, else a new one) that every log
line of the request carries and the answer echoes, and records the request
under its route template, so that paths with ids do not explode the
metrics' label sets.
"""

from __future__ import annotations

import functools
import logging
import os
import re
import time

from fastapi import FastAPI
from prometheus_client import Counter, Histogram
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from fairmatch.logs import request_id
from fairmatch.metrics import HTTP_DURATION, HTTP_REQUESTS

log = logging.getLogger("fairmatch.access")

HEADER = b"x-request-id"
_SANE_ID = re.compile(rb"[A-Za-z0-9._:-]{1,64}")
_METHODS = {"GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"}


def _route_template(scope: Scope) -> str:
    """`/api/v1/jobs/{job_id}` for `/api/v1/jobs/5`. A route knows its path below the
    prefix its router was included with, so the prefix is what precedes the part
    its pattern matches."""
    route = scope.get("route")
    regex = getattr(route, "path_regex", None)
    if route is None or regex is None:
        return "unmatched"
    path = scope["path"]
    start = 0
    while start != -1:
        if regex.match(path[start:]):
            return path[:start] + route.path
        start = path.find("/", start + 1)
    return route.path


def _request_id(scope: Scope) -> str:
    for name, value in scope.get("headers", ()):
        if name == HEADER and _SANE_ID.fullmatch(value):
            return value.decode()
    return os.urandom(16).hex()  # a random UUID's 32 hex digits, without making a UUID


# The series of each label set, looked up once: `labels()` checks and locks on every call.
# Route templates, methods and status codes are few, and so are their combinations.
@functools.cache
def _requests_counter(method: str, route: str, status: int) -> Counter:
    return HTTP_REQUESTS.labels(method, route, str(status))


@functools.cache
def _duration_histogram(method: str, route: str) -> Histogram:
    return HTTP_DURATION.labels(method, route)


class Observe:
    def __init__(self, app: ASGIApp, access_log: bool) -> None:
        self.app = app
        self.access_log = access_log

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        rid = _request_id(scope)
        token = request_id.set(rid)
        started = time.perf_counter()
        status = 500  # what the client gets if the app fails before answering

        async def send_with_id(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                message["headers"] = [*message.get("headers", ()), (HEADER, rid.encode())]
            await send(message)

        try:
            await self.app(scope, receive, send_with_id)
        finally:
            elapsed = time.perf_counter() - started
            method = scope["method"] if scope["method"] in _METHODS else "other"
            route = _route_template(scope)
            _requests_counter(method, route, status).inc()
            _duration_histogram(method, route).observe(elapsed)
            if self.access_log and log.isEnabledFor(logging.INFO):
                client = scope.get("client")
                log.info(
                    "%s %s %d",
                    method,
                    scope["path"],
                    status,
                    extra={
                        "method": method,
                        "path": scope["path"],
                        "route": route,
                        "status": status,
                        "duration_ms": round(elapsed * 1000, 3),
                        "client": client[0] if client else None,
                    },
                )
            request_id.reset(token)


def install(app: FastAPI, access_log: bool) -> None:
    """Add last, so that it is the outermost of the service's middlewares."""
    app.add_middleware(Observe, access_log=access_log)
