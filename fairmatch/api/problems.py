"""RFC 9457 problem details for every error, never a stack trace."""

from __future__ import annotations

import logging
from http import HTTPStatus
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from sqlalchemy.exc import DBAPIError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.status import HTTP_400_BAD_REQUEST, HTTP_422_UNPROCESSABLE_CONTENT

from fairmatch.db.errors import translated
from fairmatch.errors import DatabaseUnavailable, FairmatchError, ValueRefused, invalid_fields

log = logging.getLogger("fairmatch.api")

PROBLEM_JSON = "application/problem+json"


def problem(
    status: int, title: str, detail: str, *, kind: str | None = None, headers: dict | None = None, **extra: Any
) -> JSONResponse:
    body = {
        "type": f"urn:fairmatch:problem:{kind}" if kind else "about:blank",
        "title": title,
        "status": status,
        "detail": detail,
        **extra,
    }
    return JSONResponse(body, status_code=status, media_type=PROBLEM_JSON, headers=headers)


def _field_errors(exc: RequestValidationError) -> list[dict[str, Any]]:
    # only what is safe to echo: no input values, no exception objects
    return [
        {"loc": list(err.get("loc", ())), "msg": err.get("msg", ""), "type": err.get("type", "")}
        for err in exc.errors()
    ]


async def _on_validation_error(_: Request, exc: RequestValidationError) -> JSONResponse:
    errors = _field_errors(exc)
    if any(e["type"] == "json_invalid" for e in errors):
        return problem(
            HTTP_400_BAD_REQUEST,
            "Malformed JSON",
            "the request body is not valid JSON",
            kind="malformed-json",
            errors=errors,
        )
    return problem(
        HTTP_422_UNPROCESSABLE_CONTENT, "Invalid input", invalid_fields(errors), kind="invalid-input", errors=errors
    )


async def _on_domain_error(request: Request, exc: FairmatchError) -> JSONResponse:
    if isinstance(exc, DatabaseUnavailable):
        log.warning("database unavailable: %s", exc.cause)
    elif isinstance(exc, ValueRefused):
        # the request's fault, and worth a validation rule
        log.warning("database refused a value: %s", exc.cause)
    elif exc.status >= 500:
        return await _on_unexpected(request, exc)
    return problem(exc.status, exc.title, exc.detail, kind=exc.kind, headers=exc.headers, **exc.extra)


async def _on_http_error(_: Request, exc: StarletteHTTPException) -> JSONResponse:
    title = HTTPStatus(exc.status_code).phrase
    return problem(exc.status_code, title, str(exc.detail), headers=getattr(exc, "headers", None))


async def _on_database_error(request: Request, exc: Exception) -> JSONResponse:
    """A SQLAlchemy error that did not pass through an engine's translation (the pool's
    own timeout, for one): translated here by the same rule."""
    error = translated(exc)
    if error is None:
        return await _on_unexpected(request, exc)
    error.__cause__ = exc
    return await _on_domain_error(request, error)


async def _on_unexpected(_: Request, exc: Exception) -> JSONResponse:
    log.exception("unhandled error", exc_info=exc)
    return problem(500, "Internal error", "the server failed; the error was logged", kind="internal")


def install(app: FastAPI) -> None:
    # Starlette types every handler as taking any Exception; it calls each with the class it is added for.
    app.add_exception_handler(RequestValidationError, _on_validation_error)  # type: ignore[arg-type]
    app.add_exception_handler(FairmatchError, _on_domain_error)  # type: ignore[arg-type]
    app.add_exception_handler(StarletteHTTPException, _on_http_error)  # type: ignore[arg-type]
    # SQLAlchemy's errors: 503 for outages, 422 for refused values, 500 for the rest
    app.add_exception_handler(DBAPIError, _on_database_error)
    app.add_exception_handler(PoolTimeout, _on_database_error)
    app.add_exception_handler(Exception, _on_unexpected)
