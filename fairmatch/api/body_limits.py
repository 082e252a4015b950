"""Request body limits, enforced before the application parses a byte.

A pure ASGI middleware (no BaseHTTPMiddleware: it must see the raw body
stream and answer without starting the app):

- a Content-Length over `server.max_body_bytes` is refused with 413 unread;
- a body that turns out longer while streaming (chunked) is refused with 413
  as soon as it crosses the limit;
- a JSON body nested deeper than `server.max_json_depth` is refused with 400
  (`urn:fairmatch:problem:json-too-deep`): deep nesting costs the JSON
  parser and pydantic recursion (a RecursionError past ~1000 levels).

The body is buffered (the app reads it whole anyway) and handed on unchanged.
"""

from __future__ import annotations

import functools
import json
import re

from fastapi import FastAPI
from fastapi.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from fairmatch.api.problems import problem
from fairmatch.settings import Settings

# --- nesting depth, measured on the raw bytes -----------------------------------------
#
# No token loop in Python (seconds for 32 MiB of brackets): C-speed passes only.
# 1. Drop escaped backslashes, then escaped quotes: every `"` left delimits a string.
# 2. Keep only `"`, brackets and braces (braces folded into brackets), and drop the
#    `""` pairs: an empty string, or one string's end next to the next one's start,
#    so every bracket stays inside or outside a string as before.
# 3. One possessive regex (no backtracking, linear) matches exactly when some
#    prefix reaches depth limit + 1: at each level, skip complete strings and
#    complete arrays no deeper than the levels left, then descend one `[` more.
# Valid JSON is measured exactly; invalid JSON that is not too deep is left to
# the app's parser, which answers 400 malformed-json.

_STRUCTURAL = b'"[]{}'
_FOLD_BRACES = bytes.maketrans(b"{}", b"[]")
_NOT_STRUCTURAL = bytes(b for b in range(256) if b not in _STRUCTURAL)
_STRING = r'"[^"]*"'


def _structure(body: bytes) -> bytes:
    """The body reduced to `"` and `[`/`]`, with the same strings and nesting."""
    text = body.replace(b"\\\\", b"").replace(b'\\"', b"")
    return text.translate(_FOLD_BRACES, _NOT_STRUCTURAL).replace(b'""', b"")


def _nested_at_most(levels: int) -> str:
    """Strings and complete arrays nested at most `levels` deep, possessively."""
    pattern = rf"(?:{_STRING})*+"
    for _ in range(levels):
        pattern = rf"(?:{_STRING}|\[{pattern}\])*+"
    return pattern


@functools.lru_cache(maxsize=4)
def _reaches_depth_above(limit: int) -> re.Pattern[bytes]:
    # O(limit²) characters: ~10 kB for the default 32, compiled once per limit
    descent = "".join(_nested_at_most(limit - level) + r"\[" for level in range(limit + 1))
    return re.compile(descent.encode())


def _as_utf8(body: bytes) -> bytes:
    # json.loads also takes UTF-16 and UTF-32: measure what it will parse
    encoding = json.detect_encoding(body)
    if encoding in ("utf-8", "utf-8-sig"):
        return body
    try:
        return body.decode(encoding).encode("utf-8", "surrogatepass")
    except UnicodeError:
        return body  # the app's parser refuses it


def json_too_deep(body: bytes, limit: int) -> bool:
    """Whether the JSON text `body` nests arrays/objects more than `limit` deep."""
    # each level opens with a bracket or brace (a byte of it in UTF-16/32 too): a body with
    # no more of them than the limit, as any pilot's is, needs no measuring
    if body.count(b"[") + body.count(b"{") <= limit:
        return False
    return _reaches_depth_above(limit).match(_structure(_as_utf8(body))) is not None


# --- the middleware -------------------------------------------------------------------


def _header(scope: Scope, name: bytes) -> bytes | None:
    for key, value in scope["headers"]:
        if key == name:
            return value
    return None


def _declared_length(scope: Scope) -> int | None:
    value = _header(scope, b"content-length")
    return int(value) if value is not None and value.strip().isdigit() else None


def _is_json(scope: Scope) -> bool:
    """The content types FastAPI parses as JSON: application/json and application/*+json."""
    value = _header(scope, b"content-type")
    if value is None:
        return False
    media_type = value.split(b";", 1)[0].strip().lower()
    return media_type == b"application/json" or (
        media_type.startswith(b"application/") and media_type.endswith(b"+json")
    )


class _TooLarge(Exception):
    pass


class _Disconnected(Exception):
    pass


async def _read_body(receive: Receive, limit: int) -> bytes:
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise _Disconnected
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise _TooLarge
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


def _replaying(body: bytes, receive: Receive) -> Receive:
    """`receive` for the app: the buffered body once, then the client's own messages."""
    delivered = False

    async def replay() -> Message:
        nonlocal delivered
        if delivered:
            return await receive()  # e.g. http.disconnect
        delivered = True
        return {"type": "http.request", "body": body, "more_body": False}

    return replay


class RequestLimits:
    def __init__(self, app: ASGIApp, *, max_body_bytes: int, max_json_depth: int) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes
        self.max_json_depth = max_json_depth

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = _declared_length(scope)
        if declared is not None and declared > self.max_body_bytes:
            # answered unread: uvicorn discards the rest and keeps the connection usable
            await self._too_large(declared)(scope, receive, send)
            return
        try:
            body = await _read_body(receive, self.max_body_bytes)
        except _TooLarge:
            await self._too_large(None)(scope, receive, send)
            return
        except _Disconnected:
            return  # nobody left to answer
        if body and _is_json(scope) and json_too_deep(body, self.max_json_depth):
            await self._too_deep()(scope, receive, send)
            return
        await self.app(scope, _replaying(body, receive), send)

    def _too_large(self, declared: int | None) -> JSONResponse:
        size = f"{declared} bytes" if declared is not None else "over the limit"
        return problem(
            413, "Content too large",
            f"the request body is {size}; the limit is {self.max_body_bytes} bytes",
            kind="body-too-large",
        )  # fmt: skip

    def _too_deep(self) -> JSONResponse:
        return problem(
            400, "JSON too deep",
            f"the request body nests arrays and objects more than {self.max_json_depth} levels deep",
            kind="json-too-deep",
        )  # fmt: skip


def install(app: FastAPI, settings: Settings) -> None:
    app.add_middleware(
        RequestLimits,
        max_body_bytes=settings.server.max_body_bytes,
        max_json_depth=settings.server.max_json_depth,
    )
